r"""Fused distillation from hidden states: KL, JS and top-k KL without the (..., V) logits.

Letters as in `numerics._linear`: N rows (the flattened batch shape), D the hidden size
(D_S the student's, D_T the teacher's), V the vocabulary, C the columns of one chunk.

The full forms (`linear_kl_divergence`, `linear_js_divergence`) make two passes over the
vocabulary forward and one backward, each holding one chunk's (N, C) student and teacher
logits, x = h_S W_S and y = h_T W_T in the compute dtype. Writing a = x / T, b = y / T,
T divides only differences of logits, ((x - m) / T, never x / T - m / T; see `_logits`):

1. statistics: per chunk c the maxima m_S^c, m_T^c, the sums X_c = sum e^(a - m_S^c),
   Y_c = sum e^(b - m_T^c) and the gap sum G_c = sum (e^(a - m_S^c) - e^(b - m_T^c)),
   each difference from d = (a - b) - (m_S^c - m_T^c) (`signed_gap`, exact 0 where d = 0).
   They combine over the chunks with M = max_c m^c, alpha_c = e^(m_S^c - M_S) and
   beta_c = e^(m_T^c - M_T): S_S = sum alpha X, S_T = sum beta Y, and the gap over the
   whole vocabulary, G = sum_c beta_c G_c + (alpha_c - beta_c) X_c (each element's
   alpha e^(a - m_S^c) - beta e^(b - m_T^c) split that way; alpha - beta from the maxima's
   difference, again by `signed_gap`), so log(S_S / S_T) = log1p(G / S_T) is formed as
   `kl_divergence` forms it, with no difference of rounded sums.
2. the value: per chunk, s = ((a - b) - (M_S - M_T)) - log(S_S / S_T) and the terms of
   `kl_divergence` (sum p phi(s)) or `js_divergence`, summed over the chunks.

Backward, each chunk's logits are recomputed and the gradient with respect to them (q - p,
or JS's) formed from s. At student == teacher every d is 0, so G = 0, s = 0, and the value
and the gradient are exactly 0, as `kl_divergence`'s are.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from numerics import _validate
from numerics._divergence import phi_weighted, psi, zero_where_no_mass
from numerics._linear import DEFAULT_CHUNK_SIZE, check_head, head_dot, vocab_chunks
from numerics._soft_target import accurate_log1p, signed_gap
from numerics._softmax import compute_dtype

_REDUCTIONS = ("none", "sum", "mean")
_NEAR = 0.5  # |(Q - P) / P| up to which the top-k tail's log-ratio is log1p of it


def _map_chunks(one, weights, chunk: int):
    """one(weight chunks, start, size) over the vocabulary, its outputs stacked (chunks, ...).

    The full chunks go through `lax.scan`, the columns left over through one static step,
    so no weight is padded (a copy of all of it)."""
    full, rest = vocab_chunks(weights[0].shape[1], chunk)
    parts = []
    if full:

        def step(_, i):
            start = i * chunk
            sliced = [jax.lax.dynamic_slice_in_dim(w, start, chunk, axis=1) for w in weights]
            return None, one(sliced, start, chunk)

        parts.append(jax.lax.scan(step, None, jnp.arange(full, dtype=jnp.int32))[1])
    if rest:
        last = one([w[:, full * chunk :] for w in weights], full * chunk, rest)
        parts.append(jax.tree.map(lambda v: v[None], last))
    return jax.tree.map(lambda *v: jnp.concatenate(v, axis=0), *parts)


def _backward_chunks(grad, hidden, weights, chunk: int):
    """(d hidden, d weight) of sum(g * z) over the chunks, z = hidden @ weights[0] and g =
    grad(weight chunks, start, size) in the compute dtype: g rounds once to the inputs'
    dtype (as the materialized loss's gradient does), the two products accumulate in the
    compute dtype, and d weight is written chunk by chunk in place."""
    ctype = compute_dtype(hidden.dtype)
    weight = weights[0]
    full, rest = vocab_chunks(weight.shape[1], chunk)

    def one(sliced, start, size):
        g = grad(sliced, start, size).astype(hidden.dtype)
        return head_dot(g, sliced[0].T), head_dot(hidden.T, g).astype(weight.dtype)

    def step(carry, i):
        d_hidden, d_weight = carry
        start = i * chunk
        sliced = [jax.lax.dynamic_slice_in_dim(w, start, chunk, axis=1) for w in weights]
        dh, dw = one(sliced, start, chunk)
        return (d_hidden + dh, jax.lax.dynamic_update_slice_in_dim(d_weight, dw, start, 1)), None

    carry = (jnp.zeros(hidden.shape, ctype), jnp.zeros(weight.shape, weight.dtype))
    if full:
        carry = jax.lax.scan(step, carry, jnp.arange(full, dtype=jnp.int32))[0]
    d_hidden, d_weight = carry
    if rest:
        dh, dw = one([w[:, full * chunk :] for w in weights], full * chunk, rest)
        d_hidden = d_hidden + dh
        d_weight = jax.lax.dynamic_update_slice_in_dim(d_weight, dw, full * chunk, 1)
    return d_hidden.astype(hidden.dtype), d_weight


def _logits(hidden, weight_chunk):
    """One chunk's logits z (not yet divided by T) in the compute dtype (`head_dot`).

    T divides differences of logits only, ((z_j - z_k) / T, never z_j / T - z_k / T):
    under jit XLA may form x / T as x times 1 / T and fuse a product into a following
    subtraction (an FMA), so two equal logits divided apart need not subtract to 0."""
    return head_dot(hidden, weight_chunk)


# --- The full forms: student and teacher heads ------------------------------------------


def _chunk_stats(x, y, t):
    """Per row: m_S, m_T, X, Y and the gap sum G of one chunk (module docstring, pass 1),
    from the raw logits x, y (the maxima raw: max(z / T) = max(z) / T)."""
    m_s, m_t = jnp.max(x, axis=-1, keepdims=True), jnp.max(y, axis=-1, keepdims=True)
    e_a, e_b = jnp.exp((x - m_s) / t), jnp.exp((y - m_t) / t)
    d = ((x - y) - (m_s - m_t)) / t
    gap = jnp.sum(signed_gap(e_a, e_b, d), axis=-1)
    return m_s[:, 0], m_t[:, 0], jnp.sum(e_a, axis=-1), jnp.sum(e_b, axis=-1), gap


def _combine(t, m_s, m_t, x, y, gap):
    """(M_S, M_T (raw), S_S, S_T, log(S_S / S_T)) per row from the stacked chunk statistics."""
    top_s, top_t = jnp.max(m_s, axis=0), jnp.max(m_t, axis=0)
    shift_s, shift_t = m_s - top_s[None], m_t - top_t[None]
    alpha, beta = jnp.exp(shift_s / t), jnp.exp(shift_t / t)
    s_sum, t_sum = jnp.sum(alpha * x, axis=0), jnp.sum(beta * y, axis=0)
    between = signed_gap(alpha, beta, (shift_s - shift_t) / t)
    total_gap = jnp.sum(beta * gap + between * x, axis=0)
    return top_s, top_t, s_sum, t_sum, accurate_log1p(total_gap / t_sum)


def _pieces(x, y, stats, t):
    """(p, q, s) of one chunk, elementwise, from the combined statistics (pass 2)."""
    top_s, top_t, s_sum, t_sum, ratio = (v[:, None] for v in stats)
    s = ((x - y) - (top_s - top_t)) / t - ratio
    return jnp.exp((y - top_t) / t) / t_sum, jnp.exp((x - top_s) / t) / s_sum, s


def _chunk_terms(form, x, y, stats, t):
    """The chunk's share of the row's divergence: (KL,) or (KL(p || m), KL(q || m))."""
    p, q, s = _pieces(x, y, stats, t)
    if form == "kl":
        return (jnp.sum(phi_weighted(p, s, q), axis=-1),)
    m = (p + q) / 2
    return (
        jnp.sum(phi_weighted(p, psi(s), m), axis=-1),
        jnp.sum(phi_weighted(q, psi(-s), m), axis=-1),
    )


def _chunk_grad(form, x, y, stats, totals, t):
    """d divergence / d (student logits / T) of one chunk (`kl_divergence`'s and
    `js_divergence`'s)."""
    p, q, s = _pieces(x, y, stats, t)
    if form == "kl":
        return signed_gap(q, p, s)
    return zero_where_no_mass(q, -psi(-s) - totals[1][:, None]) / 2


def _pair(h_s, h_t):
    """The two hidden arrays as `_both_logits` takes them: stacked (2, N, D) when their
    hidden sizes agree (stacked once, outside the loop over the chunks), else a tuple."""
    return jnp.stack([h_s, h_t]) if h_s.shape[1] == h_t.shape[1] else (h_s, h_t)


def _both_logits(sliced, pair):
    """Both sides' chunk logits (`_logits`). With equal hidden sizes, one batched product of the
    stacked pair: both sides then go through the same kernel, so equal inputs give
    bit-identical logits (two separate products may be emitted differently under jit, and
    then round differently). The stacked weight chunk is (2, D, C), never (2, D, V)."""
    w_s, w_t = sliced
    if isinstance(pair, tuple):
        return _logits(pair[0], w_s), _logits(pair[1], w_t)
    h, w = pair, jnp.stack([w_s, w_t])
    ctype = compute_dtype(h.dtype)
    if h.dtype != ctype and jax.default_backend() == "cpu":  # as `head_dot`
        h, w = h.astype(ctype), w.astype(ctype)
    z = jax.lax.dot_general(
        h,
        w,
        (((2,), (1,)), ((0,), (0,))),
        precision=jax.lax.Precision.HIGHEST,
        preferred_element_type=ctype,
    )
    return z[0], z[1]


def _forward(form, h_s, w_s, h_t, w_t, temperature, chunk):
    weights = (w_s, w_t)
    t, pair = temperature, _pair(h_s, h_t)
    stats = _combine(
        t, *_map_chunks(lambda sl, *_: _chunk_stats(*_both_logits(sl, pair), t), weights, chunk)
    )
    terms = _map_chunks(
        lambda sl, *_: _chunk_terms(form, *_both_logits(sl, pair), stats, t), weights, chunk
    )
    totals = tuple(jnp.sum(t, axis=0) for t in terms)
    value = totals[0] if form == "kl" else (totals[0] + totals[1]) / 2
    # O(N) statistics only: the backward recomputes each chunk's logits.
    return value, (h_s, w_s, h_t, w_t, temperature, stats, totals)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 6))
def _fused(form, h_s, w_s, h_t, w_t, temperature, chunk):
    return _forward(form, h_s, w_s, h_t, w_t, temperature, chunk)[0]


def _fused_bwd(form, chunk, residuals, cotangent):
    h_s, w_s, h_t, w_t, temperature, stats, totals = residuals
    scale = (cotangent / temperature)[:, None]  # d z / T: the logits were divided by T
    pair = _pair(h_s, h_t)

    def grad(sliced, *_):
        x, y = _both_logits(sliced, pair)
        return _chunk_grad(form, x, y, stats, totals, temperature) * scale

    d_hidden, d_weight = _backward_chunks(grad, h_s, (w_s, w_t), chunk)
    # The teacher is a constant (stop_gradient at the entry): no cotangent.
    return d_hidden, d_weight, None, None, None


_fused.defvjp(lambda *args: _forward(*args), _fused_bwd)


# --- The top-k form: the teacher as stored top-k log-probabilities ------------------------


def _topk_chunk(a, indices, start, size, t):
    """One chunk's (row max, sum e^(a - max), tail max, tail sum, the top-k logits found
    here (0 elsewhere), which top-k entries fall here, the top-k columns as a mask)."""
    local = indices - start
    inside = (local >= 0) & (local < size)
    # Out-of-chunk entries point at column `size`, which `drop` leaves out.
    at = jnp.where(inside, local, size)
    rows = jnp.arange(a.shape[0])[:, None]
    member = jnp.zeros(a.shape, bool).at[rows, at].set(True, mode="drop")
    top = jnp.max(a, axis=-1, keepdims=True)
    tail = jnp.where(member, -jnp.inf, a)
    tail_top = jnp.max(tail, axis=-1, keepdims=True)
    tail_shift = jnp.where(jnp.isfinite(tail_top), tail_top, jnp.zeros((), a.dtype))
    found = jnp.take_along_axis(a, jnp.minimum(at, size - 1), axis=1)
    return (
        top[:, 0],
        jnp.sum(jnp.exp((a - top) / t), axis=-1),
        tail_top[:, 0],
        jnp.sum(jnp.exp((tail - tail_shift) / t), axis=-1),
        jnp.where(inside, found, jnp.zeros((), a.dtype)),
    ), (at, member)


def _topk_combine(t, top, x_all, tail_top, x_tail, found):
    """(M, S, M_tail, S_tail, z at the top-k) per row from the stacked chunk statistics
    (M, M_tail and z raw, the sums of e^((z - max) / T))."""
    m = jnp.max(top, axis=0)
    s_all = jnp.sum(jnp.exp((top - m[None]) / t) * x_all, axis=0)
    m_tail = jnp.max(tail_top, axis=0)  # -inf when the k classes are the whole vocabulary
    shift = jnp.where(jnp.isfinite(m_tail), m_tail, jnp.zeros((), m_tail.dtype))
    s_tail = jnp.sum(jnp.exp((tail_top - shift[None]) / t) * x_tail, axis=0)
    # Each top-k entry lies in exactly one chunk: adding the others' zeros is exact.
    return m, s_all, shift, s_tail, jnp.sum(found, axis=0)


def student_topk_log_probs(hidden, weight, indices, temperature, chunk):
    """Per row (log q at `indices` (N, k), log of the student's mass outside them (N,),
    (M, S) for the tail's gradient), in the compute dtype, chunk by chunk.

    log q_i = (z_i - M) / T - log S, S = sum_j e^((z_j - M) / T) over the vocabulary; the
    tail's log-mass from its own maximum and sum, so it stays finite where it underflows."""
    t = temperature
    stats = _map_chunks(
        lambda sl, start, size: _topk_chunk(_logits(hidden, sl[0]), indices, start, size, t)[0],
        (weight,),
        chunk,
    )
    m, s_all, m_tail, s_tail, found = _topk_combine(t, *stats)
    log_s = jnp.log(s_all)
    log_q = (found - m[:, None]) / t - log_s[:, None]
    log_tail = (m_tail - m) / t + jnp.log(s_tail) - log_s
    return log_q, log_tail, (m, s_all)


def _topk_forward(hidden, weight, teacher_lp, indices, temperature, chunk, has_tail):
    log_q, log_tail_q, tail_stats = student_topk_log_probs(
        hidden, weight, indices, temperature, chunk
    )
    s = log_q - teacher_lp
    p, q = jnp.exp(teacher_lp), jnp.exp(log_q)
    value = jnp.sum(phi_weighted(p, s, q), axis=-1)
    top_grad = signed_gap(q, p, s)
    if has_tail:
        # The teacher's tail 1 - sum p = -expm1(log sum p), clamped at 0 (the stored
        # log-probabilities may sum above 1 by rounding).
        lse = jax.nn.logsumexp(teacher_lp, axis=-1)
        tail_p = -jnp.expm1(jnp.minimum(lse, jnp.zeros((), lse.dtype)))
        # Q_tail - P_tail = sum_i (p_i - q_i), each from s_i without cancellation: exactly 0
        # at equality. Near it the tail's log-ratio is log1p((Q - P) / P); farther,
        # log Q - log P from the tail's own log-mass (finite where Q underflows).
        has_p = tail_p > 0
        safe_p = jnp.where(has_p, tail_p, jnp.ones((), tail_p.dtype))
        y = -jnp.sum(top_grad, axis=-1) / safe_p
        near = jnp.abs(y) <= _NEAR
        t_tail = jnp.where(near, jnp.log1p(jnp.where(near, y, 0)), log_tail_q - jnp.log(safe_p))
        t_tail = jnp.where(has_p, t_tail, jnp.inf)  # P_tail = 0: the term is Q_tail
        value = value + phi_weighted(tail_p, t_tail, jnp.exp(log_tail_q))
        # d/dz_j = q_j (1 - P_tail / Q_tail) = q_j (-expm1(-t)) on the tail.
        tail_factor = -jnp.expm1(-t_tail)
    else:
        tail_factor = jnp.zeros(value.shape, value.dtype)
    return value, (top_grad, tail_factor, tail_stats)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _topk(hidden, weight, teacher_lp, indices, temperature, chunk, has_tail):
    return _topk_forward(hidden, weight, teacher_lp, indices, temperature, chunk, has_tail)[0]


def _topk_fwd(hidden, weight, teacher_lp, indices, temperature, chunk, has_tail):
    value, (top_grad, tail_factor, tail_stats) = _topk_forward(
        hidden, weight, teacher_lp, indices, temperature, chunk, has_tail
    )
    return value, (hidden, weight, indices, temperature, top_grad, tail_factor, tail_stats)


def _topk_bwd(chunk, has_tail, residuals, cotangent):
    hidden, weight, indices, temperature, top_grad, tail_factor, (m, s_all) = residuals
    scale = cotangent / temperature
    top_scaled = top_grad * scale[:, None]
    tail_scale = (tail_factor * scale / s_all)[:, None]
    rows = jnp.arange(hidden.shape[0])[:, None]

    def grad(sliced, start, size):
        a = _logits(hidden, sliced[0])
        at, member = _topk_chunk(a, indices, start, size, temperature)[1]
        top = jnp.zeros(a.shape, a.dtype).at[rows, at].set(top_scaled, mode="drop")
        tail = jnp.exp((a - m[:, None]) / temperature) * tail_scale  # q_j (1 - P_tail / Q_tail) / T
        return jnp.where(member, top, tail)

    d_hidden, d_weight = _backward_chunks(grad, hidden, (weight,), chunk)
    zero_indices = np.zeros(indices.shape, jax.dtypes.float0)
    return d_hidden, d_weight, None, zero_indices, None


_topk.defvjp(_topk_fwd, _topk_bwd)


# --- Entry points ---------------------------------------------------------------------------


def _check_common(hidden, weight, names, chunk_size, reduction, temperature):
    hidden, weight = check_head(hidden, weight, names, chunk_size)
    if weight.shape[1] == 0:
        raise ValueError(f"{names[1]} has no column: the vocabulary must not be empty.")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}.")
    if not isinstance(temperature, jax.core.Tracer) and not float(temperature) > 0:
        raise ValueError(f"temperature must be > 0; got {temperature}.")
    return hidden, weight, min(int(chunk_size), weight.shape[1])


def _host(given):
    """An argument as given, as a NumPy array when it is concrete (not traced), else None."""
    if given is None or isinstance(given, jax.core.Tracer):
        return None
    return np.asarray(given)


def _check_topk_logprobs(host, dtype, k: int, kept) -> None:
    """Concrete top-k log-probabilities (the kept rows') must be <= 0 (not NaN), and the
    tail mass 1 - sum_i exp(logprob_i) must lie in [0, 1].

    The tail mass is <= 1 whenever the entries are <= 0; below 0 means the k probabilities
    sum above 1. Rounding alone can do that: a log-softmax formed in a float of epsilon eps
    carries an error of a few eps times the logits' size in each entry, so log sum_i p_i
    can exceed 0 by that much. Such sums are clamped (P_tail = 0) as before; only
    log sum_i p_i > sqrt(eps) is rejected (3.5e-4 in float32, 0.088 in bf16: logits of
    size up to about 1 / sqrt(eps), 2900 in float32, stay within it), which catches logits
    or probabilities passed in place of log-probabilities."""
    if host is None or host.size == 0:
        return
    rows = host.astype(np.float64).reshape(-1, k)
    if kept is not None:
        rows = rows[np.asarray(kept).reshape(-1)]
    bad = ~(rows <= 0)
    if np.any(bad):
        raise ValueError(
            "teacher_topk_logprobs must be log-probabilities, <= 0 and not NaN; got "
            f"{float(rows[bad][0])} ({int(bad.sum())} such entries): pass log_softmax of the "
            "teacher's logits, not the logits."
        )
    top = np.max(rows, axis=-1, keepdims=True) if rows.size else rows
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        log_mass = (shift + np.log(np.sum(np.exp(rows - shift), axis=-1, keepdims=True)))[:, 0]
    limit = float(np.sqrt(jnp.finfo(dtype).eps))
    if rows.size and np.max(log_mass) > limit:
        worst = int(np.argmax(log_mass))
        raise ValueError(
            "the tail mass 1 - sum(exp(teacher_topk_logprobs)) must lie in [0, 1]; row "
            f"{worst} (of the kept rows) has {-np.expm1(log_mass[worst]):.4g}: its "
            f"{k} probabilities sum to {np.exp(log_mass[worst]):.4g}, more than 1 by more "
            f"than rounding allows (log of the sum > sqrt(eps) = {limit:.2g}). Pass the "
            "teacher's log-softmax at its top k classes."
        )


def _check_where(where, shape):
    if where is None:
        return None
    kept = jnp.asarray(where)
    if kept.dtype != jnp.bool_ or kept.shape != shape:
        raise ValueError(
            f"where must be a boolean mask of the rows' shape {shape} (hidden.shape[:-1]); got "
            f"{kept.dtype} of shape {kept.shape}."
        )
    return kept.reshape(-1)


def _finish(per_row, keep, shape, dtype, reduction):
    """Masked rows to 0; per-row (rounded once) or reduced in the compute dtype."""
    ctype = per_row.dtype
    if keep is not None:
        per_row = jnp.where(keep, per_row, jnp.zeros((), ctype))
    if reduction == "none":
        return per_row.reshape(shape).astype(dtype)
    total = jnp.sum(per_row)
    if reduction == "sum":
        return total.astype(dtype)
    count = jnp.asarray(per_row.size, ctype) if keep is None else jnp.sum(keep).astype(ctype)
    return (total / jnp.maximum(count, 1)).astype(dtype)


def _rows(hidden, keep):
    """hidden as (N, D), masked rows zeroed (their value and gradient are then 0)."""
    h = hidden.reshape(-1, hidden.shape[-1])
    return h if keep is None else jnp.where(keep[:, None], h, jnp.zeros((), h.dtype))


def _linear_divergence(form, h_s, w_s, h_t, w_t, temperature, where, chunk_size, reduction):
    h_s, w_s, chunk = _check_common(
        h_s, w_s, ("student_hidden", "student_weight"), chunk_size, reduction, temperature
    )
    h_t, w_t, _ = _check_common(
        h_t, w_t, ("teacher_hidden", "teacher_weight"), chunk_size, reduction, temperature
    )
    if h_t.dtype != h_s.dtype:
        raise TypeError(
            f"student ({h_s.dtype}) and teacher ({h_t.dtype}) must have the same dtype: the "
            "lab never promotes precision silently."
        )
    if h_s.shape[:-1] != h_t.shape[:-1]:
        raise ValueError(
            f"student_hidden {h_s.shape} and teacher_hidden {h_t.shape} must have the same "
            "batch shape (all but the last axis)."
        )
    if w_s.shape[1] != w_t.shape[1]:
        raise ValueError(
            f"student_weight (D, V={w_s.shape[1]}) and teacher_weight (D, V={w_t.shape[1]}) "
            "must share the vocabulary."
        )
    shape = h_s.shape[:-1]
    keep = _check_where(where, shape)
    ctype = compute_dtype(h_s.dtype)
    t = jnp.asarray(temperature, ctype)
    teacher = jax.lax.stop_gradient((_rows(h_t, keep), w_t, t))
    if h_s.size == 0:
        per_row = jnp.zeros((int(np.prod(shape)),), ctype)
    else:
        per_row = _fused(form, _rows(h_s, keep), w_s, teacher[0], teacher[1], teacher[2], chunk)
    return _finish(per_row, keep, shape, h_s.dtype, reduction)


def linear_kl_divergence(
    student_hidden: ArrayLike,
    student_weight: ArrayLike,
    teacher_hidden: ArrayLike,
    teacher_weight: ArrayLike,
    *,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
    reduction: str = "none",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> jax.Array:
    return _linear_divergence(
        "kl",
        student_hidden,
        student_weight,
        teacher_hidden,
        teacher_weight,
        temperature,
        where,
        chunk_size,
        reduction,
    )


def linear_js_divergence(
    student_hidden: ArrayLike,
    student_weight: ArrayLike,
    teacher_hidden: ArrayLike,
    teacher_weight: ArrayLike,
    *,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
    reduction: str = "none",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> jax.Array:
    return _linear_divergence(
        "js",
        student_hidden,
        student_weight,
        teacher_hidden,
        teacher_weight,
        temperature,
        where,
        chunk_size,
        reduction,
    )


_COMMON = """
    The two heads in one: with a = student_hidden @ student_weight / T and b =
    teacher_hidden @ teacher_weight / T (hidden (..., D_S) and (..., D_T), weights (D_S, V)
    and (D_T, V): the hidden sizes may differ, the vocabulary is shared), computed over the
    vocabulary in chunks of `chunk_size` columns, so only (N, chunk_size) logits of each
    side exist at a time. Two passes forward (the per-row statistics, combined across the
    chunks without any difference of rounded sums, then the value), one backward that
    recomputes each chunk's logits: memory O(N (D_S + D_T) + (D_S + D_T) V + N chunk_size),
    not O(N V). The algorithm and its exact zero: `numerics._linear_divergence`'s docstring.

    The teacher is a constant: its hidden, weight and the temperature pass through
    `jax.lax.stop_gradient`, so their gradients are 0; the gradients are with respect to
    student_hidden and student_weight. Reverse mode only (`jax.custom_vjp`), as
    `linear_cross_entropy`; `jax.jvp` raises.

    Precision: logits accumulate in float32 for bf16, fp16 and fp32 (float64 for float64)
    at HIGHEST matmul precision (`linear_cross_entropy`'s policy), and everything after
    lives in that compute dtype; the gradient with respect to the logits rounds once to
    the inputs' dtype before the two backward products, which accumulate in the compute
    dtype. Per-row values round once to the inputs' dtype; "sum" and "mean" reduce in the
    compute dtype first. Value and gradient are exactly 0 at student == teacher (the same
    hidden and weight) in every dtype and at every temperature. Against the materialized
    function on the same logits, tests/numerics/test_linear_divergence.py states the bound.

    Args:
      student_hidden: (..., D_S) floating-point activations (bf16, fp16, fp32 or fp64).
      student_weight: (D_S, V) of the same dtype.
      teacher_hidden: (..., D_T), the same batch shape and dtype.
      teacher_weight: (D_T, V) of the same dtype.
      temperature: T > 0; both sides' logits are divided by it (in the compute dtype).
      where: optional boolean mask of the rows' shape (hidden.shape[:-1]): False rows
        (padding) give 0 and gradient 0, as in `linear_cross_entropy`.
      reduction: "none" (per row, shape hidden.shape[:-1]), "sum", or "mean" over the kept
        rows (0 when none is kept).
      chunk_size: vocabulary columns per chunk, > 0 (capped at V).

    Returns:
      Divergences in the hidden's dtype: hidden.shape[:-1] for "none", a scalar otherwise.
"""

linear_kl_divergence.__doc__ = (
    r"""KL(p || q) of softmax(teacher head / T) from softmax(student head / T), fused.

    What `kl_divergence(student_hidden @ student_weight, teacher_hidden @ teacher_weight,
    temperature=T)` returns (per row), without either side's (..., V) logits: each chunk
    adds sum p phi(s), phi(t) = e^t - 1 - t >= 0, with s = log(q / p) from the logits'
    difference, and d/d(student logits) = (q - p) / T, formed from s.

    Example (D_S = 2, D_T = 3, V = 3):
      >>> import jax, jax.numpy as jnp
      >>> from numerics import kl_divergence
      >>> h_s, w_s = jnp.array([[1.0, 2.0]]), jnp.array([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0]])
      >>> h_t, w_t = jnp.array([[1.0, 0.0, 1.0]]), jnp.eye(3)
      >>> got = linear_kl_divergence(h_s, w_s, h_t, w_t, temperature=2.0, chunk_size=2)
      >>> bool(jnp.allclose(got, kl_divergence(h_s @ w_s, h_t @ w_t, temperature=2.0)))
      True
      >>> linear_kl_divergence(h_s, w_s, h_s, w_s, temperature=2.0)  # the teacher itself
      Array([0.], dtype=float32)
"""
    + _COMMON
)

linear_js_divergence.__doc__ = (
    r"""Jensen-Shannon divergence of the student's and teacher's heads' softmaxes, fused.

    What `js_divergence(student_hidden @ student_weight, teacher_hidden @ teacher_weight,
    temperature=T)` returns (per row): (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2,
    each term p phi(psi(s)) or q phi(psi(-s)) >= 0 summed chunk by chunk; the student
    gradient q (log(q / m) - KL(q || m)) / 2 / T needs the row's KL(q || m), kept from the
    forward.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> h, w = jnp.array([[1.0, -1.0]], jnp.bfloat16), jnp.eye(2, 5, dtype=jnp.bfloat16)
      >>> jax.grad(lambda h: linear_js_divergence(h, w, h, w, reduction="sum"))(h)
      Array([[0, 0]], dtype=bfloat16)
"""
    + _COMMON
)


def linear_topk_kl_divergence(
    student_hidden: ArrayLike,
    student_weight: ArrayLike,
    teacher_topk_logprobs: ArrayLike,
    teacher_topk_indices: ArrayLike,
    *,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
    reduction: str = "none",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> jax.Array:
    r"""KL of a stored top-k teacher from the student's head, over k + 1 bins, fused.

    The teacher is given as its k largest log-probabilities per row (`teacher_topk_logprobs`,
    (..., k)) and their vocabulary indices (`teacher_topk_indices`, (..., k), distinct per
    row); the mass outside them is one tail bin, P_tail = 1 - sum_i exp(logprob_i) (from
    -expm1(logsumexp), clamped at 0). The student's softmax q = softmax(student_hidden @
    student_weight / T) is coarse-grained the same way: q_i at the k indices, and its mass
    outside them, Q_tail = sum_{j not in top-k} q_j (summed directly, never as 1 - sum q_i).
    The result is

        KL = sum_i p_i log(p_i / q_i) + P_tail log(P_tail / Q_tail),

    the "tail-aware" top-k forward KL of verl's `forward_kl_topk_tail` (verl-project/verl
    issue 7856 and pull request 7855: "each selected token is its own category and every
    remaining token belongs to one tail category"; their teacher tail clamped at 0 as
    here), computed as sum p phi(s) + P_tail phi(t) with phi(u) = e^u - 1 - u >= 0,
    s_i = log q_i - logprob_i and t = log(Q_tail / P_tail), which near the teacher is
    log1p(sum_i (p_i - q_i) / P_tail), each p_i - q_i from s_i without cancellation. So the
    value and gradient are exactly 0 where the student's log-probabilities at the k indices,
    log q_i = (z_i - M) / T - log sum_j e^((z_j - M) / T) as formed here, equal the stored
    ones (the tail bin's t is then 0 too), and no digit is lost near there; the value is
    never negative. (Two compiled programs may sum the same terms in different orders, so
    a teacher's log-softmax of the same logits usually agrees with them to rounding only;
    the value is then of the order of that rounding squared.) Where P_tail is 0 the tail
    term is Q_tail.
    The temperature divides the student's logits only: the teacher's log-probabilities
    are taken as stored (sampled at whatever temperature the teacher ran).

    One pass over the vocabulary forward (log q at the k indices and the tail's log-mass,
    with its own maximum, so it stays finite where Q_tail underflows), one backward: the
    gradient with respect to the student's logits is (q_i - p_i) / T at the k indices and
    q_j (1 - P_tail / Q_tail) / T on the tail. The teacher's arguments get no gradient
    (stop_gradient); reverse mode only. Precision as `linear_kl_divergence`.
    With k = V there is no tail bin.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> h, w = jnp.array([[1.0, 2.0]]), jnp.array([[1.0, 0.0, -1.0, 0.5], [0.5, 2.0, 0.0, 0.0]])
      >>> log_q = jax.nn.log_softmax(h @ w)
      >>> idx = jnp.array([[1, 0]])
      >>> lp = jnp.take_along_axis(log_q, idx, axis=1) + jnp.array([[-0.1, 0.1]])
      >>> p_tail = 1 - jnp.exp(lp).sum()
      >>> q_tail = 1 - jnp.exp(jnp.take_along_axis(log_q, idx, axis=1)).sum()
      >>> want = (jnp.exp(lp) * (lp - jnp.take_along_axis(log_q, idx, 1))).sum()
      >>> want += p_tail * jnp.log(p_tail / q_tail)
      >>> got = linear_topk_kl_divergence(h, w, lp, idx, chunk_size=3)
      >>> bool(jnp.allclose(got, want, rtol=1e-5))
      True

    Args:
      student_hidden: (..., D) floating-point activations (bf16, fp16, fp32 or fp64).
      student_weight: (D, V) of the same dtype.
      teacher_topk_logprobs: (..., k) log-probabilities, in the hidden's dtype or its
        compute dtype (float32 for 16-bit hidden). When concrete, a ValueError for an entry
        > 0 or NaN, and for a row (kept by `where`) whose probabilities sum above 1 by more
        than rounding allows (log of the sum > sqrt(eps) of their dtype): a tail mass
        outside [0, 1]. Sums above 1 within that are clamped (P_tail = 0).
      teacher_topk_indices: (..., k) integer vocabulary indices, distinct per row, in
        [0, V) (checked when concrete; traced ones out of range give garbage).
      temperature: T > 0, dividing the student's logits.
      where, reduction, chunk_size: as in `linear_kl_divergence`.

    Returns:
      Divergences in the hidden's dtype: hidden.shape[:-1] for "none", a scalar otherwise.
    """
    hidden, weight, chunk = _check_common(
        student_hidden,
        student_weight,
        ("student_hidden", "student_weight"),
        chunk_size,
        reduction,
        temperature,
    )
    ctype = compute_dtype(hidden.dtype)
    lp = _validate.float_array(teacher_topk_logprobs, "teacher_topk_logprobs")
    if lp.dtype not in (hidden.dtype, ctype):
        raise TypeError(
            f"teacher_topk_logprobs ({lp.dtype}) must have the hidden's dtype ({hidden.dtype})"
            f" or its compute dtype ({ctype}): the lab never promotes precision silently."
        )
    indices = _validate.int_array(teacher_topk_indices, "teacher_topk_indices")
    shape, v = hidden.shape[:-1], weight.shape[1]
    if lp.ndim < 1 or lp.shape[:-1] != shape or indices.shape != lp.shape:
        raise ValueError(
            f"teacher_topk_logprobs {lp.shape} and teacher_topk_indices {indices.shape} must "
            f"both be (..., k) with the hidden's batch shape {shape}."
        )
    k = lp.shape[-1]
    if not 1 <= k <= v:
        raise ValueError(f"k = {k} top-k entries: need 1 <= k <= V = {v}.")
    # Checked on the host when concrete: the arguments as given (a NumPy array closed over
    # by a traced function stays concrete, though `jnp.asarray` of it would be traced).
    host_idx = _host(teacher_topk_indices)
    if host_idx is not None and host_idx.size:
        host = host_idx.reshape(-1, k)
        if host.min() < 0 or host.max() >= v:
            raise ValueError(
                f"teacher_topk_indices must lie in [0, {v}); got values in "
                f"[{int(host.min())}, {int(host.max())}]."
            )
        ordered = np.sort(host, axis=-1)
        if np.any(ordered[:, 1:] == ordered[:, :-1]):
            raise ValueError("teacher_topk_indices must be distinct within each row.")
    keep = _check_where(where, shape)
    kept_host = _host(where)
    if where is None or kept_host is not None:  # a traced mask: which rows count is unknown
        _check_topk_logprobs(_host(teacher_topk_logprobs), lp.dtype, k, kept_host)
    t = jax.lax.stop_gradient(jnp.asarray(temperature, ctype))
    lp = jax.lax.stop_gradient(lp.reshape(-1, k).astype(ctype))
    idx = indices.reshape(-1, k).astype(jnp.int32)
    if hidden.size == 0:
        per_row = jnp.zeros((int(np.prod(shape)),), ctype)
    else:
        h = hidden.reshape(-1, hidden.shape[-1])
        if keep is not None:
            # Masked rows are computed on a uniform student and a matching teacher, then
            # zeroed: finite, and their cotangent is 0.
            h = jnp.where(keep[:, None], h, jnp.zeros((), h.dtype))
            lp = jnp.where(keep[:, None], lp, jnp.asarray(-np.log(v), ctype))
        per_row = _topk(h, weight, lp, idx, t, chunk, k < v)
    return _finish(per_row, keep, shape, hidden.dtype, reduction)


# --- A teacher's top-k from its hidden states -----------------------------------------------


@functools.partial(jax.jit, static_argnums=(2, 4))
def _teacher_topk(hidden, weight, k: int, temperature, chunk: int):
    """(log p at the top k (N, k), their indices (N, k)) of softmax(hidden @ weight / T), one
    chunk of logits at a time: a running top k of the logits (merged with each chunk's own
    top k: ties keep the lower index, as `jax.lax.top_k` on the whole row does) and a running
    maximum and sum for the log-sum-exp, in the compute dtype."""
    n, vocab = hidden.shape[0], weight.shape[1]
    ctype = compute_dtype(hidden.dtype)
    t = jnp.asarray(temperature, ctype)

    def merge(carry, z, start, size):
        values, indices, m, s = carry
        cv, ci = jax.lax.top_k(z, min(k, size))
        both_v = jnp.concatenate([values, cv], axis=-1)
        both_i = jnp.concatenate([indices, ci.astype(indices.dtype) + start], axis=-1)
        values, pos = jax.lax.top_k(both_v, k)
        indices = jnp.take_along_axis(both_i, pos, axis=-1)
        new_m = jnp.maximum(m, jnp.max(z, axis=-1))
        s = s * jnp.exp((m - new_m) / t) + jnp.sum(jnp.exp((z - new_m[:, None]) / t), axis=-1)
        return values, indices, new_m, s

    carry = (
        jnp.full((n, k), -jnp.inf, ctype),
        jnp.zeros((n, k), jnp.int32),
        jnp.full((n,), -jnp.inf, ctype),
        jnp.zeros((n,), ctype),
    )
    full, rest = vocab_chunks(vocab, chunk)
    if full:

        def step(carry, i):
            start = i * chunk
            w_chunk = jax.lax.dynamic_slice_in_dim(weight, start, chunk, axis=1)
            return merge(carry, _logits(hidden, w_chunk), start, chunk), None

        carry = jax.lax.scan(step, carry, jnp.arange(full, dtype=jnp.int32))[0]
    if rest:
        start = full * chunk
        carry = merge(carry, _logits(hidden, weight[:, start:]), start, rest)
    values, indices, m, s = carry
    return (values - m[:, None]) / t - jnp.log(s)[:, None], indices


def linear_topk_log_probs(
    hidden: ArrayLike,
    weight: ArrayLike,
    k: int,
    *,
    temperature: ArrayLike = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> tuple[jax.Array, jax.Array]:
    r"""A teacher's k largest log-probabilities and their indices, from its hidden states.

    log softmax(hidden @ weight / T) at its k largest entries per row, and their vocabulary
    indices, the (..., V) logits never held: chunk by chunk, a running top k of the logits and
    a running log-sum-exp (maximum and rescaled sum) in the compute dtype (float32 for bf16
    and fp16, as `linear_cross_entropy`'s). The pair is what `linear_topk_kl_divergence`
    takes as its teacher, so a teacher given as hidden states and a head is

        linear_topk_kl_divergence(h_s, w_s, *linear_topk_log_probs(h_t, w_t, k))

    with both heads chunked; or store the pair once and train from it. Ties keep the lower
    index, as `jax.lax.top_k` does. No gradient flows (a teacher is a constant).

    Example:
      >>> import jax.numpy as jnp
      >>> h, w = jnp.array([[1.0, 2.0]]), jnp.array([[1.0, 0.0, -1.0, 0.5], [0.5, 2.0, 0.0, 0.0]])
      >>> lp, idx = linear_topk_log_probs(h, w, 2, chunk_size=3)
      >>> idx.tolist(), bool(jnp.allclose(lp, jax.nn.log_softmax(h @ w)[:, [1, 0]]))
      ([[1, 0]], True)

    Args:
      hidden: (..., D) floating-point activations (bf16, fp16, fp32 or fp64).
      weight: (D, V) of the same dtype.
      k: how many entries per row, 1 <= k <= V.
      temperature: T > 0 (a Python number or a scalar).
      chunk_size: vocabulary columns per chunk (>= 1).

    Returns:
      (log-probabilities (..., k) in the compute dtype, indices (..., k) int32), each row's
      in decreasing order.
    """
    hidden, weight, chunk = _check_common(
        hidden, weight, ("hidden", "weight"), chunk_size, "none", temperature
    )
    vocab = weight.shape[1]
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= vocab:
        raise ValueError(f"k must be an integer in [1, {vocab}] (the vocabulary), got {k!r}")
    batch = hidden.shape[:-1]
    rows = hidden.reshape(-1, hidden.shape[-1])
    lp, idx = _teacher_topk(rows, weight, int(k), temperature, chunk)
    lp, idx = jax.lax.stop_gradient(lp), jax.lax.stop_gradient(idx)
    return lp.reshape(*batch, int(k)), idx.reshape(*batch, int(k))
