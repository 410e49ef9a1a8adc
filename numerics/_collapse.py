"""A Softmax Collapse monitor for anyone's training loop: `collapse_stats`."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from numerics import _validate, standard
from numerics._cliffs import precision_cliff
from numerics._cross_entropy import logit_margin, prepare
from numerics._validate import Axis


class CollapseStats(NamedTuple):
    """What `collapse_stats` measures over the kept examples of one batch (0-d arrays).

    A NamedTuple, so a pytree: return it from a jitted step, `vmap` it, or log
    `stats._asdict()`.
    """

    frac_past_cliff: jax.Array  # fraction with margin m >= precision_cliff(dtype)
    frac_zero_target_grad: jax.Array  # fraction whose target gradient is exactly 0
    grad_sum_max: jax.Array  # max over rows of |sum_k g_k|: 0 for a correct CE gradient
    grad_sum_mean: jax.Array  # mean over rows of |sum_k g_k|
    grad_sum_ratio: jax.Array  # sum_i |sum_k g_ik| / sum_ik |g_ik|, in [0, 1]
    margin_min: jax.Array  # the margin's quantiles, m = z_t - logsumexp_{j != t} z_j
    margin_median: jax.Array
    margin_max: jax.Array
    max_logit: jax.Array  # the largest kept logit


def metric_dtype(dtype) -> np.dtype:
    """float64 for float64, else float32: every narrower float widens to it exactly."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _masked_median(values: jax.Array, kept: jax.Array) -> jax.Array:
    """The median of `values` where `kept` (NaN if a kept value is NaN or none is kept)."""
    n = jnp.sum(kept)
    ordered = jnp.sort(jnp.where(kept, values, jnp.inf))  # the kept values come first
    lo = ordered[jnp.maximum((n - 1) // 2, 0)]
    hi = ordered[jnp.minimum(n // 2, values.shape[0] - 1)]
    nan = jnp.asarray(jnp.nan, values.dtype)
    median = jnp.where(n > 0, (lo + hi) / 2, nan)
    return jnp.where(jnp.any(kept & jnp.isnan(values)), nan, median)


def collapse_stats_from_rows(
    margins: ArrayLike,
    target_grads: ArrayLike,
    grad_sums: ArrayLike,
    grad_abs_sums: ArrayLike,
    max_logits: ArrayLike,
    *,
    dtype,
    where: ArrayLike | None = None,
) -> CollapseStats:
    r"""`collapse_stats` from per-row values a training step already has: no second pass.

    Each argument is one value per example, shape (N,): the margin m_i, the target
    gradient g_i,t, the row sum sum_k g_ik and sum_k |g_ik| of the per-example loss's
    gradient with respect to the logits, and the row's largest logit. The statistics
    are computed in the dtype of `margins` (widen bf16 margins to float32 first: a
    margin rounded to bf16 keeps 3 digits).

    Example:
      >>> import jax.numpy as jnp
      >>> m = jnp.array([3.0, 6.0, 20.0])  # margins of three examples
      >>> g_t = jnp.array([-0.05, 0.0, 0.0])  # standard CE's target gradient past the cliff
      >>> s = jnp.array([0.0, 2.5e-3, 2.1e-9])  # each row's sum of gradients
      >>> stats = collapse_stats_from_rows(m, g_t, s, 2 * jnp.abs(g_t) + s, m, dtype="bfloat16")
      >>> round(float(stats.frac_past_cliff), 4), round(float(stats.frac_zero_target_grad), 4)
      (0.6667, 0.6667)

    Args:
      margins: (N,) margins m_i.
      target_grads: (N,) gradients at each row's target.
      grad_sums: (N,) signed sums of each row's gradient over the classes.
      grad_abs_sums: (N,) sums of the absolute values of each row's gradient.
      max_logits: (N,) each row's largest logit.
      dtype: the dtype the logits (and the loss) were computed in; it sets the cliff.
      where: optional (N,) boolean mask of the examples to count (False: padding).

    Returns:
      A `CollapseStats` of 0-d arrays in the dtype of `margins`. With no kept example
      every statistic is NaN.
    """
    margins = _validate.float_array(margins, "margins")
    dt = margins.dtype
    rows = [margins] + [
        _validate.float_array(v, name).astype(dt)
        for v, name in (
            (target_grads, "target_grads"),
            (grad_sums, "grad_sums"),
            (grad_abs_sums, "grad_abs_sums"),
            (max_logits, "max_logits"),
        )
    ]
    if any(v.ndim != 1 or v.shape != margins.shape for v in rows):
        shapes = ", ".join(str(v.shape) for v in rows)
        raise ValueError(f"every per-row value must have one shape (N,); got {shapes}.")
    margins, target_grads, grad_sums, grad_abs_sums, max_logits = rows
    cliff = jnp.asarray(precision_cliff(dtype), dt)
    row_sum_N = jnp.abs(grad_sums)
    tiny = jnp.asarray(np.finfo(dt).tiny, dt)  # 0/0 -> 0 when every gradient is exactly 0
    if where is None:
        return CollapseStats(
            frac_past_cliff=jnp.mean((margins >= cliff).astype(dt)),
            frac_zero_target_grad=jnp.mean((target_grads == 0).astype(dt)),
            grad_sum_max=jnp.max(row_sum_N),
            grad_sum_mean=jnp.mean(row_sum_N),
            grad_sum_ratio=jnp.sum(row_sum_N) / jnp.maximum(jnp.sum(grad_abs_sums), tiny),
            margin_min=jnp.min(margins),
            margin_median=jnp.median(margins),
            margin_max=jnp.max(margins),
            max_logit=jnp.max(max_logits),
        )
    kept = jnp.broadcast_to(_validate.entry_mask(where, margins.shape), margins.shape)
    count = jnp.sum(kept.astype(dt))
    zero = jnp.zeros((), dt)

    def mean(v):
        return jnp.sum(jnp.where(kept, v.astype(dt), zero)) / count

    def extreme(fn, v, fill):
        return jnp.where(count > 0, fn(jnp.where(kept, v, fill)), jnp.asarray(jnp.nan, dt))

    return CollapseStats(
        frac_past_cliff=mean(margins >= cliff),
        frac_zero_target_grad=mean(target_grads == 0),
        grad_sum_max=extreme(jnp.max, row_sum_N, zero),
        grad_sum_mean=mean(row_sum_N),
        grad_sum_ratio=extreme(
            lambda v: jnp.sum(v) / jnp.maximum(jnp.sum(jnp.where(kept, grad_abs_sums, zero)), tiny),
            row_sum_N,
            zero,
        ),
        margin_min=extreme(jnp.min, margins, jnp.inf),
        margin_median=_masked_median(margins, kept),
        margin_max=extreme(jnp.max, margins, -jnp.inf),
        max_logit=extreme(jnp.max, max_logits, -jnp.inf),
    )


def collapse_stats(
    logits: ArrayLike,
    labels: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
    *,
    grads: ArrayLike | None = None,
) -> CollapseStats:
    r"""How close a batch is to Softmax Collapse, in the logits' own dtype.

    For integer-label logits: the fraction of kept examples whose margin
    m = z_t - logsumexp_{j != t} z_j is at or past `precision_cliff(logits.dtype)`;
    the fraction whose target gradient is exactly 0; |sum_k g_k| per row (max and
    mean) and sum_i |sum_k g_ik| / sum_ik |g_ik|, which are 0 for a correct
    cross-entropy gradient and grow as collapsed rows keep their non-target
    gradients; the margin's min, median and max; and the largest logit.

    The gradient g is `grads` if given (d loss_i / d logits of the loss you train
    with, per example), else that of the standard cross-entropy
    (`numerics.standard.cross_entropy`, optax's formula bit for bit): what an optax
    training step gets from these logits. Margins come from logit differences
    (`logit_margin`) on the logits widened exactly to float32 (float64 for float64),
    and all statistics are computed there. One extra forward and backward pass of
    the standard loss over the logits (none with `grads`); for a loop that already
    has per-row values, `collapse_stats_from_rows` takes them directly. jit-safe.

    A hook for an optax training step (docs/collapse-monitor.md has the whole loop):

        def loss_fn(params, x, y):
            logits = model.apply(params, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        stats = numerics.collapse_stats(logits, y)  # log stats._asdict()

    Example:
      >>> import jax.numpy as jnp
      >>> z = jnp.array([[9.0, -9.0, -9.0], [1.0, 0.0, 0.0]], jnp.bfloat16)
      >>> stats = collapse_stats(z, jnp.array([0, 0]))
      >>> float(stats.frac_past_cliff), float(stats.frac_zero_target_grad)  # bf16 cliff 5.5
      (0.5, 0.5)
      >>> float(stats.grad_sum_max) > 0  # the collapsed row's gradients do not sum to 0
      True

    Edge cases: a NaN logit gives NaN margins, so NaN quantiles (the fractions do
    not count it as past the cliff); with no kept example every statistic is NaN.

    Args:
      logits: floating-point logits, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis, a tuple of axes, or None.
      where: optional boolean mask, read as `cross_entropy` reads it: of the logits'
        rank it masks entries, of the labels' rank whole examples. Masked entries are
        left out of the margins and the max; rows with no kept entry are not counted.
      grads: optional gradient of the per-example losses with respect to `logits`
        (their shape): then measured instead of standard cross-entropy's.

    Returns:
      A `CollapseStats` of 0-d float32 arrays (float64 for float64 logits).
    """
    dtype = _validate.float_array(logits, "logits").dtype
    flat, labels, mask = prepare(logits, labels, axis, where)
    if grads is None:
        # optax's integer-label cross-entropy, as numerics.standard computes it.
        grads = jax.grad(lambda z: standard.cross_entropy(z, labels, where=mask).sum())(flat)
    else:
        grads = _validate.float_array(grads, "grads")
        if grads.shape != jnp.shape(logits):
            raise ValueError(
                f"grads of shape {grads.shape} must have the shape of logits {jnp.shape(logits)}."
            )
        axes = _validate.class_axes(grads, axis, "grads")
        grads = _validate.classes_last(grads, axes)
    dt = metric_dtype(dtype)
    z = flat.astype(dt)  # exact
    g = grads.astype(dt)
    if mask is not None:
        z = jnp.where(mask, z, -jnp.inf)
        g = jnp.where(mask, g, jnp.zeros((), dt))
    z, labels, g = z.reshape(-1, z.shape[-1]), labels.reshape(-1), g.reshape(-1, g.shape[-1])
    target_grads = jnp.take_along_axis(g, labels[:, None], axis=-1, mode="clip")[:, 0]
    kept = None if mask is None else jnp.any(mask, axis=-1).reshape(-1)
    return collapse_stats_from_rows(
        logit_margin(z, labels),
        target_grads,
        jnp.sum(g, axis=-1),
        jnp.sum(jnp.abs(g), axis=-1),
        jnp.max(z, axis=-1),
        dtype=dtype,
        where=kept,
    )
