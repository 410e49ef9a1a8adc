"""Fixed hard-label cross-entropy and the logit margin."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _checks
from numerics._softmax import logsumexp_or_neg_inf, shifted_sums


def _normalizers(logits: jax.Array, labels: jax.Array, mask: jax.Array | None):
    """Per-row (z_max, z_t - z_max, S_others, S), keepdims.

    S_others = sum_{j != t} e^(z_j - z_max) never contains the target's own term:
    when t is the argmax that term is the 1 that would swallow e^-m past the cliff.
    """
    masked = logits if mask is None else jnp.where(mask, logits, -jnp.inf)
    z_max, s_all, s_rest = shifted_sums(masked)
    # Out-of-range labels (possible only under jit) are clipped for the gather and
    # turned into NaN by `valid_rows`.
    z_t = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip")
    shift_t = z_t - z_max
    # t is a max: the others are S_rest. Otherwise S counts a max entry of its own,
    # S_others >= 1 and subtracting the target's e^(z_t - z_max) <= 1 is harmless.
    s_others = jnp.where(shift_t == 0, s_rest, s_all - jnp.exp(shift_t))
    return z_max, shift_t, s_others, s_all


def _loss_from(shift_t: jax.Array, s_others: jax.Array, s_all: jax.Array) -> jax.Array:
    # L = log(1 + e^-m). When t is a max, e^-m = S_others and log1p never forms
    # 1 + e^-m. Otherwise S_others >= 1 and L = log(S) - (z_t - z_max) adds two
    # non-negative terms, with no cancellation.
    is_max = shift_t == 0
    return jnp.where(is_max, jnp.log1p(s_others), jnp.log(s_all) - shift_t)


def valid_rows(logits: jax.Array, labels: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Rows whose label lies in [0, K) and, under a mask, whose target is kept."""
    num_classes = logits.shape[-1]
    valid = (labels >= 0) & (labels < num_classes)
    if mask is not None:
        target_kept = jnp.take_along_axis(mask, labels[..., None], axis=-1, mode="clip")
        valid = valid & target_kept[..., 0]
    return valid


@jax.custom_vjp
def _cross_entropy(logits, labels, mask):
    return _cross_entropy_fwd(logits, labels, mask)[0]


def _cross_entropy_fwd(logits, labels, mask):
    z_max, shift_t, s_others, s_all = _normalizers(logits, labels, mask)
    loss = _loss_from(shift_t, s_others, s_all)[..., 0]
    loss = jnp.where(valid_rows(logits, labels, mask), loss, jnp.nan)
    # Only O(rows) residuals: the backward pass recomputes the elementwise parts,
    # so it is one fused read of the logits and one write, as in optax.
    return loss, (logits, labels, mask, z_max, s_others, s_all, loss)


def _cross_entropy_bwd(residuals, cotangent):
    logits, labels, mask, z_max, s_others, s_all, loss = residuals
    if mask is not None:
        logits = jnp.where(mask, logits, -jnp.inf)  # masked entries get q = 0
    iota = jax.lax.broadcasted_iota(labels.dtype, logits.shape, logits.ndim - 1)
    is_target = iota == labels[..., None]
    # One division per row; rows with an invalid label (NaN loss) get NaN gradients.
    scale = jnp.where(jnp.isnan(loss), jnp.nan, cotangent)[..., None] / s_all
    # The barrier keeps XLA from sharing e^(z - z_max) with the forward sums, which
    # would store it as a (rows, K) array between the passes (scale rides along
    # only so this barrier differs from the forward's and is not merged with it).
    logits, z_max, scale = jax.lax.optimization_barrier((logits, z_max, scale))
    # Non-target q_j = e^(z_j - z_max) / S: a small number computed directly.
    # Target q_t - 1 = -S_others / S, never 1 - 1 = 0: it stays accurate past the
    # precision cliff, so the K gradients still sum to zero within rounding.
    grad = jnp.where(is_target, -s_others * scale, jnp.exp(logits - z_max) * scale)
    return grad, None, None


_cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def prepare(logits: ArrayLike, labels: ArrayLike, axis: int, where: ArrayLike | None = None):
    """Check inputs and move the class axis last; shared with the baselines."""
    logits = _checks.check_float(logits, "logits")
    axis = _checks.check_axis(logits, axis, "logits")
    labels = _checks.check_labels(labels, logits, axis)
    mask = _checks.check_mask(where, logits.shape)
    # Labels index the class axis; int32 is enough for any K and keeps the iota small.
    if labels.dtype.itemsize < 4 or jnp.issubdtype(labels.dtype, jnp.unsignedinteger):
        labels = labels.astype(jnp.int32)
    logits = jnp.moveaxis(logits, axis, -1)
    mask = None if mask is None else jnp.moveaxis(mask, axis, -1)
    return logits, labels, mask


def cross_entropy(
    logits: ArrayLike, labels: ArrayLike, axis: int = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""Cross-entropy with integer labels that survives the precision cliff.

    With the margin m = z_t - logsumexp_{j != t} z_j (paper eq. 6),

        L(z, t) = -log_softmax(z)_t = log(1 + e^-m),

    evaluated as log1p(e^-m) without ever adding 1 to e^-m. Shifting by the max
    as usual, S_others = sum_{j != t} e^(z_j - z_max) is summed apart from the
    target's own term, and a custom VJP returns

        g_j = e^(z_j - z_max) / S  (j != t),      g_t = q_t - 1 = -S_others / S,

    with S = S_others + e^(z_t - z_max). So the target gradient stays
    -e^-m / (1 + e^-m) down to exponent underflow instead of rounding to 0 once
    m passes `precision_cliff(dtype)`, and the gradients sum to zero within
    rounding. Unlike the paper's target-shifted form, no entry is computed as
    exp(a - L) with a large L, so misclassified rows (m < 0) are as accurate as
    confident ones: within about 2 ulps in bf16 and fp16 (tests/tolerances.py).
    Cost: three reads of the logits forward (max, the sum below the max, the
    count of maxima) and one read and one write backward
    (benchmarks/bench_cross_entropy.py measures it against optax).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> loss, grad = jax.value_and_grad(cross_entropy)(jnp.array([9.0, -9.0, -9.0]), jnp.array(0))
      >>> print(loss, grad)  # optax gives 0.0 and [0.0, 1.523e-08, 1.523e-08]
      3.0459958e-08 [-3.0459958e-08  1.5229979e-08  1.5229979e-08]

    Edge cases: -inf non-target logits contribute nothing; K = 1 gives 0. NaN in a
    row gives NaN for that row. Labels outside [0, K) raise ValueError when
    concrete; under `jit` they cannot be checked and give NaN (loss and gradient).
    A row whose target is masked out by `where` gives NaN; a row where every
    non-target entry is masked out gives loss 0 and gradient 0.

    Args:
      logits: floating-point array, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis of `logits`.
      where: optional boolean mask broadcastable to `logits`; False entries are
        left out of the normaliser.

    Returns:
      Per-example losses of shape `labels.shape`, in the dtype of `logits`.
    """
    logits, labels, mask = prepare(logits, labels, axis, where)
    return _cross_entropy(logits, labels, mask)


def logit_margin(logits: ArrayLike, labels: ArrayLike, axis: int = -1) -> jax.Array:
    r"""Logit margin m = z_t - logsumexp_{j != t} z_j, computed from differences.

    m is how far the target logit sits above the log-sum-exp of the others; the
    standard softmax collapses once m >= `precision_cliff(dtype)`. Computed as
    -log sum_{j != t} e^(z_j - z_t) with its own max shift, never through the
    loss, so it is accurate at any size, also far past exponent underflow (and
    +inf for K = 1). A metric, not a training loss: it uses an index mask and
    costs more than `cross_entropy`.

    Example:
      >>> import jax.numpy as jnp
      >>> logit_margin(jnp.array([9.0, -9.0, -9.0]), jnp.array(0))
      Array(17.306852, dtype=float32)

    NaN propagates; labels are checked as in `cross_entropy`.

    Args:
      logits: floating-point array, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis of `logits`.

    Returns:
      Margins of shape `labels.shape`, in the dtype of `logits`.
    """
    logits, labels, _ = prepare(logits, labels, axis)
    iota = jax.lax.broadcasted_iota(labels.dtype, logits.shape, logits.ndim - 1)
    z_t = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip")
    # -m = log sum_{j != t} e^(z_j - z_t), with its own max shift, so m stays finite
    # and accurate even where e^-m is far below the dtype's range.
    others = jnp.where(iota == labels[..., None], -jnp.inf, logits - z_t)
    margin = -logsumexp_or_neg_inf(others)[..., 0]
    return jnp.where(valid_rows(logits, labels, None), margin, jnp.nan)
