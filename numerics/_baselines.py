"""Baselines from the papers: StableMax, zero-sum gradient projection, clipped softmax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate
from numerics._cross_entropy import prepare, valid_rows
from numerics._softmax import over_classes, softmax
from numerics._validate import Axis
from numerics.standard import cross_entropy as standard_cross_entropy


def _stablemax_s(x: jax.Array) -> jax.Array:
    one = jnp.ones((), x.dtype)
    # s(x) = x + 1 for x >= 0 and 1 / (1 - x) for x < 0. The reciprocal branch
    # sees min(x, 0), so it never divides by zero at x = 1 and its (discarded)
    # gradient cannot turn into NaN through the `where`.
    return jnp.where(x >= 0, x + one, one / (one - jnp.minimum(x, jnp.zeros((), x.dtype))))


def stablemax_cross_entropy(
    logits: ArrayLike, labels: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""StableMax cross-entropy (Prieto et al., 2025): exp replaced by a rational s(x).

    s(x) = x + 1 for x >= 0, 1/(1 - x) for x < 0; probabilities s(z_k) / sum_j s(z_j);
    loss = log(sum_j s(z_j)) - log(s(z_t)). s grows linearly, so confident
    predictions need logits of order 1e3-1e4 rather than a margin of order 10:
    the paper's Table 1 reports final margins of 3,200-21,000.

    Computed in the dtype of `logits` (Prieto et al.'s code casts to float64; this
    lab keeps precision explicit). Masked entries (`where` False) are left out.

    Example:
      >>> import jax.numpy as jnp
      >>> stablemax_cross_entropy(jnp.array([1.0, -1.0]), jnp.array(0))  # doctest: +NUMBER
      Array(0.223144, dtype=float32)

    Args:
      logits: floating-point logits, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis.
      where: optional boolean mask broadcastable to `logits`.

    Returns:
      Per-example losses of shape `labels.shape`, in the dtype of `logits`.
    """
    logits, labels, mask = prepare(logits, labels, axis, where)
    s = _stablemax_s(logits)
    if mask is not None:
        s = jnp.where(mask, s, jnp.zeros((), s.dtype))
    s_t = jnp.take_along_axis(s, labels[..., None], axis=-1, mode="clip")[..., 0]
    out = jnp.log(jnp.sum(s, axis=-1)) - jnp.log(s_t)
    return jnp.where(valid_rows(logits, labels), out, jnp.nan)


@jax.custom_jvp
def _zero_sum(x, mask):
    return x


@_zero_sum.defjvp
def _zero_sum_jvp(primals, tangents):
    # The projection P dx = dx - mean(dx) (over kept entries; masked ones get 0) is
    # symmetric, so reverse mode, its transpose, projects the cotangent the same way.
    x, mask = primals
    dx = tangents[0]
    if mask is None:
        return x, dx - jnp.mean(dx, axis=-1, keepdims=True)
    zero = jnp.zeros((), dx.dtype)
    kept = jnp.sum(mask, axis=-1, keepdims=True).astype(dx.dtype)
    mean = jnp.sum(jnp.where(mask, dx, zero), axis=-1, keepdims=True) / kept
    return x, jnp.where(mask, dx - mean, zero)


def zero_sum_gradient(x: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None) -> jax.Array:
    r"""Identity whose derivative subtracts the mean along `axis` (Liu et al., 2026).

    Put it in front of a loss to force its logit gradients to sum to zero:
    g_k <- g_k - mean_j g_j. The projection is symmetric, so forward mode
    (`jax.jvp`) applies the same one to tangents. Past the precision cliff the standard target
    gradient is 0, so the projection hands the target only -1/K of the
    non-target total; the paper finds this stalls the margin near 18.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> jax.grad(lambda z: zero_sum_gradient(z)[0])(jnp.array([1.0, 2.0]))
      Array([ 0.5, -0.5], dtype=float32)

    Args:
      x: floating-point array.
      axis: the axis (or tuple of axes, or None for all) along which gradients are centred.
      where: optional boolean mask; the mean is over kept entries and masked
        entries get zero gradient.

    Returns:
      `x` unchanged.
    """
    return over_classes(_zero_sum, x, axis, where)


def zero_sum_cross_entropy(
    logits: ArrayLike, labels: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    """Standard cross-entropy with its logit gradient projected to zero sum (Liu et al., 2026).

    The forward value is `numerics.standard.cross_entropy`; only the gradient is
    changed, by `zero_sum_gradient`.

    Args:
      logits: floating-point logits, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis.
      where: optional boolean mask broadcastable to `logits`.

    Returns:
      Per-example losses of shape `labels.shape`, in the dtype of `logits`.
    """
    projected = zero_sum_gradient(logits, axis=axis, where=where)
    return standard_cross_entropy(projected, labels, axis=axis, where=where)


def clipped_softmax(
    x: ArrayLike,
    gamma: ArrayLike,
    zeta: ArrayLike = 1.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
    r"""Clipped softmax (Bondarenko et al., 2023): clip((zeta - gamma) softmax(x) + gamma, 0, 1).

    With gamma < 0 an attention head can output exact zeros with finite logits,
    so it need not grow outlier activations to implement a no-op. Entries whose
    stretched probability falls outside [0, 1] get zero gradient; if a row's
    every probability falls below -gamma / (zeta - gamma) (near-uniform attention
    over T >> alpha tokens, with gamma = -alpha / T), the output and its gradient
    are all zero: attention is dead. Use `clipped_softmax_gamma` for gamma.

    Uses the fixed `softmax` inside. zeta = 1 and gamma = 0 give plain softmax.

    Example:
      >>> import jax.numpy as jnp
      >>> clipped_softmax(jnp.array([4.0, 0.0, 0.0]), gamma=-0.1)  # doctest: +NUMBER
      Array([0.961129, 0.       , 0.       ], dtype=float32)

    Args:
      x: floating-point logits.
      gamma: stretch below 0 (<= 0 in practice).
      zeta: stretch above 1 (>= 1; 1 in practice).
      axis: the softmax axis.
      where: optional boolean mask; masked entries get 0.

    Returns:
      Clipped probabilities of the shape and dtype of `x`.
    """
    _validate.float_array(x, "x")  # float8 refused: the clipping would be in float8
    probs = softmax(x, axis=axis, where=where)
    gamma = jnp.asarray(gamma, probs.dtype)
    zeta = jnp.asarray(zeta, probs.dtype)
    zero, one = jnp.zeros((), probs.dtype), jnp.ones((), probs.dtype)
    return jnp.clip((zeta - gamma) * probs + gamma, zero, one)


def clipped_softmax_gamma(alpha: float, seq_len: int) -> float:
    """gamma = -alpha / T, the paper's parametrisation (alpha in [2, 4]; BERT-base -0.025 at T=128).

    Example:
      >>> clipped_softmax_gamma(4.0, 128)
      -0.03125

    Args:
      alpha: clipping strength, > 0.
      seq_len: sequence length T, > 0.

    Returns:
      gamma as a Python float.
    """
    if not alpha > 0 or not seq_len > 0:
        raise ValueError(f"alpha and seq_len must be > 0; got alpha={alpha}, seq_len={seq_len}.")
    return -float(alpha) / float(seq_len)
