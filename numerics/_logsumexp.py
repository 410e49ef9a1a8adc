"""Fixed logsumexp: the max plus log1p of the others, never log(1 + e^-m)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate
from numerics._softmax import (
    compute_dtype,
    log1p_of_sum,
    off_max,
    shifted_and_max,
    softmax_last,
    sum_of_others,
)
from numerics._validate import Axis


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(hi, lo) with hi = fl(a + b) and hi + lo = a + b exactly, for any signs and sizes
    (Knuth's TwoSum; `one_plus` is its case 1 + s with s >= 0)."""
    hi = a + b
    b_part = hi - a
    a_part = hi - b_part
    return hi, (a - a_part) + (b - b_part)


def _weighted_terms(x: jax.Array, b: jax.Array):
    """(max, e, hi, lo) per row for T = sum_k b_k e^(x_k - max), in the compute dtype.

    The sum is split as T = head + tail: head = the b of the maxima (e^0 = 1 each, so
    exact), tail = sum b_k e^(x_k - max) over the entries below the max, weighted by
    `off_max` as `sum_of_others` weights them (no index). hi + lo = T exactly
    (`_two_sum`), so log|T| = log|hi| + lo / hi keeps a tail far below head's ulp.
    Entries with b = 0 are left out, as jax.nn leaves them out (their x may be inf).
    """
    shifted, top = shifted_and_max(x, b != 0)
    e = jnp.exp(shifted)
    below = off_max(-shifted)  # 0 at each maximum, 1 below it (and where left out, e = 0)
    b = b.astype(e.dtype)
    head = jnp.sum(b * (1 - below), axis=-1, keepdims=True)
    tail = jnp.sum(b * e * below, axis=-1, keepdims=True)
    return (top, e, *_two_sum(head, tail))


def _log_abs(hi: jax.Array, lo: jax.Array) -> jax.Array:
    """log|hi + lo| for |lo| <= ulp(hi) / 2: log|hi| + lo / hi (-inf at 0, inf at inf)."""
    usable = jnp.isfinite(hi) & (hi != 0)
    ratio = lo / jnp.where(usable, hi, jnp.ones((), hi.dtype))
    return jnp.log(jnp.abs(hi)) + jnp.where(usable, ratio, jnp.zeros((), hi.dtype))


@jax.custom_jvp
def logsumexp_last(x: jax.Array, b: jax.Array | None, mask: jax.Array | None):
    """(log|sum_k b_k e^x_k|, its sign) over the last axis, keepdims, rounded once to x's
    dtype (b = 1 when None). With b, `mask` must already be folded into b (b = 0 there)."""
    if b is None:
        # T = 1 + S_others: the fixed log_softmax's normaliser, max + log1p(S_others), where
        # S_others counts every maximum but one (ties) and never holds the max's own 1.
        shifted, top = shifted_and_max(x, mask)
        log_t = log1p_of_sum(sum_of_others(jnp.exp(shifted), shifted))
        sign = jnp.ones_like(top)
    else:
        top, _, hi, lo = _weighted_terms(x, b)
        log_t, sign = _log_abs(hi, lo), jnp.sign(hi)
    # Nothing kept, or only -inf: the empty sum, -inf with sign 0 as in jax.nn.
    empty = top == -jnp.inf
    value = jnp.where(empty, -jnp.inf, top + log_t)
    nan = jnp.full((), jnp.nan, sign.dtype)
    sign = jnp.where(empty, jnp.zeros((), sign.dtype), jnp.where(jnp.isnan(value), nan, sign))
    return value.astype(x.dtype), sign.astype(x.dtype)


def _gradients(x: jax.Array, b: jax.Array | None, mask: jax.Array | None):
    """(d/dx, d/db) of log|T| in the compute dtype: b_k e^(x_k - max) / T and e^(x_k - max)
    / T, 0 where left out and on rows whose sum is empty or exactly 0 (d/db None without b).
    """
    ctype = compute_dtype(x.dtype)
    if b is None:
        # The fixed softmax: accurate past the precision cliff, 0 where masked; its NaN on
        # a row of only -inf is the empty sum's, whose tangent is 0.
        p = softmax_last(x, mask).astype(ctype)
        empty = shifted_and_max(x, mask)[1] == -jnp.inf
        return jnp.where(empty, jnp.zeros((), ctype), p), None
    top, e, hi, _ = _weighted_terms(x, b)
    zero = (hi == 0) | (top == -jnp.inf)
    one = jnp.ones((), ctype)
    safe_hi = jnp.where(zero, one, hi)
    # lo is below half an ulp of hi: dividing by hi alone costs at most that much more.
    grad_x = jnp.where(zero, jnp.zeros((), ctype), b.astype(ctype) * e / safe_hi)
    # d/db_k = e^(x_k - max) / T also where b_k = 0 (jax.nn gives 0 there, as it drops
    # those entries before differentiating); entries masked out (b = 0 and mask False)
    # stay 0.
    kept = x.astype(ctype) if mask is None else jnp.where(mask, x.astype(ctype), -jnp.inf)
    shift = jnp.where(jnp.isfinite(top), top, jnp.zeros((), ctype))
    grad_b = jnp.where(zero, jnp.zeros((), ctype), jnp.exp(kept - shift) / safe_hi)
    return grad_x, grad_b


@functools.partial(logsumexp_last.defjvp, symbolic_zeros=True)
def _logsumexp_jvp(primals, tangents):
    x, b, mask = primals
    dx, db, _ = tangents
    value, sign = logsumexp_last(x, b, mask)
    grad_x, grad_b = _gradients(x, b, mask)
    ctype = grad_x.dtype
    # Linear in the tangents: reverse mode is grad * cotangent, rounded once to x's dtype.
    terms = [
        jnp.sum(g * d.astype(ctype), axis=-1, keepdims=True)
        for g, d in ((grad_x, dx), (grad_b, db))
        if g is not None and not isinstance(d, jax.custom_derivatives.SymbolicZero)
    ]
    tangent = sum(terms[1:], terms[0]) if terms else jnp.zeros(value.shape, ctype)
    return (value, sign), (tangent.astype(x.dtype), jnp.zeros_like(sign))


def logsumexp(
    a: ArrayLike,
    axis: Axis = None,
    b: ArrayLike | None = None,
    keepdims: bool = False,
    return_sign: bool = False,
    where: ArrayLike | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    r"""log sum_k b_k e^(a_k), accurate where one entry dominates; `jax.nn.logsumexp`'s arguments.

    With M the largest entry kept and S_others the sum of e^(a_k - M) over every entry
    but one maximum (e^-m for the margin m of that entry over the others),

        logsumexp(a) = M + log1p(S_others),

    the normaliser of the fixed `log_softmax`: S_others never holds the max's own 1, so
    a tail far below the max keeps its digits (logsumexp([0, -20]) = 2.06e-9 in float32,
    where jax.nn's M + log(1 + e^-20) rounds the sum to 1 and gives 0). With `b`, the sum
    is split into the maxima's b (each e^0 = 1, exact) and the tail below them, added
    exactly as hi + lo (TwoSum) and taken as log|hi| + lo / hi. Ties for the max count in
    the sum (a second maximum adds its own 1). bf16, fp16 and float8 compute in float32 and
    round once; float32 and float64 compute in their own dtype.

    Derivatives: a linear tangent rule (`jax.custom_jvp`), so forward and reverse mode
    work to any order: d/da_k = b_k e^(a_k) / T, without `b` the fixed `softmax` (the
    small probabilities survive past the cliff), and d/db_k = e^(a_k) / T, also where
    b_k = 0 (jax.nn gives 0 there). Both are 0 on entries masked out, and on rows whose
    sum is empty (every entry masked out or -inf) or exactly 0, rather than NaN.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> logsumexp(jnp.array([0.0, -20.0]))  # jax.nn.logsumexp gives 0.0  # doctest: +NUMBER
      Array(2.0611537e-09, dtype=float32)
      >>> jax.grad(logsumexp)(jnp.array([0.0, -20.0]))  # doctest: +NUMBER
      Array([1.0000000e+00, 2.0611537e-09], dtype=float32)
      >>> logsumexp(jnp.array([1.0, 1.0]), b=jnp.array([1.0, -2.0]), return_sign=True)
      (Array(1., dtype=float32), Array(-1., dtype=float32))

    Edge cases, as `jax.nn.logsumexp`: -inf entries and entries with b = 0 are left out;
    a row with nothing left is -inf (sign 0); a +inf entry gives +inf (NaN where +inf
    entries' b cancel); NaN gives NaN. A negative sum gives NaN unless `return_sign`. An
    empty reduction gives -inf.

    Args:
      a: floating-point array (bf16, fp16, fp32, fp64 or float8), any shape.
      axis: an axis, a tuple of axes reduced together, or None for all axes.
      b: optional scale factors of a's dtype, broadcastable to `a`.
      keepdims: keep the reduced axes, of size 1.
      return_sign: return (log|sum|, sign of the sum) instead of log(sum).
      where: optional boolean mask broadcastable to `a`; False entries are left out.

    Returns:
      log(sum) of a's dtype and of a's shape without `axis` (with it, size 1, when
      `keepdims`); with `return_sign`, the pair (log|sum|, sign), the sign -1, 0 or 1.
    """
    a, axes, b, mask, out_shape = _validate.reduction(a, axis, b, where, keepdims)
    if any(a.shape[i] == 0 for i in axes):  # the empty sum
        value, sign = jnp.full(out_shape, -jnp.inf, a.dtype), jnp.zeros(out_shape, a.dtype)
    else:
        narrow = a.dtype.itemsize == 1  # float8 (no -inf in e4m3fn): in float32, rounded once
        x = a.astype(jnp.float32) if narrow else a
        flat = _validate.classes_last(x, axes)
        flat_mask = None if mask is None else _validate.classes_last(mask, axes)
        if b is not None:
            flat_b = _validate.classes_last(b.astype(x.dtype), axes)
            zero = jnp.zeros((), x.dtype)
            flat_b = flat_b if flat_mask is None else jnp.where(flat_mask, flat_b, zero)
            value, sign = logsumexp_last(flat, flat_b, flat_mask)
        else:
            value, sign = logsumexp_last(flat, None, flat_mask)
        value, sign = (v.reshape(out_shape).astype(a.dtype) for v in (value, sign))
    if return_sign:
        return value, sign
    if b is not None:  # log of a negative sum: NaN, as jax.nn
        value = jnp.where(sign < 0, jnp.full((), jnp.nan, value.dtype), value)
    return value
