"""The softmax's entropy per row, H = log1p(S_others) + A (derivation: `numerics._per_token`,
whose public `entropy` this is; a module of its own so that `numerics.cross_entropy`'s
per-token outputs can use it without an import cycle through `log_prob`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate
from numerics._softmax import one_plus, shifted_and_max, sum_of_others
from numerics._validate import Axis


def _entropy_terms(x: jax.Array, mask: jax.Array | None):
    """Per row (H, A, hi) in the compute dtype, keepdims, and (e, g) per entry.

    e_j = e^-g_j (0 where masked out or -inf), g_j = M - z_j; hi = fl(1 + S_others);
    A = sum_j g_j e_j / hi, H = log1p(S_others) + A (the module docstring).
    """
    shifted, _ = shifted_and_max(x, mask)  # -g: an exact 0 at each maximum
    e = jnp.exp(shifted)
    g = -shifted
    zero = jnp.zeros((), e.dtype)
    # g e^-g, 0 where e is (masked out, -inf logits, underflow: never inf * 0).
    weighted = jnp.where(e > 0, g * e, zero)
    s_others = sum_of_others(e, shifted)
    hi, lo = one_plus(s_others)
    log_s = jnp.log(hi) + lo / hi  # log1p(S_others), as `log1p_of_sum`
    mean_gap = jnp.sum(weighted, axis=-1, keepdims=True) / hi
    return log_s + mean_gap, mean_gap, hi, e, g


def _any_kept(mask: jax.Array | None, x: jax.Array) -> jax.Array:
    if mask is None:
        return jnp.ones((*x.shape[:-1], 1), bool)
    return jnp.any(mask, axis=-1, keepdims=True)


def _entropy_value_and_grad(x: jax.Array, mask: jax.Array | None):
    """(H, dH/dx) over the last axis in the compute dtype: H (rows..., 1) and p_k (g_k - A);
    padding rows (every entry masked out) give 0 for both."""
    h, mean_gap, hi, e, g = _entropy_terms(x, mask)
    zero = jnp.zeros((), e.dtype)
    p = e / hi
    grad = jnp.where(e > 0, p * (g - mean_gap), zero)
    kept = _any_kept(mask, x)
    return jnp.where(kept, h, zero), jnp.where(kept, grad, zero)


@jax.custom_jvp
def _entropy_last(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    return _entropy_value_and_grad(x, mask)[0][..., 0].astype(x.dtype)


@_entropy_last.defjvp
def _entropy_jvp(primals, tangents):
    x, mask = primals
    # The gradient formula's own derivative (second order) is autodiff of the formula.
    _, grad = _entropy_value_and_grad(x, mask)
    dx = tangents[0].astype(grad.dtype)
    # Linear in the tangent: reverse mode is grad * cotangent, rounded once to x's dtype.
    return _entropy_last(x, mask), jnp.sum(grad * dx, axis=-1).astype(x.dtype)


def entropy(logits: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None) -> jax.Array:
    r"""The softmax's entropy per row, H = -sum_j p_j log p_j, accurate for peaked rows.

    With g_j = max z - z_j >= 0 and S_others = sum of e^-g_j over every entry but one
    maximum,

        H = log1p(S_others) + (sum_j g_j e^-g_j) / (1 + S_others),

    two non-negative terms (derivation: `numerics._per_token`), so H never cancels. The
    standard logsumexp(z) - sum_j p_j z_j (`numerics.standard.entropy`, as RL trainers
    write it) subtracts two numbers of the size of the logits and is 0 or noise in bf16
    once a row is peaked, or whenever the logits share a large offset. bf16 and fp16
    compute in float32 and round once.

    Derivatives: dH/dz_k = p_k (g_k - A) with A = H - log1p(S_others) the mean gap, a linear
    tangent rule (`jax.custom_jvp`); at the max it is -p_max A, never formed from 1 - p_max,
    and the gradient sums to zero.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> z = jnp.array([9.0, -9.0, -9.0], jnp.bfloat16)
      >>> entropy(z)  # about 2 (1 + 18) e^-18; standard.entropy gives 0  # doctest: +NUMBER
      Array(5.774e-07, dtype=bfloat16)
      >>> jax.grad(entropy)(z)  # doctest: +NUMBER
      Array([-5.476e-07, 2.738e-07, 2.738e-07], dtype=bfloat16)

    Edge cases: -inf entries and entries masked out by `where` have p = 0 and add nothing
    (gradient 0 there); a row masked out entirely (padding) gives 0 and gradient 0; a row
    of only -inf (unmasked) gives NaN, as `log_softmax`; n +inf entries give log n; NaN in
    a row gives NaN; K = 1 gives 0. An empty class axis gives NaN.

    Args:
      logits: floating-point array (bf16, fp16, fp32, fp64), class axis at `axis`.
      axis: the class axis, a tuple of axes, or None for all axes.
      where: optional boolean mask, of the logits' rank (entries) or of the logits' rank
        without the class axes (whole rows), as in `cross_entropy`.

    Returns:
      Entropies (>= 0, in nats) of the shape of `logits` without `axis`, in its dtype.
    """
    logits = _validate.float_array(logits, "logits")
    axes = _validate.class_axes(logits, axis, "logits")
    mask = _validate.loss_mask(where, logits.shape, axes)
    flat = _validate.classes_last(logits, axes)
    mask = None if mask is None else _validate.classes_last(mask, axes)
    if flat.shape[-1] == 0:
        return jnp.full(flat.shape[:-1], jnp.nan, flat.dtype)
    return _entropy_last(flat, mask)
