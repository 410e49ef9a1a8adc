"""Fixed log-softmax and softmax: the margin form that never adds 1 to e^-m."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _checks
from numerics._checks import Axis


def finite_row_max(x: jax.Array) -> jax.Array:
    """Max over the last axis (keepdims), or 0 where it is not finite.

    The shift for every exp-sum: it keeps exp from overflowing, and a row of only
    -inf (or with a +inf entry) shifts by 0, so its infinities pass unchanged
    instead of turning into inf - inf = NaN.
    """
    x_max = jnp.max(x, axis=-1, keepdims=True)
    return jnp.where(jnp.isfinite(x_max), x_max, jnp.zeros((), x.dtype))


def logsumexp_or_neg_inf(x: jax.Array) -> jax.Array:
    """log(sum(exp(x))) over the last axis (keepdims), -inf for an all -inf row.

    Unlike `jax.nn.logsumexp`, its gradient is 0 rather than NaN when every entry
    is -inf (K = 1, or everything but one entry masked out), since the empty sum
    is routed around the log with a double `where`.
    """
    x_max = jax.lax.stop_gradient(finite_row_max(x))
    total = jnp.sum(jnp.exp(x - x_max), axis=-1, keepdims=True)
    empty = total == 0
    safe_total = jnp.where(empty, jnp.ones((), x.dtype), total)
    return jnp.where(empty, -jnp.inf, jnp.log(safe_total) + x_max)


def shifted_sums(z: jax.Array):
    """Per-row (z_max, S, S_rest) over the last axis, keepdims, for the fixed losses.

    S = sum_j e^(z_j - z_max) as usual, and S_rest = S - 1, the sum without one max
    entry's own term e^0 = 1, computed without ever forming 1 + S_rest. With
    gap_j = z_max - z_j and k = 1 / (the dtype's smallest normal number),

        B = sum_j e^-gap_j min(1, k gap_j)   every entry except the maxima,

        S_rest = B       where S < 3/2,      S_rest = S - 1   elsewhere.

    A second max adds another 1 to S, so S < 3/2 means a unique max, and then B
    never touched its 1. From S >= 3/2 on, S_rest >= 1/2 and S - 1 rounds at most
    once (exactly below 2). (Entries within a subnormal gap of the max are split
    between B and the maxima, but their e^-gap_j rounds to 1, so S >= 3/2 and B is
    not used.) Masked entries must arrive as -inf.

    Two sums, each one read of z, and the gradients need only S: under `jit`,
    XLA drops the pass for B where only gradients are computed. (A count of the
    maxima instead of the test on S would be a third read: XLA's CPU reductions
    fuse exp, multiply and min/max into the sum, but not an index mask or a
    comparison, and they do not fuse two sums of the same input into one pass.)
    """
    k = 1.0 / float(jnp.finfo(z.dtype).smallest_normal)
    one = jnp.ones((), z.dtype)
    z_max = finite_row_max(z)  # a row of only -inf has sums 0, not NaN
    # The barriers stop XLA from sharing z_max - z between the two sums, which
    # would store it as a (rows, K) array: recomputing it is far cheaper. The two
    # tuples differ in order so XLA cannot merge the barriers either.
    z_s, z_max_s = jax.lax.optimization_barrier((z, z_max))
    total = jnp.sum(jnp.exp(z_s - z_max_s), axis=-1, keepdims=True)
    z_max_b, z_b = jax.lax.optimization_barrier((z_max, z))
    gap = z_max_b - z_b
    below = jnp.sum(jnp.exp(-gap) * jnp.minimum(one, k * gap), axis=-1, keepdims=True)
    return z_max, total, jnp.where(total < 1.5, below, total - one)


def compute_dtype(dtype) -> jnp.dtype:
    """float64 for float64 input, float32 for the others: the per-row sums and the
    outputs are computed there and rounded once to the input's dtype."""
    return jnp.dtype(jnp.float64 if dtype == jnp.float64 else jnp.float32)


def _margin_terms(x: jax.Array, mask: jax.Array | None):
    """(i_max, shifted, S_others) over the last axis, in the compute dtype (`compute_dtype`).

    With i = argmax(x), shifted_k = x_k - x_i (an exact 0 at i, -inf where masked
    out) and S_others = sum_{k != i} e^shifted_k, keepdims: the sum leaves the max's
    own term e^0 = 1 out by its index, so a small e^-m is summed, never added to 1.
    """
    ctype = compute_dtype(x.dtype)
    i_max = argmax(x, mask)
    is_max = jax.lax.broadcasted_iota(i_max.dtype, x.shape, x.ndim - 1) == i_max
    z = x.astype(ctype)
    shifted = jnp.where(is_max, jnp.zeros((), ctype), z - jnp.take_along_axis(z, i_max, axis=-1))
    if mask is not None:
        shifted = jnp.where(mask, shifted, -jnp.inf)
    others = jnp.where(is_max, -jnp.inf, shifted)
    return i_max, shifted, jnp.sum(jnp.exp(others), axis=-1, keepdims=True)


def one_plus(s: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(hi, lo) with hi = fl(1 + s) and hi + lo = 1 + s exactly, for s >= 0 (Fast2Sum)."""
    one = jnp.ones((), s.dtype)
    hi = one + s
    return hi, jnp.minimum(one, s) - (hi - jnp.maximum(one, s))


def log1p_of_sum(s: jax.Array) -> jax.Array:
    """log1p(s) for s >= 0 as log(hi) + lo / hi from `one_plus`: within about 1.5 ulps
    in float32 and 1 in float64, where XLA's CPU log1p is off by up to 2.3 and 1.9."""
    hi, lo = one_plus(s)
    return jnp.log(hi) + lo / hi


def argmax(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Index of the largest kept entry over the last axis (keepdims); 0 for a fully masked row."""
    return jnp.argmax(x if mask is None else jnp.where(mask, x, -jnp.inf), axis=-1, keepdims=True)


def centred_tangent(p: jax.Array, dx: jax.Array, i_max: jax.Array) -> jax.Array:
    """The tangent of log_softmax, dx - sum_j p_j dx_j, centred on the argmax i.

    Written as d - sum_j p_j d_j with d = dx - dx_i (d_i = 0), which equals it since
    the p_j sum to 1, so the dominant entry's tangent -sum_{j != i} p_j d_j never
    forms 1 - p_i: past the precision cliff p_i rounds to 1 and that would be 0.
    Linear in dx, so reverse mode is its transpose; i_max, not a (rows, K) index
    mask, is what reverse mode keeps.
    """
    d = dx - jnp.take_along_axis(dx, i_max, axis=-1)
    return d - jnp.sum(p * d, axis=-1, keepdims=True)


def add_along_rows(x: jax.Array, index: jax.Array, value: jax.Array) -> jax.Array:
    """x with value[..., 0] added at x[..., index[..., 0]] in each row: a scatter-add, so
    that reverse mode (a gather) keeps only the index, never a (rows, K) mask."""
    rows = x.reshape(-1, x.shape[-1])
    at = (jnp.arange(rows.shape[0]), index.reshape(-1))
    return rows.at[at].add(value.reshape(-1)).reshape(x.shape)


def _tangent(p: jax.Array, dx: jax.Array, x: jax.Array, mask, log: bool) -> jax.Array:
    """The tangent of log_softmax (`log`) or softmax at probabilities p, in the compute
    dtype, rounded once; masked entries get 0."""
    ctype = compute_dtype(p.dtype)
    p, dx, i_max = p.astype(ctype), dx.astype(ctype), argmax(x, mask)
    if log:
        dy = centred_tangent(p, dx, i_max)
    else:
        # dp = p * centred_tangent(p, dx), written so that its transpose (reverse mode)
        # centres the cotangent c on the argmax too: g_k = p_k (b_k - sum_j p_j b_j) with
        # b = c - c_i, never p_k c_k - p_k sum_j p_j c_j, which cancels where p_k c_k
        # dominates (q (1 - q) as q - q^2). The last step sets dp_i = -sum_{k != i} dp_k.
        v = p * (dx - jnp.take_along_axis(dx, i_max, axis=-1))
        t = v - p * jnp.sum(v, axis=-1, keepdims=True)
        dy = add_along_rows(t, i_max, -jnp.sum(t, axis=-1, keepdims=True))
    dy = dy.astype(x.dtype)
    # Masked entries are a constant (-inf, or 0): tangent 0, as in jax.nn.
    return dy if mask is None else jnp.where(mask, dy, jnp.zeros((), dy.dtype))


@jax.custom_jvp
def log_softmax_last(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """log_softmax over the last axis: shifted_k - log1p(S_others), rounded once."""
    _, shifted, s_others = _margin_terms(x, mask)
    return (shifted - log1p_of_sum(s_others)).astype(x.dtype)


@log_softmax_last.defjvp
def _log_softmax_jvp(primals, tangents):
    x, mask = primals
    # The primals through the custom functions themselves, so higher orders use these
    # rules too. p directly, not exp(log p): that would cost |log p| ulps.
    return log_softmax_last(x, mask), _tangent(softmax_last(x, mask), tangents[0], x, mask, True)


@jax.custom_jvp
def softmax_last(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """softmax over the last axis: e^shifted_k / (1 + S_others), rounded once."""
    i_max, shifted, _ = _margin_terms(x, mask)
    e = jax.lax.optimization_barrier(jnp.exp(shifted))
    is_max = jax.lax.broadcasted_iota(i_max.dtype, x.shape, x.ndim - 1) == i_max
    s_others = jnp.sum(jnp.where(is_max, jnp.zeros((), e.dtype), e), axis=-1, keepdims=True)
    hi, lo = one_plus(s_others)
    q = e / hi
    return (q - q * (lo / hi)).astype(x.dtype)


@softmax_last.defjvp
def _softmax_jvp(primals, tangents):
    x, mask = primals
    p = softmax_last(x, mask)
    return p, _tangent(p, tangents[0], x, mask, False)


def over_classes(fn, x: ArrayLike, axis, where: ArrayLike | None) -> jax.Array:
    """Check `x`, `axis` and `where`, apply fn(x, mask) with the class axes flattened last,
    and return the result in the shape of `x`. An empty `x` is returned as it is."""
    x = _checks.check_float(x, "x")
    axes = _checks.check_axis(x, axis, "x")
    mask = _checks.check_mask(where, x.shape)
    if x.size == 0:
        return x
    flat = _checks.classes_last(x, axes)
    mask = None if mask is None else _checks.classes_last(mask, axes)
    return _checks.classes_back(fn(flat, mask), axes, x.shape)


def log_softmax(x: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None) -> jax.Array:
    r"""Log-softmax that stays accurate when one entry dominates (Softmax Collapse fix).

    With i = argmax(x) and the margin m = x_i - logsumexp_{j != i} x_j,

        log_softmax(x)_k = [k != i] (x_k - x_i) - softplus(-m).

    Standard implementations add e^0 = 1 to e^-m and lose it past the precision
    cliff (`precision_cliff`); this form keeps e^-m apart, so log_softmax(x)_i
    = -log(1 + e^-m) stays accurate down to exponent underflow.

    Derivatives come from a linear tangent rule (`jax.custom_jvp`), so forward
    mode (`jax.jvp`, `jax.jacfwd`, Hessians) works to any order and reverse mode
    is its transpose: dy = d - sum_j p_j d_j with d = dx - dx_i, centred on the
    argmax so the dominant entry never forms 1 - p_i (which rounds to 0 past the
    cliff) and the gradient sums to zero. Reverse mode keeps p and the argmax.

    Computes in the dtype of `x` (reductions accumulate as `jnp.sum` does), for any
    batch shape, under `jit`, `vmap`, `grad` and `jvp`.

    Example:
      >>> import jax.numpy as jnp
      >>> log_softmax(jnp.array([9.0, -9.0, -9.0]))  # jax.nn gives 0.0 first
      Array([-3.0459972e-08, -1.8000000e+01, -1.8000000e+01], dtype=float32)

    Edge cases: -inf entries get -inf; a +inf entry gets 0 and the others -inf;
    NaN anywhere in a row makes the whole row NaN; a row of only -inf is 0/0 and
    gives NaN (as `jax.nn.log_softmax`). Entries masked out by `where` get -inf and
    tangent 0; a row masked out entirely gives -inf everywhere. An empty class
    axis gives an empty array.

    Args:
      x: floating-point logits, any shape.
      axis: the class axis, a tuple of axes normalised over together (as
        `jax.nn.log_softmax`), or None for all axes.
      where: optional boolean mask broadcastable to `x`; False entries are left out.

    Returns:
      An array of the shape and dtype of `x`.
    """
    return over_classes(log_softmax_last, x, axis, where)


def softmax(x: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None) -> jax.Array:
    r"""Softmax as exp of the fixed `log_softmax`, so its gradient survives the cliff.

    The dominant probability is exp(-softplus(-m)) = 1/(1 + e^-m), and its
    tangent p * (d - sum_j p_j d_j) (`log_softmax`'s rule, centred on the argmax)
    is carried by the K-1 differences, so grad(softmax(x)[i]) stays non-zero
    past the precision cliff. Reverse mode keeps p and the argmax, as jax.nn
    keeps p.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> jax.grad(lambda z: softmax(z)[0])(jnp.array([9.0, -9.0, -9.0]))
      Array([ 3.0459958e-08, -1.5229977e-08, -1.5229977e-08], dtype=float32)

    Edge cases as `log_softmax`: masked entries and fully masked rows give 0,
    NaN propagates to the whole row, an empty class axis gives an empty array.

    Args:
      x: floating-point logits, any shape.
      axis: the class axis, a tuple of axes, or None for all axes.
      where: optional boolean mask broadcastable to `x`.

    Returns:
      Probabilities of the shape and dtype of `x`.
    """
    return over_classes(softmax_last, x, axis, where)
