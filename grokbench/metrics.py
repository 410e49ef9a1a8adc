"""Per-step metrics, computed from the training step's own logits and gradients.

Shape letters: N examples, K classes. Every metric is a scalar in the metric dtype
(float32, or float64 for runs that use float64); names and meanings:

- `train_loss`: the training objective as the step computed it (for `standard` CE it
  rounds to 0 past the cliff, which is the bug, so it is kept as is).
- `train_ce`: the true cross-entropy of the same logits, mean softplus(-m), from the
  margins: accurate past every cliff, used by the slingshot spike rule.
- `train_acc`: fraction of examples whose argmax is the label.
- `margin_mean`, `margin_min`, `margin_median`: logit margin m = z_t - logsumexp_{j!=t} z_j
  (`numerics.logit_margin`), from logit differences, never through the loss. bf16/fp16
  logits are first widened to float32 (exact), so the margin itself is not rounded to
  bf16's 3 significant digits.
- `frac_past_cliff`: fraction of examples with m >= precision_cliff(compute dtype).
- `logit_grad_sum`: mean over examples of |sum_k dl_i/dz_ik| for the per-example loss
  l_i: 0 for a correct CE gradient, ~e^-m once standard CE's target gradient rounds to 0.
- `logit_grad_asym`: sum_i |sum_k g_ik| / sum_ik |g_ik| in [0, 1]: the same, scale-free
  (1 means every example's target gradient is 0 while the others are not).
- `adam_step`: RMS over all parameters of the optimizer direction m_hat / (sqrt(v_hat) + eps)
  (before weight decay and learning rate): ~1 while |g| >> eps, ~|g|/eps below it.
- `param_norm`: global L2 norm of the parameters the step started from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import numerics

__all__ = []  # package-internal: only other harness modules use these names

STEP_METRICS: tuple[str, ...] = (
    "train_loss",
    "train_ce",
    "train_acc",
    "margin_mean",
    "margin_min",
    "margin_median",
    "frac_past_cliff",
    "logit_grad_sum",
    "logit_grad_asym",
    "adam_step",
    "param_norm",
)
"""Metrics recorded at every step (see the module docstring)."""

_TEST_METRICS: tuple[str, ...] = ("test_loss", "test_acc")
"""Metrics recorded every `eval_every` steps on the test split."""


def metric_dtype(compute_dtype: np.dtype) -> np.dtype:
    """float64 for float64 runs, else float32 (exact for bf16/fp16/fp32 values)."""
    return np.dtype(np.float64) if compute_dtype == np.float64 else np.dtype(np.float32)


def accuracy(logits_NxK: jax.Array, labels_N: jax.Array, dtype: np.dtype) -> jax.Array:
    """The fraction of examples whose argmax is the label, in `dtype`."""
    predicted_N = jnp.argmax(logits_NxK, axis=-1).astype(labels_N.dtype)  # int64 under x64
    return jnp.mean((predicted_N == labels_N).astype(dtype))


def sum_squares(tree: object, dtype: np.dtype) -> tuple[jax.Array, int]:
    """(sum of the squares of every leaf, widened to `dtype` first; number of elements)."""
    leaves = jax.tree.leaves(tree)
    total = sum(jnp.sum(jnp.square(leaf.astype(dtype))) for leaf in leaves)
    return total, sum(leaf.size for leaf in leaves)


def step_metrics(
    *,
    logits_NxK: jax.Array,
    dlogits_NxK: jax.Array,
    loss: jax.Array,
    labels_N: jax.Array,
    direction: object,
    params: object,
    cliff_dtype: np.dtype,
) -> dict[str, jax.Array]:
    """The `STEP_METRICS` of one step; `dlogits_NxK` is d(mean loss)/d(logits), and
    `cliff_dtype` the dtype whose precision cliff `frac_past_cliff` counts from."""
    dt = metric_dtype(np.dtype(logits_NxK.dtype))
    z_NxK = logits_NxK.astype(dt)  # widening is exact
    margin_N = numerics.logit_margin(z_NxK, labels_N)
    n = labels_N.shape[0]
    # The mean's 1/N is undone so the sum is that of one example's loss gradient.
    g_NxK = dlogits_NxK.astype(dt) * jnp.asarray(n, dt)
    # The collapse statistics are numerics' monitor, fed the rows this step already has.
    collapse = numerics.collapse_stats_from_rows(
        margin_N,
        jnp.take_along_axis(g_NxK, labels_N[:, None], axis=-1)[:, 0],
        jnp.sum(g_NxK, axis=-1),
        jnp.sum(jnp.abs(g_NxK), axis=-1),
        jnp.max(z_NxK, axis=-1),
        dtype=cliff_dtype,
    )
    sq_dir, n_dir = sum_squares(direction, dt)
    sq_par, _ = sum_squares(params, dt)
    return {
        "train_loss": loss.astype(dt),
        # softplus(-m) = log(1 + e^-m) via logaddexp: no 1 + e^-m is ever rounded.
        "train_ce": jnp.mean(jax.nn.softplus(-margin_N)),
        "train_acc": accuracy(z_NxK, labels_N, dt),
        "margin_mean": jnp.mean(margin_N),
        "margin_min": collapse.margin_min,
        "margin_median": collapse.margin_median,
        "frac_past_cliff": collapse.frac_past_cliff,
        "logit_grad_sum": collapse.grad_sum_mean,
        "logit_grad_asym": collapse.grad_sum_ratio,
        "adam_step": jnp.sqrt(sq_dir / jnp.asarray(n_dir, dt)),
        "param_norm": jnp.sqrt(sq_par),
    }


def eval_metrics(logits_NxK: jax.Array, loss: jax.Array, labels_N: jax.Array) -> dict:
    """The `_TEST_METRICS`: the objective's mean loss and the accuracy on the test split."""
    dt = metric_dtype(np.dtype(logits_NxK.dtype))
    return {"test_loss": loss.astype(dt), "test_acc": accuracy(logits_NxK, labels_N, dt)}
