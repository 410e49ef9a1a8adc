"""Fixed hard-label cross-entropy and the logit margin."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from numerics import _checks
from numerics._softmax import logsumexp_or_neg_inf


def _target_parts(logits: jax.Array, labels: jax.Array, mask: jax.Array | None):
    """(is_target, excluded, z_j - z_t, -m) over the last axis; -m keeps its axis."""
    iota = jax.lax.broadcasted_iota(labels.dtype, logits.shape, logits.ndim - 1)
    is_target = iota == labels[..., None]
    # Out-of-range labels (possible only under jit) are clipped for the gather and
    # turned into NaN by the caller.
    z_t = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip")
    diff = logits - z_t
    excluded = is_target if mask is None else is_target | ~mask
    # Exclude the target from the sum so 1 is never added to e^-m: this is
    # log sum_{j != t} e^(z_j - z_t) = -m exactly, tiny values included.
    neg_margin = logsumexp_or_neg_inf(jnp.where(excluded, -jnp.inf, diff))
    return is_target, excluded, diff, neg_margin


def _valid_rows(logits: jax.Array, labels: jax.Array, mask: jax.Array | None) -> jax.Array:
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
    _, _, _, neg_margin = _target_parts(logits, labels, mask)
    # L = log(1 + e^-m) = softplus(-m): no 1 + e^-m is ever formed.
    loss = jax.nn.softplus(neg_margin[..., 0])
    loss = jnp.where(_valid_rows(logits, labels, mask), loss, jnp.nan)
    return loss, (logits, labels, mask, neg_margin, loss)


def _cross_entropy_bwd(residuals, cotangent):
    logits, labels, mask, neg_margin, loss = residuals
    # Recompute the cheap elementwise parts rather than store a (rows, K) residual:
    # the backward pass is then one fused read of the logits and one write.
    iota = jax.lax.broadcasted_iota(labels.dtype, logits.shape, logits.ndim - 1)
    is_target = iota == labels[..., None]
    excluded = is_target if mask is None else is_target | ~mask
    z_t = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip")
    loss = loss[..., None]
    # Non-target q_j = e^(z_j - z_t) / (1 + e^-m) = exp(z_j - z_t - L).
    g_other = jnp.exp(logits - z_t - loss)
    # Target q_t - 1 = -e^-m / (1 + e^-m) = -exp(-m - L): kept as a tiny number
    # instead of 1 - 1 = 0 past the cliff, so the K gradients still sum to zero.
    g_target = -jnp.exp(neg_margin - loss)
    zero = jnp.zeros((), logits.dtype)
    grad = jnp.where(is_target, g_target, jnp.where(excluded, zero, g_other))
    return grad * cotangent[..., None], None, None


_cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def prepare(logits, labels, axis: int, where=None):
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


def cross_entropy(logits, labels, axis: int = -1, where=None) -> jax.Array:
    r"""Cross-entropy with integer labels that survives the precision cliff.

    With the margin m = z_t - logsumexp_{j != t} z_j (paper eq. 6),

        L(z, t) = -log_softmax(z)_t = log(1 + e^-m) = softplus(-m),

    computed from the K-1 differences z_j - z_t without ever adding 1 to e^-m.
    A custom VJP returns the exact-form gradient (paper eq. 7)

        g_j = exp(z_j - z_t - L)  (j != t),    g_t = -exp(-m - L) = -e^-m / (1 + e^-m),

    so the target gradient stays non-zero down to exponent underflow instead of
    rounding to 0 once m passes `precision_cliff(dtype)`; the gradients sum to
    zero within rounding. Forward plus backward reads the logits three times,
    like `optax.softmax_cross_entropy_with_integer_labels`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> jax.value_and_grad(cross_entropy)(jnp.array([9.0, -9.0, -9.0]), jnp.array(0))
      (Array(3.046e-08, dtype=float32), Array([-3.0460e-08,  1.5230e-08,  1.5230e-08], dtype=float32))

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


def logit_margin(logits, labels, axis: int = -1) -> jax.Array:
    r"""Logit margin m = z_t - logsumexp_{j != t} z_j, computed from differences.

    m is how far the target logit sits above the log-sum-exp of the others; the
    standard softmax collapses once m >= `precision_cliff(dtype)`. Computed as
    -logsumexp_{j != t}(z_j - z_t), never through the loss, so it is accurate
    at any size (and +inf for K = 1).

    Example:
      >>> import jax.numpy as jnp
      >>> logit_margin(jnp.array([9.0, -9.0, -9.0]), jnp.array(0))
      Array(17.306853, dtype=float32)

    NaN propagates; labels are checked as in `cross_entropy`.

    Args:
      logits: floating-point array, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis of `logits`.

    Returns:
      Margins of shape `labels.shape`, in the dtype of `logits`.
    """
    logits, labels, _ = prepare(logits, labels, axis)
    _, _, _, neg_margin = _target_parts(logits, labels, None)
    margin = -neg_margin[..., 0]
    num_classes = logits.shape[-1]
    valid = (labels >= 0) & (labels < num_classes)
    return jnp.where(valid, margin, jnp.nan)

