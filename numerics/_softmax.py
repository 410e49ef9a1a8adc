"""Fixed log-softmax and softmax: the margin form that never adds 1 to e^-m.

The sink softmax (`softmax(x, sink=s)`, `log_softmax(x, sink=s)`) has one more term in
each row's denominator, p_k = e^x_k / (e^s + sum_j e^x_j), whose own probability P_sink =
e^s / (...) is dropped, so the outputs sum to 1 - P_sink: s = 0 is softmax off by one
(Miller's softmax_1), a learned logit per head GPT-OSS's attention sinks, -inf the plain
softmax. It is the fixed softmax of the row [x, s] without its last entry, computed
without forming that row: the max M = max(max x, s) may be the sink's, and the sink's
term e^(s - M) joins the row's two sums after them (`_sink_parts`), so S_others holds
every term but the max's own 1 whichever holds it: log p_k = (x_k - M) - log1p(S_others),
p_k = e^(x_k - M) / (1 + S_others), accurate in bf16 where 1 + S_others rounds to 1.

Where the extra term moves the cliff. For the row's top entry i, with its margin over the
others m = x_i - logsumexp_{j != i} x_j and its gap to the sink g = x_i - s, the margin
over everything else in the denominator is m* with

    e^-m* = e^-m + e^-g,    so    min(m, g) - ln 2 <= m* <= min(m, g),

and 1 - p_i = e^-m* / (1 + e^-m*). The precision cliff c_d = p ln 2 (`precision_cliff`)
now applies to m*, the smaller of the margin to the others and the gap to the sink: a
row whose own margin is far past the cliff keeps p_i < 1 while the sink is within c_d of
its max (off by one: a row whose largest logit is below c_d, bf16's 5.5, never
collapses). Past it, the standard formula (`numerics.standard`, the way kernels and
GPT-OSS's reference write it: the row [x, s], max, exp, one sum, divide) rounds 1 +
e^-m* to 1, so log p_i and d p_i / dx_i = p_i (1 - p_i) are exactly 0 (bf16: from m* =
5.5625, the first bf16 margin past c_d, where its program rounds the sum to bf16; from
16.75, past float32's cliff 16.64, where XLA keeps the sum in float32), while d p_i / ds
= -p_i P_sink stays nonzero, so its gradients over [x, s] no longer sum to zero: the sink
is pushed, the logit is not. (p_i = 1 in bf16 is the correctly rounded value only from
m* = 9 ln 2 = 6.24, where 1 - e^-m* is within half an ulp below 1; eagerly, the standard
formula returns it from 5.5625.) Here log p_i = -log1p(e^-m*) and the gradient
p_i (P_sink + sum_{j != i} p_j) stay normal numbers down to exponent underflow (m* = 87
in bf16 and float32).

A sink far above the row (P_sink -> 1) moves no cliff for the outputs: every p_k =
e^(x_k - s) / (1 + S_others) is small and holds its digits in either formula down to
exponent underflow at x_k - s = ln(smallest normal); log p_k = x_k - s - log1p(S_others)
is dominated by x_k - s. The derivatives by the sink, d log p_k / ds = -P_sink and d p_k
/ ds = -p_k P_sink, are the K + 1-th column of the plain tangent rule on [x, s], which the
custom JVPs here use (centred on the max of [x, s], so no 1 - p is formed for a dominant
entry or a dominant sink).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate
from numerics._validate import Axis


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
    gap_j = z_max - z_j,

        B = sum_j e^-gap_j off_max(gap_j)   every entry except the maxima,

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
    one = jnp.ones((), z.dtype)
    z_max = finite_row_max(z)  # a row of only -inf has sums 0, not NaN
    # The barriers stop XLA from sharing z_max - z between the two sums, which
    # would store it as a (rows, K) array: recomputing it is far cheaper. The two
    # tuples differ in order so XLA cannot merge the barriers either.
    z_s, z_max_s = jax.lax.optimization_barrier((z, z_max))
    total = jnp.sum(jnp.exp(z_s - z_max_s), axis=-1, keepdims=True)
    z_max_b, z_b = jax.lax.optimization_barrier((z_max, z))
    gap = z_max_b - z_b
    below = jnp.sum(jnp.exp(-gap) * off_max(gap), axis=-1, keepdims=True)
    return z_max, total, jnp.where(total < 1.5, below, total - one)


def compute_dtype(dtype) -> jnp.dtype:
    """float64 for float64 input, float32 for the others: the per-row sums and the
    outputs are computed there and rounded once to the input's dtype."""
    return jnp.dtype(jnp.float64 if dtype == jnp.float64 else jnp.float32)


def _kept_logits(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """x in the compute dtype (`compute_dtype`), -inf where masked out."""
    return (x if mask is None else jnp.where(mask, x, -jnp.inf)).astype(compute_dtype(x.dtype))


def off_max(gap: jax.Array) -> jax.Array:
    """min(1, gap / smallest normal) for gaps z_max - z_k >= 0: 0 at every maximum, 1
    from a gap of one smallest normal number on. Arithmetic, so XLA's CPU reductions
    fuse it into a sum (an index mask or a comparison they would not)."""
    one = jnp.ones((), gap.dtype)
    return jnp.minimum(one, gap / jnp.finfo(gap.dtype).smallest_normal)


def shifted_and_max(x: jax.Array, mask: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    """(x_k - max x, max x) over the last axis (the max keepdims) in the compute dtype
    (`compute_dtype`): an exact 0 at each maximum (+inf included), -inf where masked out,
    NaN for a row of only -inf (whose max is -inf)."""
    z = _kept_logits(x, mask)
    top = jnp.max(z, axis=-1, keepdims=True)
    return jnp.where((z == top) & (top > -jnp.inf), jnp.zeros((), z.dtype), z - top), top


def sum_of_others(e: jax.Array, shifted: jax.Array) -> jax.Array:
    """S_others = sum of e_k = e^shifted_k over every entry but one maximum (keepdims).

    With S = sum_k e_k and B = sum_k e_k `off_max`(-shifted_k), the sum without every
    maximum, S_others = B where S < 2 and S - 1 elsewhere: a second maximum adds
    another 1 to S, so S < 2 means a unique one, whose e^0 = 1 B never touched; a
    small e^-m is summed, never added to 1. Entries within a subnormal gap of a
    maximum have e_k = 1, so S >= 2 and B is not used. No index: both sums fuse.
    """
    total = jnp.sum(e, axis=-1, keepdims=True)
    below = jnp.sum(e * off_max(-shifted), axis=-1, keepdims=True)
    return jnp.where(total < 2, below, total - 1)


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


def max_index(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Index of a largest kept entry over the last axis (keepdims, int32): the centre
    of the tangent rules.

    The sum of the indices of the maxima, sum_k k (1 - `off_max`(gap_k)), a sum
    XLA's CPU reductions fuse (jnp.argmax
    costs ten times as much). A unique max gives its own index; ties, where no entry
    dominates and any centre is as good, give some index in range, as do rows of only
    -inf or with NaN (whose results are -inf or NaN anyway). K beyond the compute
    dtype's exact integers falls back to `jnp.argmax`.
    """
    z = _kept_logits(x, mask)
    num_classes = x.shape[-1]
    if num_classes > 2 ** (jnp.finfo(z.dtype).nmant + 1):
        return jnp.argmax(z, axis=-1, keepdims=True).astype(jnp.int32)
    at_max = 1 - off_max(jnp.max(z, axis=-1, keepdims=True) - z)
    iota = jax.lax.broadcasted_iota(z.dtype, z.shape, z.ndim - 1)
    index = jnp.nan_to_num(jnp.sum(at_max * iota, axis=-1, keepdims=True))
    return jnp.clip(index, 0, num_classes - 1).astype(jnp.int32)


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


def _one_per_row(x: jax.Array, index: jax.Array):
    """x as (rows, K) and the scatter index of one entry per row, index[...] in row ..."""
    rows = x.reshape(-1, x.shape[-1])
    return rows, (jnp.arange(rows.shape[0]), index.reshape(-1))


def add_along_rows(x: jax.Array, index: jax.Array, value: jax.Array) -> jax.Array:
    """x with value[..., 0] added at x[..., index[..., 0]] in each row: a scatter-add, so
    that reverse mode (a gather) keeps only the index, never a (rows, K) mask."""
    rows, at = _one_per_row(x, index)
    return rows.at[at].add(value.reshape(-1)).reshape(x.shape)


def set_along_rows(x: jax.Array, index: jax.Array, value: jax.Array) -> jax.Array:
    """x with x[..., index[...]] set to value[...] in each row (index and value of the
    shape of x without its last axis, or with a last axis of 1).

    A scatter of one entry per row, which XLA does in place, where a select against an
    index iota would be one more full pass's arithmetic. An index outside [0, K)
    (possible only under jit) sets nothing.
    """
    k = x.shape[-1]
    index = jnp.where((index >= 0) & (index < k), index, k)  # k is out of bounds: dropped
    rows, at = _one_per_row(x, index)
    out = rows.at[at].set(
        value.reshape(-1).astype(x.dtype),
        mode="drop",
        unique_indices=True,
        indices_are_sorted=True,
    )
    return out.reshape(x.shape)


def _tangent(p: jax.Array, dx: jax.Array, x: jax.Array, mask, log: bool) -> jax.Array:
    """The tangent of log_softmax (`log`) or softmax at probabilities p, in the compute
    dtype, rounded once; masked entries get 0."""
    ctype = compute_dtype(p.dtype)
    p, dx, i_max = p.astype(ctype), dx.astype(ctype), max_index(x, mask)
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


def _kept(out: jax.Array, x: jax.Array, mask, fill: float) -> jax.Array:
    """`out` rounded to x's dtype, `fill` where masked out (a fully masked row's NaN too)."""
    out = out.astype(x.dtype)
    return out if mask is None else jnp.where(mask, out, jnp.asarray(fill, x.dtype))


@jax.custom_jvp
def log_softmax_last(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """log_softmax over the last axis: shifted_k - log1p(S_others), rounded once."""
    shifted, _ = shifted_and_max(x, mask)
    s_others = sum_of_others(jnp.exp(shifted), shifted)
    return _kept(shifted - log1p_of_sum(s_others), x, mask, -jnp.inf)


@log_softmax_last.defjvp
def _log_softmax_jvp(primals, tangents):
    x, mask = primals
    # The primals through the custom functions themselves, so higher orders use these
    # rules too. p directly, not exp(log p): that would cost |log p| ulps.
    return log_softmax_last(x, mask), _tangent(softmax_last(x, mask), tangents[0], x, mask, True)


@jax.custom_jvp
def softmax_last(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """softmax over the last axis: e^shifted_k / (1 + S_others), rounded once."""
    shifted, _ = shifted_and_max(x, mask)
    # One array of exponentials for the sums and the quotients: XLA's sum and
    # elementwise exp kernels can round e^shifted differently, and S_others from the
    # same e_k makes the errors of e_k / (1 + S_others) partly cancel.
    e = jax.lax.optimization_barrier(jnp.exp(shifted))
    hi, lo = one_plus(sum_of_others(e, shifted))
    return _kept(_divide(e, hi, lo), x, mask, 0.0)


def _split(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Veltkamp's split: a = high + low exactly, each with half the significand."""
    c = (2.0 ** ((jnp.finfo(a.dtype).nmant + 2) // 2) + 1) * a
    high = c - (c - a)
    return high, a - high


def _divide(e: jax.Array, hi: jax.Array, lo: jax.Array) -> jax.Array:
    """e / (hi + lo), rounded about once: q = e / hi, then q + r / hi with the exact
    remainder r = e - q (hi + lo) (Dekker's product of q and hi)."""
    q = e / hi
    q1, q2 = _split(q)
    h1, h2 = _split(hi)
    product = q * hi
    error = ((q1 * h1 - product) + q1 * h2 + q2 * h1) + q2 * h2
    remainder = ((e - product) - error) - q * lo
    return q + remainder / hi


def _divide_scaled(e: jax.Array, hi: jax.Array, lo: jax.Array) -> jax.Array:
    """`_divide` that stays within an ulp for tiny quotients too (the sink softmax's).

    The remainder and the partial products of Dekker's product are about q 2^-p (p the
    significand's bits): for q below 2^(p + 2) smallest normals they are subnormal, which
    XLA's CPU kernels flush to 0, and a flushed partial product leaves an error of up to a
    smallest normal in r, up to 2^-p relative to q: thousands of ulps (float32: 1790 ulps
    at q = 8.6e-35 with hi = 1.13; where hi = 1, as when one entry dominates, hi's low
    half is 0 and nothing is lost). So an e below 2^(2p + 4) smallest normals (float32
    2^-74, float64 2^-912) is scaled up by 2^(2p + 4) first and the quotient scaled back,
    both exact (powers of two; the quotient stays above 2^(p + 2) smallest normals for any
    hi below 2^(p + 2)); every larger e is multiplied by 1 and gets `_divide`'s quotient
    bit for bit. The plain `softmax_last` keeps `_divide` (its program is pinned by the
    golden tests; tests/numerics/test_sink_softmax.py shows the case it loses).
    """
    big = 2.0 ** (2 * (jnp.finfo(e.dtype).nmant + 1) + 4)
    small = e < jnp.finfo(e.dtype).smallest_normal * big
    one = jnp.ones((), e.dtype)
    quotient = _divide(e * jnp.where(small, jnp.asarray(big, e.dtype), one), hi, lo)
    return quotient * jnp.where(small, jnp.asarray(1 / big, e.dtype), one)


@softmax_last.defjvp
def _softmax_jvp(primals, tangents):
    x, mask = primals
    p = softmax_last(x, mask)
    return p, _tangent(p, tangents[0], x, mask, False)


def _sink_parts(x: jax.Array, sink: jax.Array, mask: jax.Array | None):
    """(shifted, sink_shift, e, e_sink, S_others) of the row with the sink as one more
    logit, in the compute dtype (`compute_dtype`); `sink` is (..., 1) there already.

    The max M = max(max x, sink) may be the sink's; each shift is exactly 0 at M. The
    two sums of `sum_of_others` take the sink's term after the row's own sums (a maximum
    sink's e^0 = 1 goes to the total only, as a maximum entry's does), so S_others never
    holds the max's 1 whichever of the row and the sink holds it. A sink of -inf adds an
    exact 0 to each sum: the row's sums, and so its outputs, are the plain softmax's bit
    for bit.
    """
    z = _kept_logits(x, mask)
    top = jnp.maximum(jnp.max(z, axis=-1, keepdims=True), sink)
    zero, live = jnp.zeros((), z.dtype), top > -jnp.inf
    shifted = jnp.where((z == top) & live, zero, z - top)
    sink_shift = jnp.where((sink == top) & live, zero, sink - top)
    e = jax.lax.optimization_barrier(jnp.exp(shifted))  # as `softmax_last`
    e_sink = jnp.exp(sink_shift)
    total = jnp.sum(e, axis=-1, keepdims=True) + e_sink
    below = jnp.sum(e * off_max(-shifted), axis=-1, keepdims=True)
    below = below + e_sink * off_max(-sink_shift)
    s_others = jnp.where(total < 2, below, total - 1)
    return shifted, sink_shift, e, e_sink, s_others


def _with_sink_column(out: jax.Array, last: jax.Array, x: jax.Array, mask, fill: float):
    """[out (masked entries `fill`), last] in x's dtype: the K outputs and the sink's."""
    return jnp.concatenate([_kept(out, x, mask, fill), last.astype(x.dtype)], axis=-1)


@jax.custom_jvp
def softmax_sink_last(x: jax.Array, sink: jax.Array, mask: jax.Array | None) -> jax.Array:
    """[p_1 .. p_K, P_sink] over the last axis, (..., K + 1) in x's dtype:
    e^shift / (1 + S_others) for each entry and the sink, as `softmax_last`."""
    _, _, e, e_sink, s_others = _sink_parts(x, sink, mask)
    hi, lo = one_plus(s_others)
    p, p_sink = _divide_scaled(e, hi, lo), _divide_scaled(e_sink, hi, lo)
    return _with_sink_column(p, p_sink, x, mask, 0.0)


@jax.custom_jvp
def log_softmax_sink_last(x: jax.Array, sink: jax.Array, mask: jax.Array | None) -> jax.Array:
    """[log p_1 .. log p_K, log P_sink], (..., K + 1) in x's dtype: shift - log1p(S_others)."""
    shifted, sink_shift, _, _, s_others = _sink_parts(x, sink, mask)
    norm = log1p_of_sum(s_others)
    return _with_sink_column(shifted - norm, sink_shift - norm, x, mask, -jnp.inf)


def _sink_tangent(p, dx, dsink, x, sink, mask, log: bool) -> jax.Array:
    """The tangent of (log_)softmax_sink_last: `_tangent`'s rule on the row [x, sink] of
    K + 1 logits, probabilities p = [p, P_sink], centred on its max (which may be the
    sink), and the tangent [dx, dsink]; (..., K + 1), masked entries 0.

    With d = [dx, dsink] - (that at the max), d log p_k = d_k - sum_j p_j d_j - P_sink
    d_sink over the row's j: the sink's own derivatives, d log p_k / d sink = -P_sink and
    d p_k / d sink = -p_k P_sink, are the K + 1-th column's of the plain rule, and no
    1 - p is formed for a dominant entry or a dominant sink.
    """
    ctype = compute_dtype(x.dtype)
    z = jnp.concatenate([_kept_logits(x, mask), sink.astype(ctype)], axis=-1)
    full = jnp.concatenate([dx.astype(ctype), dsink.astype(ctype)], axis=-1)
    p, i_max = p.astype(ctype), max_index(z, None)
    if log:
        dy = centred_tangent(p, full, i_max)
    else:  # as `_tangent`, whose transpose centres the cotangent too
        v = p * (full - jnp.take_along_axis(full, i_max, axis=-1))
        t = v - p * jnp.sum(v, axis=-1, keepdims=True)
        dy = add_along_rows(t, i_max, -jnp.sum(t, axis=-1, keepdims=True))
    dy = dy.astype(x.dtype)
    if mask is None:
        return dy
    kept = jnp.concatenate([mask, jnp.ones((*mask.shape[:-1], 1), bool)], axis=-1)
    return jnp.where(kept, dy, jnp.zeros((), dy.dtype))


@softmax_sink_last.defjvp
def _softmax_sink_jvp(primals, tangents):
    x, sink, mask = primals
    p = softmax_sink_last(x, sink, mask)
    return p, _sink_tangent(p, tangents[0], tangents[1], x, sink, mask, False)


@log_softmax_sink_last.defjvp
def _log_softmax_sink_jvp(primals, tangents):
    x, sink, mask = primals
    p = softmax_sink_last(x, sink, mask)  # p directly, as `_log_softmax_jvp`
    tangent = _sink_tangent(p, tangents[0], tangents[1], x, sink, mask, True)
    return log_softmax_sink_last(x, sink, mask), tangent


def over_classes_with_sink(fn, x: ArrayLike, axis, where, sink: ArrayLike) -> jax.Array:
    """`over_classes` for fn(x, sink, mask) -> (..., K + 1) of `softmax_sink_last`'s kind:
    checks `sink` too (`_validate.sink_logits`), hands it to fn as (..., 1) in the compute
    dtype, and drops the sink's column."""
    x = _validate.float_array(x, "x", float8=True)
    axes = _validate.class_axes(x, axis, "x")
    mask = _validate.entry_mask(where, x.shape)
    sink = _validate.sink_logits(sink, x.shape, axes).astype(compute_dtype(x.dtype))
    if x.size == 0:
        return x
    flat = _validate.classes_last(x, axes)
    mask = None if mask is None else _validate.classes_last(mask, axes)
    out = fn(flat, sink[..., None], mask)[..., :-1]
    return _validate.classes_back(out, axes, x.shape)


def over_classes(
    fn, x: ArrayLike, axis, where: ArrayLike | None, float8: bool = False
) -> jax.Array:
    """Check `x` (float8 only with `float8`), `axis` and `where`, apply fn(x, mask) with the
    class axes flattened last, and return the result in the shape of `x`. An empty `x` is
    returned as it is."""
    x = _validate.float_array(x, "x", float8=float8)
    axes = _validate.class_axes(x, axis, "x")
    mask = _validate.entry_mask(where, x.shape)
    if x.size == 0:
        return x
    flat = _validate.classes_last(x, axes)
    mask = None if mask is None else _validate.classes_last(mask, axes)
    return _validate.classes_back(fn(flat, mask), axes, x.shape)


def log_softmax(
    x: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
    *,
    sink: ArrayLike | None = None,
) -> jax.Array:
    r"""Log-softmax that stays accurate when one entry dominates (Softmax Collapse fix).

    With shifted_k = x_k - max x and S_others the sum of e^shifted_k over every entry
    but one maximum i (e^-m for the margin m = x_i - logsumexp_{j != i} x_j),

        log_softmax(x)_k = shifted_k - log1p(S_others).

    Standard implementations add e^0 = 1 to e^-m and lose it past the precision
    cliff (`precision_cliff`); here S_others never holds that 1 (it is summed
    without an index, `sum_of_others`), so log_softmax(x)_i = -log1p(e^-m) stays
    accurate down to exponent underflow, and log1p is taken as log(hi) + lo / hi
    with hi + lo = 1 + S_others exactly (XLA's float32 log1p is off by up to 2.3
    ulps). Never exp of a rounded log: that costs |log| ulps. bf16 and fp16 compute in
    float32 and round once. Within `numerics.testing.ULPS` (2 ulps, gradients 4) on
    logits [m, 0] over the whole margin range in every dtype (tests/numerics/
    test_margin_sweep.py); on random rows the rounding of x_k - max x adds the
    conditioning of `numerics.testing.general_bound`.

    Derivatives come from a linear tangent rule (`jax.custom_jvp`), so forward
    mode (`jax.jvp`, `jax.jacfwd`, Hessians) works to any order and reverse mode
    is its transpose: dy = d - sum_j p_j d_j with d = dx - dx_i and p the fixed
    `softmax`, centred on a max entry i so the dominant entry never forms 1 - p_i
    (which rounds to 0 past the cliff) and the gradient sums to zero. Reverse mode
    keeps p and the index i.

    For any batch shape, under `jit`, `vmap`, `grad` and `jvp`.

    Example:
      >>> import jax.numpy as jnp
      >>> # jax.nn gives 0.0 first
      >>> log_softmax(jnp.array([9.0, -9.0, -9.0]))  # doctest: +NUMBER
      Array([-3.04600e-08, -1.8000000e+01, -1.8000000e+01], dtype=float32)

    Edge cases: -inf entries get -inf; a +inf entry gets 0 and the others -inf (n
    +inf entries get -log n each); NaN anywhere in a row makes the whole row NaN; a
    row of only -inf is 0/0 and gives NaN (as `jax.nn.log_softmax`). Entries masked
    out by `where` get -inf and tangent 0; a row masked out entirely gives -inf
    everywhere. An empty class axis gives an empty array.

    Args:
      x: floating-point logits, any shape.
      axis: the class axis, a tuple of axes normalised over together (as
        `jax.nn.log_softmax`), or None for all axes.
      where: optional boolean mask broadcastable to `x`; False entries are left out.
      sink: optional sink logit s, one more term e^s in each row's denominator whose
        own entry is dropped: log(e^x_k / (e^s + sum_j e^x_j)). See `softmax`.

    Returns:
      An array of the shape and dtype of `x`.
    """
    if sink is None:
        return over_classes(log_softmax_last, x, axis, where, float8=True)
    return over_classes_with_sink(log_softmax_sink_last, x, axis, where, sink)


def softmax(
    x: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
    *,
    sink: ArrayLike | None = None,
) -> jax.Array:
    r"""Softmax whose small probabilities and dominant-entry gradient survive the cliff.

    p_k = e^shifted_k / (1 + S_others) with shifted_k and S_others as in
    `log_softmax`, the divisor carried as hi + lo = 1 + S_others exactly and divided
    by with Dekker's exact remainder, so each quotient rounds about once: the
    dominant probability is 1/(1 + e^-m), the others are e^shifted_k over it, each
    from its own exponential (never exp of a rounded log, which costs |log p| ulps).
    bf16 and fp16 compute in float32 and round once. Within `numerics.testing.ULPS`
    on logits [m, 0] over the whole margin range, as `log_softmax`.

    Derivatives: dp = p * (d - sum_j p_j d_j) (`log_softmax`'s rule, centred on a
    max entry i), written so that reverse mode centres the cotangent c on i too,
    g_k = p_k (b_k - sum_j p_j b_j) with b = c - c_i, and sets g_i to minus the sum
    of the others: grad(softmax(x)[i]) stays non-zero past the precision cliff,
    p (1 - p) is never formed as p - p^2, and the gradient sums to zero. Reverse
    mode keeps p and the index i, as jax.nn keeps p.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> jax.grad(lambda z: softmax(z)[0])(jnp.array([9.0, -9.0, -9.0]))  # doctest: +NUMBER
      Array([ 3.04600e-08, -1.52300e-08, -1.52300e-08], dtype=float32)

    Edge cases as `log_softmax`: masked entries and fully masked rows give 0,
    NaN propagates to the whole row, n +inf entries get 1/n each, an empty class
    axis gives an empty array.

    Args:
      x: floating-point logits, any shape.
      axis: the class axis, a tuple of axes, or None for all axes.
      where: optional boolean mask broadcastable to `x`.
      sink: optional sink logit s: one more term in each row's denominator,
        e^x_k / (e^s + sum_j e^x_j), whose own probability e^s / (...) is dropped (the
        outputs sum to 1 - P_sink; the module docstring derives where it moves the cliff).
        0.0 is softmax off by one (Miller's softmax_1), a learned array per head GPT-OSS's
        attention sinks, -inf the plain softmax (log_softmax bit for bit; softmax bit for
        bit wherever e^(x_k - max) is above 2^(2p + 4) smallest normals, float32 5e-23,
        below which the sink path's division is the accurate one, `_divide_scaled`). A
        Python number, or a floating-point array broadcastable to `x`'s shape without the
        class axes (one logit per row: (H, 1) against scores (B, H, Q, K)), or with them
        kept as size 1 ((1, H, 1, 1)); integer and boolean arrays raise TypeError (a sink
        is learned), other shapes ValueError. It is computed in x's compute dtype (float32
        for 16-bit x, a float64 sink rounded to float32 for float32 x); its gradient
        comes back in its own dtype, summed over the rows it is broadcast to. A NaN sink
        makes its rows NaN; +inf takes all the mass (outputs 0, log -inf); a row masked
        out entirely gives 0 (log: -inf) with a finite sink, not NaN. A keyword of
        softmax rather than a function of its own (optax / jax.nn style): the sink is a
        per-row term of the same normaliser, as `where` is a per-entry mask; None is the
        plain path untouched, and one argument switches a caller (attention code,
        `numerics.testing.check_sink_softmax`) between the two.

    Returns:
      Probabilities of the shape and dtype of `x`.
    """
    if sink is None:
        return over_classes(softmax_last, x, axis, where, float8=True)
    return over_classes_with_sink(softmax_sink_last, x, axis, where, sink)
