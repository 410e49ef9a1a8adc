"""The chunked linear cross-entropy: CE of hidden @ weight without the (..., V) logits.

Letters: N rows (the flattened batch shape), D the hidden size, V the vocabulary, C the
chunk of the vocabulary one step of the scan holds, as (N, C) logits.

**Per-token outputs** (`return_aux=True`, issue 47): the label's log-probability, the
softmax's entropy, the log-sum-exp, the argmax and the z-loss term, per row, from the same
chunk loop, never the (N, V) logits. With z the logits the loss sees (capped, then divided
by the temperature) and, per chunk c, m_c its max (the first one, index a_c), r_c =
sum_{j in c, j != a_c} e^(z_j - m_c) (the chunk's sum without its maximum's own 1) and
t_c = sum_{j in c} (m_c - z_j) e^(z_j - m_c) >= 0:

- log_prob = -CE of the plain margin form, -log1p(S_others e^(M - z_y)) with the target's
  term summed apart (`numerics._lm_loss`): accurate near 0, where log_softmax is 0.
- entropy. With M = max_c m_c, e^(z_j - M) = e^(m_c - M) e^(z_j - m_c) and M - z_j =
  (M - m_c) + (m_c - z_j), so S = sum_j e^(z_j - M) and T = sum_j (M - z_j) e^(z_j - M) are

      S = sum_c e^(m_c - M) (1 + r_c),    T = sum_c e^(m_c - M) (t_c + (M - m_c)(1 + r_c)),

  every term >= 0. (The online form of the same identity rescales the running sums when
  the max grows, T' = e^(M_old - M_new) (T + (M_new - M_old) S); the chunks are combined
  at the end instead, as `combine` does, so each term is rescaled once.) Since
  -log p_j = (M - z_j) + log S,

      H = sum_j p_j (-log p_j) = log S + T / S,

  two non-negative terms, so H never cancels (the standard lse - sum_j p_j z_j subtracts
  two numbers of the size of |z|, which is noise for a peaked row or a large common
  offset). For a peaked row S = 1 + S_others with S_others tiny: S_others = sum_c
  e^(m_c - M) (r_c + [c != c*]) leaves out the one 1 of the first chunk c* holding M, so
  log S = log1p(S_others) is formed without adding S_others to 1 (`one_plus`), and T / S
  keeps T's relative accuracy: the materialized `numerics.entropy`'s form, H =
  log1p(S_others) + A, A = T / (1 + S_others).
- lse = M + log S, argmax the first index of the max (jnp.argmax's ties), z_loss = w lse^2.

Gradients (`jax.custom_vjp`, the backward recomputes each chunk): d log_prob / dz =
onehot(y) - p with the target entry S_others / S (never 1 - p_y), dH / dz_k = p_k (g_k - A)
with g_k = M - z_k (at the max -p A, never 1 - p; the same as -p_k (log p_k + H)), d lse /
dz = p; each times the cotangent of its output, summed with the loss's, times the cap's
sech^2 and 1 / T, rounded once to the inputs' dtype before the two backward products.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from numerics import _validate, _vocab_parallel
from numerics._lm_loss import (
    ChunkStats,
    LossOptions,
    cap_slope,
    capped,
    chunk_grad,
    chunk_stats,
    combine,
    finish,
    validate_options,
)
from numerics._softmax import compute_dtype, off_max, one_plus

DEFAULT_CHUNK_SIZE = 4096
"""Vocabulary columns per chunk: (N, 4096) float32 logits live at a time, 64 MiB at
N = 4,096 rows, against 2 GiB for V = 128k materialized."""

_REDUCTIONS = ("none", "sum", "mean")


def _probe_inputs(dtype) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """(a, b, a @ b exactly) pairs that tell a float32 accumulation of exact products from a
    16-bit one: 4,097 ones (a bf16 accumulator stops at 256, an fp16 one at 2,048), and three
    products of (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14, whose last bit a 16-bit product or sum loses
    and float32 keeps (3 + 3 (2^-6 + 2^-14) has 15 significant bits)."""
    x = 1 + 2.0**-7  # exact in bfloat16 (7 fraction bits) and float16 (10)
    return [
        (np.ones((1, 4097), dtype), np.ones((4097, 1), dtype), 4097.0),
        (np.full((1, 3), x, dtype), np.full((3, 1), x, dtype), 3 * x * x),
    ]


@functools.cache
def _native_16bit(backend: str, dtype_name: str) -> bool:
    """Whether `backend` computes a `dtype_name` x `dtype_name` dot with
    preferred_element_type float32 as exact products accumulated in float32: the probe
    (`_probe_inputs`) run once per process, backend and dtype, so the choice is a function of
    the machine (its CPU features, XLA_FLAGS' instruction-set cap), never of a timing."""
    dtype = np.dtype(dtype_name)
    device = jax.devices(backend)[0]
    dot = jax.jit(
        lambda a, b: jnp.dot(
            a, b, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32
        )
    )
    with jax.ensure_compile_time_eval():
        for a, b, exact in _probe_inputs(dtype):
            try:
                got = dot(jax.device_put(a, device), jax.device_put(b, device))
            except jax.errors.JaxRuntimeError:  # a backend that cannot run the native dot
                return False
            if got.dtype != np.float32 or float(np.asarray(got)[0, 0]) != np.float32(exact):
                return False
    return True


def operand_dtype(dtype, backend: str | None = None) -> np.dtype:
    """The dtype `linear_cross_entropy`'s matmuls take their `dtype` operands in on `backend`
    (default: JAX's default backend): 16-bit operands as they are where the backend's dot
    accumulates them in float32 (a probe, once per process), else float32 (the exact
    conversion); float32 and float64 as they are.

    >>> import jax.numpy as jnp, numerics
    >>> numerics.linear_operand_dtype(jnp.float32)
    dtype('float32')
    """
    dtype = np.dtype(dtype)
    ctype = np.dtype(compute_dtype(dtype))
    if dtype == ctype:
        return dtype
    return dtype if _native_16bit(backend or jax.default_backend(), dtype.name) else ctype


def head_dot(a, b, ctype=None):
    """a @ b accumulated in the compute dtype (or `ctype`, the `accumulation_dtype` of
    `linear_cross_entropy`), at HIGHEST precision.

    bf16 and fp16 products accumulate in float32 (`preferred_element_type`), and float32
    runs at HIGHEST, so no backend drops to bf16 or TF32 passes behind the caller's back.
    16-bit operands go to the matmul as they are where a probe shows the backend accumulates
    them in float32 (`operand_dtype`), else converted to float32 first: exact (every 16-bit
    value is a float32 and so is every product of two), the same accumulation either way.
    Native bf16 ran 1.5-2.8x faster than the conversion on this project's AMD EPYC with
    AVX512-BF16 (N 1,024, D 256, C 4,096; benchmarks/bench_linear_cross_entropy.py for the loss).
    A `ctype` wider than the compute dtype (float64 for bf16, fp16 or fp32 operands) takes
    the operands converted to it, exactly, so products and sums are float64's.
    """
    default = compute_dtype(a.dtype)
    ctype = default if ctype is None else np.dtype(ctype)
    if a.dtype != ctype and (ctype != default or operand_dtype(a.dtype) == np.dtype(ctype)):
        a, b = a.astype(ctype), b.astype(ctype)
    return jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST, preferred_element_type=ctype)


def _logits(hidden_NxD, weight_DxC, bias_C, ctype=None):
    """One chunk's logits in the compute dtype (`head_dot`), the bias (if any) added there."""
    z = head_dot(hidden_NxD, weight_DxC, ctype)
    return z if bias_C is None else z + bias_C.astype(z.dtype)[None, :]


def _bias_chunk(bias, start, size):
    """The bias's columns [start, start + size) (None without a bias)."""
    return None if bias is None else jax.lax.dynamic_slice_in_dim(bias, start, size)


def vocab_chunks(num_classes: int, chunk: int) -> tuple[int, int]:
    """(full chunks, columns left over): the scan takes the full ones, one static
    step the rest, so the weight is never padded (a copy of all of it)."""
    return num_classes // chunk, num_classes % chunk


def _stacked(one, weight, chunk, index_dtype):
    """`one(w_chunk, start, size)` over the vocabulary's chunks (the columns of `weight`, or
    of a block's logits), stacked on a leading axis: a scan over the full chunks (one chunk
    of `one`'s intermediates alive at a time), one static step for the rest."""
    full, rest = vocab_chunks(weight.shape[1], chunk)

    def step(_, i):
        start = i * chunk
        return None, one(jax.lax.dynamic_slice_in_dim(weight, start, chunk, axis=1), start, chunk)

    parts = []
    if full:
        parts.append(jax.lax.scan(step, None, jnp.arange(full, dtype=index_dtype))[1])
    if rest:
        last = one(weight[:, full * chunk :], jnp.asarray(full * chunk, index_dtype), rest)
        parts.append(jax.tree.map(lambda v: v[None], last))
    return jax.tree.map(lambda *v: jnp.concatenate(v, axis=0), *parts)


def _stats(hidden, weight, bias, labels, opts: LossOptions, chunk: int) -> ChunkStats:
    """The combined per-row statistics, one chunk of logits alive at a time."""

    def one(w_chunk, start, size):
        z = _logits(hidden, w_chunk, _bias_chunk(bias, start, size))
        return chunk_stats(capped(z, opts), labels - start, None, opts)

    return combine(_stacked(one, weight, chunk, labels.dtype))


def _forward(hidden, weight, bias, labels, opts, chunk):
    stats = _stats(hidden, weight, bias, labels, opts, chunk)
    kept_t = jnp.ones(labels.shape, bool)
    return finish(stats, kept_t, opts)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _linear(hidden, weight, bias, labels, opts, chunk):
    return _forward(hidden, weight, bias, labels, opts, chunk)[0]


def _linear_fwd(hidden, weight, bias, labels, opts, chunk):
    loss, terms = _forward(hidden, weight, bias, labels, opts, chunk)
    # O(N) statistics only: the backward recomputes each chunk's logits.
    return loss, (hidden, weight, bias, labels, terms)


def _linear_bwd(opts, chunk, residuals, cotangent):
    return backward(opts, chunk, residuals, cotangent, None)


def _varying(x) -> frozenset:
    """The mesh axes x varies over inside shard_map (jax 0.10: `manual_axis_type.varying`;
    earlier releases: `vma`)."""
    aval = jax.typeof(x)
    kind = getattr(aval, "manual_axis_type", None)
    return frozenset(kind.varying if kind is not None else getattr(aval, "vma", ()))


def backward(opts, chunk, residuals, cotangent, vocab_axis):
    """(d hidden, d weight, d bias, d labels) from the forward's residuals.

    Inside `jax.shard_map`, a gradient that varies over mesh axes its primal does not
    (the rows split over a batch axis, the vocabulary over `vocab_axis` for the
    vocabulary-parallel loss, `numerics._vocab_parallel`) is that primal's gradient summed
    over those axes: it is psum'd there in the compute dtype, then rounded once. So d hidden,
    a sum over the whole vocabulary, is psum'd over `vocab_axis`, and d weight (held in the
    compute dtype then) over a batch axis.
    """
    hidden, weight, bias, labels, terms = residuals
    ctype = compute_dtype(hidden.dtype)
    kept_t = jnp.ones(labels.shape, bool)
    scale = cotangent.astype(ctype)[:, None]

    def grad_of(z, local_t):
        return chunk_grad(z, local_t, None, kept_t, terms, opts) * scale

    inputs = (hidden, weight, bias, labels)
    return head_backward(inputs, chunk, grad_of, ctype, (cotangent, *terms), vocab_axis)


def head_backward(inputs, chunk, grad_of, ctype, row_arrays, vocab_axis=None):
    """(d hidden, d weight, d bias, d labels) from `grad_of(z_raw, local_t)`, the cotangent
    times dL/dz_raw of one chunk's raw logits (N, C) in `ctype`: the chunks recomputed in
    `ctype` (`head_dot`), g rounded once to the inputs' dtype, the two products accumulated
    in `ctype`. `row_arrays`: the per-row arrays `grad_of` reads (for shard_map's axes)."""
    hidden, weight, bias, labels = inputs
    full, rest = vocab_chunks(weight.shape[1], chunk)
    # The mesh axes the per-chunk gradients vary over (empty outside shard_map).
    axes = frozenset().union(
        *(_varying(x) for x in (hidden, weight, labels, *row_arrays)),
        *(() if bias is None else (_varying(bias),)),
        () if vocab_axis is None else (vocab_axis,),
    )
    w_sum = tuple(sorted(axes - _varying(weight)))  # d weight summed over these
    w_dtype = ctype if w_sum else weight.dtype
    # d weight's left operand, hidden^T, transposed once into an array of its own (the barrier
    # keeps XLA from folding the transpose into each chunk's dot): that layout ran the
    # backward's bf16 dots 0.62x the time of the folded transpose on this project's AMD EPYC
    # (N 4,096, D 512, V 32k, C 4,096; float32 0.92x, within the noise), for one (D, N) copy.
    hidden_t = jax.lax.optimization_barrier(hidden.T)

    def one(w_chunk, start, size):
        z = _logits(hidden, w_chunk, _bias_chunk(bias, start, size), ctype)
        # g rounds once to the inputs' dtype, as the materialized loss's gradient does;
        # the products and the bias's column sums accumulate in the compute dtype.
        g = grad_of(z, labels - start).astype(hidden.dtype)
        db = None if bias is None else jnp.sum(g.astype(ctype), axis=0)
        return head_dot(g, w_chunk.T, ctype), head_dot(hidden_t, g, ctype).astype(w_dtype), db

    def write(d_weight, d_bias, dw, db, start):
        # The weight gradient is written chunk by chunk in place: stacking the chunks
        # and transposing would cost a second (D, V) array.
        d_weight = jax.lax.dynamic_update_slice_in_dim(d_weight, dw, start, 1)
        if bias is not None:
            d_bias = jax.lax.dynamic_update_slice_in_dim(d_bias, db, start, 0)
        return d_weight, d_bias

    def step(carry, i):
        d_hidden, d_weight, d_bias = carry
        start = i * chunk
        w_chunk = jax.lax.dynamic_slice_in_dim(weight, start, chunk, axis=1)
        dh, dw, db = one(w_chunk, start, chunk)
        return (d_hidden + dh, *write(d_weight, d_bias, dw, db, start)), None

    def vary(x):
        # Under shard_map the scan's carries vary over every axis the chunks' gradients
        # vary over, so their zeros start so.
        missing = None if x is None else tuple(sorted(axes - _varying(x)))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    def summed(grad, primal):
        over = tuple(sorted(_varying(grad) - _varying(primal)))
        return jax.lax.psum(grad, over) if over else grad

    d_bias = None if bias is None else jnp.zeros(bias.shape, ctype)
    carry = (jnp.zeros(hidden.shape, ctype), jnp.zeros(weight.shape, w_dtype), d_bias)
    carry = tuple(vary(c) for c in carry)
    if full:
        carry = jax.lax.scan(step, carry, jnp.arange(full, dtype=labels.dtype))[0]
    d_hidden, d_weight, d_bias = carry
    if rest:
        dh, dw, db = one(weight[:, full * chunk :], full * chunk, rest)
        d_hidden = d_hidden + dh
        d_weight, d_bias = write(d_weight, d_bias, dw, db, full * chunk)
    d_hidden = summed(d_hidden, hidden).astype(hidden.dtype)
    d_weight = summed(d_weight, weight).astype(weight.dtype)
    if bias is not None:
        d_bias = summed(d_bias, bias).astype(bias.dtype)
    zero_labels = np.zeros(labels.shape, jax.dtypes.float0)
    return d_hidden, d_weight, d_bias, zero_labels


_linear.defvjp(_linear_fwd, _linear_bwd)


# The fused path (issue 47): `sum` and `mean` without the per-token outputs. The loss is then
# a scalar, so its cotangent is one number c: the forward pass computes the gradients of the
# reduced loss with c = 1 in the same pass as the loss (each row's logits once), keeps them as
# residuals, and the backward multiplies them by c. Three matmuls (the logits, d hidden, d
# weight) against the recompute path's four. The rows go in blocks of R (`block_rows`), each
# block's (R, V) logits alive at a time, since a row's gradient needs the whole row's
# log-sum-exp (its statistics taken a chunk of C columns at a time, as the recompute path's);
# d weight is a (D, V) accumulator in the compute dtype, each block adding its hidden^T g
# chunk by chunk (`_add_weight_grad`). `jax.custom_vjp` runs this forward only under
# reverse-mode AD: the plain call is `_forward`, no gradient computed. A cotangent c other
# than 1 multiplies d hidden and d weight after their sums (one more rounding in the compute
# dtype, where the recompute path multiplies g before them).


def fused_dtype(dtype) -> bool:
    """Whether `sum` / `mean` of `dtype` inputs take the fused path: float32 and float64,
    whose compute dtype is their own, and bfloat16 where the backend runs its dots native
    (`operand_dtype`, a probe per process: a function of the machine). float16 keeps the
    recompute path: fused, XLA CPU held float32 copies for its dots, 1,289 MiB of temporary
    memory at N 4,096, D 512, V 128k on this project's AMD EPYC (bfloat16: 657 MiB, 0.122x
    optax's); so would a bfloat16 converted to float32 for every dot."""
    dtype = np.dtype(dtype)
    if dtype == np.dtype(compute_dtype(dtype)):
        return True
    return dtype == np.dtype(jnp.bfloat16) and operand_dtype(dtype) == dtype


MIN_BLOCK_ROWS = 512
"""The fused path's least rows per block (or D if smaller): the (D, V) accumulator is read
and written once per block, so few rows per block pay that traffic many times. At N 4,096,
D 512, V 128k, float32, on this project's AMD EPYC, with d weight added as one (D, V)
product per block (before `_add_weight_grad`), time over optax's: loaded, medians of 5
interleaved runs, 512 rows 0.91x, 256 rows 1.00x, the recompute path 1.06x; idle, medians
of 3: 512 rows 1.06x, 256 rows 1.17x, recompute 1.07x. 128 rows was slower than
recomputing in two loaded paired runs (1.43x / 1.34x against 1.28x / 1.08x).
docs/benchmarks.md."""


def block_rows(num_rows: int, num_classes: int, chunk: int, depth: int) -> int:
    """Rows per block of the fused path: R V <= N chunk_size (a block's logits no larger
    than a chunk's of the recompute path), but at least min(MIN_BLOCK_ROWS, D) rows, whose
    logits are then no larger than the (D, V) accumulator; at most N."""
    rows = (num_rows * chunk) // max(num_classes, 1)
    return max(1, min(num_rows, max(rows, min(MIN_BLOCK_ROWS, depth))))


def _count(keep, size: int, ctype, batch_axis):
    """The kept positions (every device's rows with `batch_axis`), in the compute dtype."""
    count = jnp.asarray(size, ctype) if keep is None else jnp.sum(keep).astype(ctype)
    return count if batch_axis is None else jax.lax.psum(count, batch_axis)


def _masked(loss, keep, valid):
    """Per-row values as `linear_cross_entropy` returns them: NaN for an invalid label (a
    product, not a select: the NaN reaches the cotangent too, so the gradients are NaN, as
    the materialized loss's are), 0 at a position `keep` leaves out."""
    ctype = loss.dtype
    loss = loss * jnp.where(valid, jnp.ones((), ctype), jnp.asarray(jnp.nan, ctype))
    return loss if keep is None else jnp.where(keep, loss, jnp.zeros((), ctype))


def _reduce(loss, keep, reduction: str, batch_axis):
    """`sum` or `mean` of `_masked` per-row losses in their dtype (every device's rows with
    `batch_axis`)."""
    total = jnp.sum(loss)
    if batch_axis is not None:
        total = jax.lax.psum(total, batch_axis)
    if reduction == "sum":
        return total
    return total / jnp.maximum(_count(keep, loss.size, loss.dtype, batch_axis), 1)


def _row_cotangents(labels, keep, valid, reduction: str, ctype, batch_axis):
    """Each row's cotangent of the reduced loss for a cotangent 1 of it: the recompute
    path's per-row cotangent (`_masked`, 1 / count for `mean`), so that the fused gradient
    is the same math."""
    one = jnp.ones(labels.shape, ctype)
    if reduction == "mean":
        one = one / jnp.maximum(_count(keep, labels.size, ctype, batch_axis), 1)
    return _masked(one, keep, valid)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8, 9))
def _linear_reduced(hidden, weight, bias, labels, keep, valid, opts, chunk, reduction, batch_axis):
    """The `sum` or `mean` loss (compute dtype, a scalar) of rows hidden_NxD @ weight (with
    `batch_axis`, of every device's rows)."""
    loss = _forward(hidden, weight, bias, labels, opts, chunk)[0]
    return _reduce(_masked(loss, keep, valid), keep, reduction, batch_axis)


SLICE_BYTES = 1 << 20
"""The fused path's statistics take a block's logits a slice of rows x C columns at a
time, at most this many bytes (`_row_sliced`): 64 rows of float32 at C = 4,096."""


def _row_sliced(one, z, labels, chunk):
    """`one(z_slice, labels_slice, start, size)` over a block's (R, V) logits, a slice of
    r rows (r C entries at most `SLICE_BYTES`) and C = `chunk` columns at a time, stacked
    as `_stacked` stacks its chunks: (chunks, R) per statistic. XLA CPU hands each row
    reduction to a library call that fuses no exp and no select, so each slice's e^(z - m),
    its masked copy and its gaps are written out before they are summed; slices of the
    whole block's R rows (8 MiB each at R 512, C 4,096) went through memory, slices of 64
    rows stay in cache. N 4,096, D 512, this project's AMD EPYC, medians of 3-5 in one
    process, the per-token outputs' time over the plain loss's: bfloat16 V 32k 1.12x ->
    1.07x, V 128k 1.11x -> 1.08x, float32 V 32k 1.11x -> 1.06x; the plain loss itself
    0.98-1.01x (docs/studies/cross-entropy-speed.md)."""
    rows = max(1, SLICE_BYTES // (z.dtype.itemsize * chunk))
    n = z.shape[0] // rows
    if n < 2:
        return _stacked(
            lambda z_c, start, size: one(z_c, labels, start, size), z, chunk, labels.dtype
        )

    def sliced(z_r, t_r):
        return _stacked(
            lambda z_c, start, size: one(z_c, t_r, start, size), z_r, chunk, labels.dtype
        )

    split = lambda x: x[: n * rows].reshape(n, rows, *x.shape[1:])  # noqa: E731
    out = jax.lax.scan(lambda _, x: (None, sliced(*x)), None, (split(z), split(labels)))[1]
    parts = [jax.tree.map(lambda v: jnp.moveaxis(v, 0, 1).reshape(v.shape[1], -1), out)]
    if z.shape[0] > n * rows:
        parts.append(sliced(z[n * rows :], labels[n * rows :]))
    return jax.tree.map(lambda *v: jnp.concatenate(v, axis=1), *parts)


def _row_stats(z, labels, opts, chunk):
    """`_stats` of one block's whole (R, V) logits: the same chunks of `chunk` columns,
    their statistics combined, so the loss is the recompute path's math. A slice of the
    block at a time (`_stacked`'s scan, not a vmap over a reshape): XLA CPU hands the exp's
    row sums to a library reduction that cannot fuse its producer, so a vmapped form
    materialized e^(z - m) for the whole block, a second (R, V) array."""

    def one(z_c, t_r, start, size):
        return chunk_stats(z_c, t_r - start, None, opts)

    return combine(_row_sliced(one, capped(z, opts), labels, chunk))


def _add_weight_grad(d_weight, h_b, g, chunk):
    """d_weight + h_b^T g, added chunk by chunk of `chunk` columns in place. Added as one
    (D, V) product, the sum read and wrote the whole accumulator once more per block, from
    memory: N 4,096, D 512, float32, this project's AMD EPYC, idle, medians of 5 / 3 runs,
    time over optax's 1.01x -> 0.89x at V 32k and 1.01x -> 0.93x at 128k (the chunked sum)."""
    full, rest = vocab_chunks(g.shape[1], chunk)
    # The left operand transposed once into an array of its own (`head_backward`'s reason;
    # the transpose folded into each chunk's dot ran 0.91x optax's against 0.87x here).
    h_t = jax.lax.optimization_barrier(h_b.T)

    def add(d_weight, start, size):
        cols = jax.lax.dynamic_slice_in_dim(d_weight, start, size, axis=1)
        dw = head_dot(h_t, jax.lax.dynamic_slice_in_dim(g, start, size, axis=1))
        return jax.lax.dynamic_update_slice_in_dim(d_weight, cols + dw, start, 1)

    if full:
        step = lambda acc, i: (add(acc, i * chunk, chunk), None)  # noqa: E731
        d_weight = jax.lax.scan(step, d_weight, jnp.arange(full))[0]
    if rest:
        d_weight = add(d_weight, full * chunk, rest)
    return d_weight


def _fused_blocks(hidden, weight, bias, labels, cot, chunk, block, vary=lambda x: x):
    """The fused path's loop over blocks of rows (`block_rows`): `block(z, t_b, c_b)` takes
    a block's logits z (R, V) in the compute dtype, its labels and its rows' cotangents and
    returns (per-row outputs, g = the cotangents times dL/dz); g rounds once to the inputs'
    dtype, as the recompute path's does, and gives the block's d hidden (g W^T), d bias and
    its d weight added chunk by chunk to the (D, V) accumulator. Returns (the outputs of
    every row, (d hidden, d weight, d bias)), the gradients in the compute dtype. `vary`:
    the accumulators' zeros made to vary over shard_map's axes (`_linear_reduced_fwd`)."""
    ctype = compute_dtype(hidden.dtype)
    n, d = hidden.shape
    rows = block_rows(n, weight.shape[1], chunk, d)
    full, rest = divmod(n, rows)
    # 16-bit: d hidden's right operand W^T laid out once, in the inputs' dtype. Folded into
    # each block's dot, XLA CPU held a float32 copy of the whole weight for it: N 4,096,
    # D 512, V 128k, bf16, this project's AMD EPYC, idle, medians of 3, 786 -> 657 MiB of
    # temporary memory and 0.62x -> 0.49x optax's time (docs/studies/cross-entropy-speed.md).
    # (float32 and float64 fold it: a copy passed into the loop would be a second weight.)
    low = np.dtype(hidden.dtype) != np.dtype(ctype)
    w_t = jax.lax.optimization_barrier(weight.T) if low else None

    def step(carry, x):
        d_weight, d_bias = carry
        h_b, t_b, c_b = x
        out, g = block(_logits(h_b, weight, bias), t_b, c_b)
        g = g.astype(hidden.dtype)
        if bias is not None:
            d_bias = d_bias + jnp.sum(g.astype(ctype), axis=0)
        d_weight = _add_weight_grad(d_weight, h_b, g, chunk)
        return (d_weight, d_bias), (out, head_dot(g, w_t if low else weight.T))

    d_bias = None if bias is None else vary(jnp.zeros(bias.shape, ctype))
    carry = (vary(jnp.zeros(weight.shape, ctype)), d_bias)
    parts = []
    if full:
        split = lambda x: x[: full * rows].reshape(full, rows, *x.shape[1:])  # noqa: E731
        carry, stacked = jax.lax.scan(step, carry, (split(hidden), split(labels), split(cot)))
        parts.append(jax.tree.map(lambda v: v.reshape(-1, *v.shape[2:]), stacked))
    if rest:
        tail = (hidden[full * rows :], labels[full * rows :], cot[full * rows :])
        carry, last = step(carry, tail)
        parts.append(last)
    join = lambda *v: v[0] if len(v) == 1 else jnp.concatenate(v)  # noqa: E731
    out, d_hidden = jax.tree.map(join, *parts)
    return out, (d_hidden, *carry)


def _linear_reduced_fwd(
    hidden, weight, bias, labels, keep, valid, opts, chunk, reduction, batch_axis
):
    ctype = compute_dtype(hidden.dtype)
    cot = _row_cotangents(labels, keep, valid, reduction, ctype, batch_axis)
    axes = frozenset().union(
        *(_varying(x) for x in (hidden, weight, labels, cot)),
        *(() if bias is None else (_varying(bias),)),
    )

    def vary(x):
        missing = None if x is None else tuple(sorted(axes - _varying(x)))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    def block(z, t_b, c_b):
        kept_t = jnp.ones(t_b.shape, bool)
        loss, terms = finish(_row_stats(z, t_b, opts, chunk), kept_t, opts)
        return loss, chunk_grad(z, t_b, None, kept_t, terms, opts) * c_b[:, None]

    loss, grads = _fused_blocks(hidden, weight, bias, labels, cot, chunk, block, vary)
    out = _reduce(_masked(loss, keep, valid), keep, reduction, batch_axis)
    return out, (hidden, weight, bias, labels, keep, valid, *grads)


def _scaled(grads, primals, cotangent):
    """The fused path's gradients (d hidden, d weight, d bias; None for no bias) times the
    loss's cotangent, each summed over the shard_map axes it varies over and its primal does
    not, then rounded once to its primal's dtype."""
    c = cotangent.astype(grads[0].dtype)

    def one(grad, primal):
        grad = grad * c
        over = tuple(sorted(_varying(grad) - _varying(primal)))
        return (jax.lax.psum(grad, over) if over else grad).astype(primal.dtype)

    return tuple(None if g is None else one(g, p) for g, p in zip(grads, primals, strict=True))


def _no_grads(labels, keep, valid):
    """The zero (float0) cotangents of the fused rules' integer and boolean inputs."""
    zero = lambda x: None if x is None else np.zeros(x.shape, jax.dtypes.float0)  # noqa: E731
    return zero(labels), zero(keep), zero(valid)


def _linear_reduced_bwd(opts, chunk, reduction, batch_axis, residuals, cotangent):
    hidden, weight, bias, labels, keep, valid, *grads = residuals
    return (*_scaled(grads, (hidden, weight, bias), cotangent), *_no_grads(labels, keep, valid))


_linear_reduced.defvjp(_linear_reduced_fwd, _linear_reduced_bwd)


# The general path (`return_aux`, `temperature`, `accumulation_dtype`): the same chunked
# statistics plus the per-token outputs' (module docstring), one custom_vjp for all of them.


class AuxConfig(NamedTuple):
    """The general path's static settings."""

    chunk: int
    temperature: float  # T > 0: the logits are c tanh(z / c) / T
    ctype: str  # the accumulation dtype's name


class AuxStats(NamedTuple):
    """One chunk's statistics for the per-token outputs (rows,), in the accumulation dtype."""

    top: jax.Array  # the chunk's max (-inf for a chunk of only -inf, NaN with a NaN)
    arg: jax.Array  # the index (in the whole vocabulary, int32) of its first maximum
    s_rest: jax.Array  # sum of e^(z_j - top) over the chunk but that maximum
    gaps: jax.Array  # sum of (top - z_j) e^(z_j - top) over the chunk


def _final_logits(z_raw, opts: LossOptions, temperature: float):
    """c tanh(z / c) / T (the cap first, then the temperature) in z_raw's dtype."""
    z = capped(z_raw, opts)
    return z if temperature == 1.0 else z / jnp.asarray(temperature, z.dtype)


def _gaps(z, z_max, exact: bool):
    """max - z_j >= 0 per entry, an exact 0 at each maximum.

    Where z is the dot's output (`exact`) every consumer reads the same numbers and z_max -
    z_j is 0 at a maximum by itself. Where z is computed from it (the cap, the
    temperature), XLA recomputes that last multiply inside each consumer's fusion (an
    optimization barrier does not stop it: it sinks the multiply through) and contracts it
    with the subtraction there (a fused multiply-add), so z_max - z_j at the maximum came
    out as +-1 ulp of it (measured: -5.96e-8 at a capped logit of 2.98): a negative gap,
    which the first-max index and the entropy's sums must never see, and a gap of an ulp
    where the entropy of a peaked row is far smaller. So the maxima are found by a
    comparison, which no contraction changes: rounding to nearest is monotone, so every
    other gap is then >= 0."""
    gap = z_max - z
    if exact:
        return gap
    return jnp.where(z >= z_max, jnp.zeros((), z.dtype), gap)


def _first_max(z, gap) -> jax.Array:
    """The index of each row's first maximum (int32), as jnp.argmax: the min of the float
    column indices plus C at every entry below the max (`off_max` of its gap: 0 at a
    maximum, 1 a smallest normal number below it and further), a min XLA's CPU reductions
    fuse (jnp.argmax measured several times slower there). Exact for C up to 2^p columns
    (p the significand bits); beyond, jnp.argmax. A row holding NaN gives some index in
    range; entries within a subnormal of the max tie with it (XLA flushes subnormals)."""
    c = z.shape[-1]
    if c > 2 ** (jnp.finfo(z.dtype).nmant + 1) // 2:
        return jnp.argmax(z, axis=-1).astype(jnp.int32)
    iota = jax.lax.broadcasted_iota(z.dtype, z.shape, z.ndim - 1)
    key = iota + jnp.asarray(c, z.dtype) * off_max(gap)
    return jnp.clip(jnp.min(key, axis=-1), 0, c - 1).astype(jnp.int32)


def _aux_chunk(z, start, exact: bool) -> AuxStats:
    """One chunk's AuxStats; `exact`: z is the dot's output itself (`_gaps`)."""
    # chunk_stats' max and shift (finite_row_max): the same operations, shared under jit.
    top = jnp.max(z, axis=-1, keepdims=True)
    z_max = jnp.where(jnp.isfinite(top), top, jnp.zeros((), z.dtype))
    top = top[:, 0]
    gap = _gaps(z, z_max, exact)
    arg = _first_max(z, gap)
    # exact: chunk_stats' exps, shared under jit; else from the gaps, an exact 1 at the max.
    e = jnp.exp(z - z_max) if exact else jnp.exp(-gap)
    if z.shape[-1] <= 2 ** (jnp.finfo(z.dtype).nmant + 1) // 2:
        # Arithmetic weights (0 at the first max, 1 elsewhere), which XLA's CPU reductions
        # fuse into the sum, where an index comparison costs a pass of its own.
        iota = jax.lax.broadcasted_iota(z.dtype, z.shape, z.ndim - 1)
        one = jnp.ones((), z.dtype)
        others = jnp.minimum(one, jnp.abs(iota - arg[:, None].astype(z.dtype)))
    else:
        iota = jax.lax.broadcasted_iota(jnp.int32, z.shape, z.ndim - 1)
        others = (iota != arg[:, None]).astype(z.dtype)
    s_rest = jnp.sum(e * others, axis=-1)
    # (top - z_j) e^(z_j - top) >= 0; the gap capped at the largest finite number, so a
    # -inf entry (e = 0, gap inf) adds 0, never inf * 0.
    gap = jnp.minimum(gap, jnp.asarray(jnp.finfo(z.dtype).max, z.dtype))
    gaps = jnp.sum(gap * e, axis=-1)
    return AuxStats(top, arg + start, s_rest, gaps)


class EntropyTerms(NamedTuple):
    """What the entropy's gradient needs per row (rows,)."""

    top: jax.Array  # M, the row max (0 for a row of only -inf)
    hi: jax.Array  # fl(1 + S_others), S_others over every entry but one maximum
    mean_gap: jax.Array  # A = T / hi


def _aux_combine(aux: AuxStats):
    """(H, argmax, EntropyTerms) per row from the chunks' AuxStats (stacked on axis 0).

    With M = max_c top_c and c* the first chunk holding it, each chunk's sums rescale once
    by e^(top_c - M) (an exact 1 for c*): S_others = sum_c e^(top_c - M) (s_rest_c + [c !=
    c*]), every chunk's own maximum counted but c*'s, and T = sum_c e^(top_c - M) (gaps_c +
    (M - top_c)(1 + s_rest_c)), all terms >= 0."""
    dtype = aux.s_rest.dtype
    zero = jnp.zeros((), dtype)
    top = jnp.max(aux.top, axis=0)
    star = jnp.argmax(aux.top, axis=0)  # the first chunk with the max (a NaN: the first NaN)
    kept = aux.top > -jnp.inf
    shift = jnp.where(kept, aux.top, zero)
    row = jnp.where(top > -jnp.inf, top, zero)
    scale = jnp.where(kept, jnp.exp(shift - row[None, :]), zero)
    is_star = jnp.arange(aux.top.shape[0])[:, None] == star[None, :]
    own = jnp.where(kept & ~is_star, jnp.ones((), dtype), zero)
    s_others = jnp.sum(scale * (aux.s_rest + own), axis=0)
    full = jnp.where(kept, 1 + aux.s_rest, zero)
    # e^(top_c - M) (M - top_c) first, 0 where the scale is: (M - top_c) (1 + s_rest_c)
    # alone overflows for logits near the dtype's largest (4e37 x 8 columns is inf in
    # float32), and 0 x inf is NaN.
    shifted = jnp.where(scale > 0, scale * (row[None, :] - shift), zero)
    big_t = jnp.sum(scale * aux.gaps + shifted * full, axis=0)
    hi, lo = one_plus(s_others)
    mean_gap = big_t / hi
    h = jnp.log(hi) + lo / hi + mean_gap
    argmax = jnp.take_along_axis(aux.arg, star[None, :], axis=0)[0]
    return h, argmax, EntropyTerms(row, hi, mean_gap)


def _aux_stats(z_raw, labels, start, opts, cfg: AuxConfig):
    """One chunk's (ChunkStats, AuxStats) of raw logits z_raw (rows, C) whose first column
    is the vocabulary's `start`: the loss's statistics with the cap applied here
    (`_final_logits`, then the temperature), the per-token outputs' beside them."""
    z = _final_logits(z_raw, opts, cfg.temperature)
    aux = _aux_chunk(z, start, z is z_raw)
    return chunk_stats(z, labels - start, None, opts._replace(soft_cap=None)), aux


def _aux_finish(stats: ChunkStats, aux: AuxStats, opts):
    """(loss, log_prob, entropy, lse, argmax) per row and the gradient's (RowTerms,
    EntropyTerms) from the chunks' statistics (stacked on axis 0)."""
    uncapped = opts._replace(soft_cap=None)  # the cap is applied in `_final_logits`
    stats = combine(stats)
    kept_t = jnp.ones(stats.z_max.shape, bool)
    loss, terms = finish(stats, kept_t, uncapped)
    ce = finish(stats, kept_t, LossOptions())[0]  # the plain margin-form CE: -log p_y
    h, argmax, h_terms = _aux_combine(aux)
    return (loss, -ce, h, terms.lse, argmax), (terms, h_terms)


def _aux_forward(hidden, weight, bias, labels, opts, cfg: AuxConfig):
    ctype = np.dtype(cfg.ctype)

    def one(w_chunk, start, size):
        z_raw = _logits(hidden, w_chunk, _bias_chunk(bias, start, size), ctype)
        return _aux_stats(z_raw, labels, start, opts, cfg)

    return _aux_finish(*_stacked(one, weight, cfg.chunk, labels.dtype), opts)


def _aux_grad(z_raw, local_t, terms, h_terms, opts, cfg: AuxConfig, cots):
    """d/dz_raw of sum_rows (c_loss loss + c_lp log_prob + c_h entropy + c_lse lse) on one
    chunk (rows, C) of raw logits in the accumulation dtype; `cots` = (c_loss, c_lp, c_h,
    c_lse) per row, each None where its output has no cotangent (its term is left out)."""
    ctype = np.dtype(cfg.ctype)
    c_loss, c_lp, c_h, c_lse = (None if c is None else c.astype(ctype)[:, None] for c in cots)
    kept_t = jnp.ones(local_t.shape, bool)
    uncapped = opts._replace(soft_cap=None)
    col = lambda v: v[:, None]  # noqa: E731
    z = _final_logits(z_raw, opts, cfg.temperature)
    # One exp per entry, e = e^(z - M), shared by every term: q = e / S; the plain CE's
    # gradient (-d log p_y / dz) is q with the target entry -S_others / S (never q_t - 1);
    # d lse / dz = q; dH / dz = p (g - A) with p = e_H / hi, e_H = e^(z - M_H) = e e^(M -
    # M_H), the factor an exact 1 where the two maxima agree (they differ only where a
    # chunk is all -inf and the row max is below 0).
    e = jnp.exp(z - col(terms.z_max))
    q = e * col(terms.inv_s)  # chunk_grad's q, the same expression: shared under jit
    iota = jax.lax.broadcasted_iota(local_t.dtype, z.shape, z.ndim - 1)
    is_t = iota == col(local_t)
    plain = jnp.where(is_t, col(-terms.s_others * terms.inv_s), q)
    g = []
    if uncapped.plain and c_loss is not None:
        g.append(plain * (c_loss if c_lp is None else c_loss - c_lp))
    else:
        if c_loss is not None:  # the loss's own gradient with its options
            g.append(chunk_grad(z, local_t, None, kept_t, terms, uncapped) * c_loss)
        if c_lp is not None:
            g.append(-plain * c_lp)
    if c_h is not None:
        zero = jnp.zeros((), ctype)
        gap = _gaps(z, col(h_terms.top), z is z_raw)
        if z is z_raw:
            e_h = e * col(jnp.exp(terms.z_max - h_terms.top))
        else:  # an exact 1 at the max (`_gaps`)
            e_h = jnp.exp(-gap)
        gap = jnp.minimum(gap, jnp.asarray(jnp.finfo(ctype).max, ctype))
        dh = jnp.where(e_h > 0, e_h / col(h_terms.hi) * (gap - col(h_terms.mean_gap)), zero)
        g.append(dh * c_h)
    if c_lse is not None:
        g.append(q * c_lse)
    g = functools.reduce(jnp.add, g) if g else jnp.zeros(z.shape, ctype)
    slope = cap_slope(z_raw, opts)
    if slope is not None:
        g = g * slope
    if cfg.temperature != 1.0:
        g = g * (1 / jnp.asarray(cfg.temperature, ctype))
    return g


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _linear_aux(hidden, weight, bias, labels, opts, cfg):
    """(loss, log_prob, entropy, lse, argmax) per row, in the accumulation dtype (argmax
    int32): the loss, log_prob, entropy and lse differentiable."""
    return _aux_forward(hidden, weight, bias, labels, opts, cfg)[0]


def _linear_aux_fwd(hidden, weight, bias, labels, opts, cfg):
    out, (terms, h_terms) = _aux_forward(hidden, weight, bias, labels, opts, cfg)
    return out, (hidden, weight, bias, labels, terms, h_terms)


def _linear_aux_bwd(opts, cfg, residuals, cotangents):
    hidden, weight, bias, labels, terms, h_terms = residuals

    def grad_of(z_raw, local_t):
        return _aux_grad(z_raw, local_t, terms, h_terms, opts, cfg, cotangents[:4])

    inputs = (hidden, weight, bias, labels)
    ctype = np.dtype(cfg.ctype)
    return head_backward(inputs, cfg.chunk, grad_of, ctype, (*cotangents[:4], *terms, *h_terms))


_linear_aux.defvjp(_linear_aux_fwd, _linear_aux_bwd)


# The fused path with the per-token outputs (`sum` / `mean` with `return_aux`): the fused
# path's blocks of rows, each block's statistics taken with the outputs' (`_aux_stats`),
# the reduced loss's gradients computed in the forward pass as `_linear_reduced_fwd` does.
# The outputs' gradients cannot be: their cotangents are per row and known only in the
# backward pass. So the custom_vjp takes symbolic zeros: where log_prob, entropy and lse get
# no cotangent (a trainer that logs them, or reads the argmax), the backward only scales the
# forward's gradients, three matmuls in all; where one of them does (a policy-gradient loss
# through log_prob), the backward recomputes each chunk for every output's cotangent, the
# loss's included (`_linear_aux_bwd`'s path, four matmuls), and XLA drops the forward's now
# unread gradient work (its compiled program holds 4 dots: tests/numerics/test_linear_aux.py).


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def _linear_aux_reduced(hidden, weight, bias, labels, keep, valid, opts, cfg, reduction):
    """(reduced loss, log_prob, entropy, lse, argmax): the loss a scalar, the rest per row,
    in the compute dtype (argmax int32)."""
    (loss, *aux), _ = _aux_forward(hidden, weight, bias, labels, opts, cfg)
    return (_reduce(_masked(loss, keep, valid), keep, reduction, None), *aux)


def _linear_aux_reduced_fwd(hidden, weight, bias, labels, keep, valid, opts, cfg, reduction):
    hidden, weight, bias, labels, keep, valid = (
        None if x is None else x.value for x in (hidden, weight, bias, labels, keep, valid)
    )
    cot = _row_cotangents(labels, keep, valid, reduction, np.dtype(cfg.ctype), None)

    def slice_stats(z_c, t_r, start, size):
        return _aux_stats(z_c, t_r, start, opts, cfg)

    def block(z_raw, t_b, c_b):
        out, row_terms = _aux_finish(*_row_sliced(slice_stats, z_raw, t_b, cfg.chunk), opts)
        g = _aux_grad(z_raw, t_b, *row_terms, opts, cfg, (c_b, None, None, None))
        return (out, row_terms), g

    ((loss, *aux), row_terms), fused = _fused_blocks(
        hidden, weight, bias, labels, cot, cfg.chunk, block
    )
    total = _reduce(_masked(loss, keep, valid), keep, reduction, None)
    residuals = (hidden, weight, bias, labels, keep, valid, row_terms, cot, fused)
    return (total, *aux), residuals


def _linear_aux_reduced_bwd(opts, cfg, reduction, residuals, cotangents):
    hidden, weight, bias, labels, keep, valid, (terms, h_terms), cot, fused = residuals
    c_total, c_lp, c_h, c_lse, _ = (
        None if isinstance(c, jax.custom_derivatives.SymbolicZero) else c for c in cotangents
    )
    no_grads = _no_grads(labels, keep, valid)
    if c_lp is None and c_h is None and c_lse is None:
        if c_total is None:
            return (None, None, None, *no_grads)
        return (*_scaled(fused, (hidden, weight, bias), c_total), *no_grads)
    c_loss = None if c_total is None else cot * c_total.astype(cot.dtype)

    def grad_of(z_raw, local_t):
        return _aux_grad(z_raw, local_t, terms, h_terms, opts, cfg, (c_loss, c_lp, c_h, c_lse))

    inputs = (hidden, weight, bias, labels)
    grads = head_backward(inputs, cfg.chunk, grad_of, np.dtype(cfg.ctype), ())[:3]
    return (*grads, *no_grads)


_linear_aux_reduced.defvjp(_linear_aux_reduced_fwd, _linear_aux_reduced_bwd, symbolic_zeros=True)


# The vocabulary over devices (`vocab_axis`): the same statistics per shard, combined across
# the devices (`numerics._vocab_parallel.across`); the backward is `backward` above.


def _sharded_fwd(hidden, weight, bias, labels, opts, chunk, vocab_axis):
    local = labels - _vocab_parallel.offset(vocab_axis, weight.shape[1])
    stats = _vocab_parallel.across(_stats(hidden, weight, bias, local, opts, chunk), vocab_axis)
    loss, terms = finish(stats, jnp.ones(labels.shape, bool), opts)
    return loss, (hidden, weight, bias, local, terms)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _sharded(hidden, weight, bias, labels, opts, chunk, vocab_axis):
    """Per-row losses (compute dtype) of hidden_NxD @ the weight shard, labels global."""
    return _sharded_fwd(hidden, weight, bias, labels, opts, chunk, vocab_axis)[0]


def _sharded_bwd(opts, chunk, vocab_axis, residuals, cotangent):
    return backward(opts, chunk, residuals, cotangent, vocab_axis)


_sharded.defvjp(_sharded_fwd, _sharded_bwd)


def _check_bias(bias, dtype, num_classes: int):
    """The bias as an array of shape (V,) and the hidden's dtype, or None."""
    if bias is None:
        return None
    bias = _validate.float_array(bias, "bias")
    if bias.dtype != dtype:
        raise TypeError(
            f"bias ({bias.dtype}) must have the dtype of hidden and weight ({dtype}): the lab "
            "never promotes precision silently."
        )
    if bias.shape != (num_classes,):
        raise ValueError(f"bias must have shape (V,) = ({num_classes},); got {bias.shape}.")
    return bias


def check_head(hidden, weight, names: tuple[str, str], chunk_size):
    """hidden (..., D) and a head (D, V) as float arrays of one dtype, and a positive int
    `chunk_size`, else one clear TypeError / ValueError naming the arguments as `names`."""
    hidden = _validate.float_array(hidden, names[0])
    weight = _validate.float_array(weight, names[1])
    if hidden.dtype != weight.dtype:
        raise TypeError(
            f"{names[0]} ({hidden.dtype}) and {names[1]} ({weight.dtype}) must have the same "
            "dtype: the lab never promotes precision silently."
        )
    if hidden.ndim < 1 or weight.ndim != 2:
        raise ValueError(
            f"{names[0]} must be (..., D) and {names[1]} (D, V); got shapes {hidden.shape} and "
            f"{weight.shape}."
        )
    if hidden.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"{names[0]} (..., D={hidden.shape[-1]}) and {names[1]} (D={weight.shape[0]}, V) "
            "disagree on D; a (V, D) embedding (tied weights) is passed as embedding.T."
        )
    if not isinstance(chunk_size, int | np.integer) or isinstance(chunk_size, bool):
        raise TypeError(f"chunk_size must be an int; got {chunk_size!r}.")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0; got {chunk_size}.")
    return hidden, weight


def _validate_linear(
    hidden, weight, labels, where, ignore_index, chunk_size, reduction, num_classes=None
):
    """Entry checks; returns (hidden_NxD, weight, labels_N, kept_N or None, chunk).

    `num_classes`: the whole vocabulary when `weight` is one device's shard of it."""
    hidden, weight = check_head(hidden, weight, ("hidden", "weight"), chunk_size)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}.")
    labels = _validate.int_array(labels, "labels")
    if labels.shape != hidden.shape[:-1]:
        raise ValueError(
            f"labels of shape {labels.shape} do not match hidden of shape {hidden.shape}: "
            f"expected {hidden.shape[:-1]}."
        )
    kept = None
    if where is not None:
        kept = jnp.asarray(where)
        if kept.dtype != jnp.bool_ or kept.shape != labels.shape:
            raise ValueError(
                f"where must be a boolean mask of the labels' shape {labels.shape}; got "
                f"{kept.dtype} of shape {kept.shape}."
            )
    if ignore_index is not None:
        ignored = labels != ignore_index
        kept = ignored if kept is None else kept & ignored
    num_classes = weight.shape[1] if num_classes is None else num_classes
    # Concrete labels are checked on the host, the positions left out by `ignore_index` and
    # by a concrete `where` skipped (under jit the comparison above is traced even for
    # concrete labels); with a traced `where` no position is known to be kept, so none is
    # checked (an invalid label under jit gives NaN, below).
    if (
        not isinstance(labels, jax.core.Tracer)
        and labels.size
        and not (where is not None and isinstance(where, jax.core.Tracer))
    ):
        host = np.asarray(labels)
        keep_host = np.ones(host.shape, bool) if where is None else np.asarray(where)
        if ignore_index is not None:
            keep_host = keep_host & (host != ignore_index)
        host = host[keep_host]
        if host.size and (host.min() < 0 or host.max() >= num_classes):
            raise ValueError(
                f"labels must lie in [0, {num_classes}) (outside where / ignore_index); got "
                f"values in [{int(host.min())}, {int(host.max())}]."
            )
    return hidden, weight, labels.astype(jnp.int32), kept, min(int(chunk_size), weight.shape[1])


def linear_cross_entropy(
    hidden: ArrayLike,
    weight: ArrayLike,
    labels: ArrayLike,
    *,
    bias: ArrayLike | None = None,
    where: ArrayLike | None = None,
    ignore_index: int | None = None,
    reduction: str = "none",
    z_loss: float = 0.0,
    soft_cap: float | None = None,
    label_smoothing: float = 0.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_axis: str | None = None,
    batch_axis: str | None = None,
    return_aux: bool = False,
    temperature: float = 1.0,
    accumulation_dtype=None,
) -> jax.Array | tuple[jax.Array, dict[str, jax.Array]]:
    r"""Cross-entropy of the logits hidden @ weight, never holding the (..., V) logits.

    The language-model head and its loss in one: with z = hidden @ weight (+ bias) (hidden
    (..., D), weight (D, V), bias (V,)), the result is `cross_entropy(z, labels, z_loss=...,
    soft_cap=..., label_smoothing=...)`, computed over the vocabulary in chunks of
    `chunk_size` columns, so only (N, chunk_size) logits exist at a time. Per chunk c,
    the capped logits give m_c = max z, s_c = sum_{j != t} e^(z_j - m_c) (the target's
    term summed apart), the target logit if it falls in the chunk, and the gap sum for
    label smoothing; the chunks combine with M = max_c m_c as S_others = sum_c s_c
    e^(m_c - M), each term rescaled once, and the loss is formed in the margin form,
    log1p(S_others e^(M - z_t)), so the target never loses e^-m to a 1 added before it.

    The backward pass (`jax.custom_vjp`) recomputes each chunk's logits, forms the
    gradient g = dL/dz there (the fixed form: -S_others / S at the target, never
    q_t - 1), and accumulates dL/dhidden = g weight_c^T and writes dL/dweight_c =
    hidden^T g: memory O(N D + D V + N chunk_size), not O(N V). Reverse mode only
    (`jax.grad`, `jax.vjp`); `jax.jvp` raises. A linear tangent rule would need
    g times (hidden dweight) per position, and JAX's transpose of it would keep each
    chunk's residuals, an (N, V) array in all: the memory this function exists to save.

    `sum` and `mean` of float32, float64 or bfloat16 inputs (bfloat16 where its dots run
    native, `numerics.linear_operand_dtype`; without `vocab_axis` or an `accumulation_dtype`
    wider than the compute dtype) take the fused path instead: the loss is a
    scalar, so its cotangent is one number, and the reverse pass's forward computes the
    gradients of the reduced loss beside it, rows in blocks of R (N chunk_size / V, at
    least min(512, D); each block's (R, V) logits once, the same chunk statistics, g,
    g weight^T, and hidden^T g added to a (D, V) accumulator), the backward scaling them
    by the cotangent: three matmuls against four, the same error model (tests/numerics/
    test_linear_cross_entropy.py), memory O(N D + D V + N chunk_size). The plain call
    computes no gradient (custom_vjp runs that forward only under AD). `none` (a
    cotangent per row, also when a scalar is taken of its losses afterwards) and float16
    inputs keep the recompute path. With `return_aux` the outputs' statistics are taken in
    the same blocks; where `log_prob`, `entropy` or `lse` get a cotangent (a policy
    gradient through them) the backward recomputes each chunk for every output and the
    loss (four matmuls), the forward's unread gradients never computed; where none does
    (outputs logged), three.

    Precision: logits are accumulated in float32 for bf16, fp16 and fp32 inputs
    (`preferred_element_type`, matmul precision pinned to HIGHEST, so no TF32 or bf16
    passes) and in float64 for float64; the per-chunk and combined sums, the loss and g
    live in that compute dtype. g is rounded once to the inputs' dtype before the two
    backward products (as the materialized loss's gradient is), which accumulate in the
    compute dtype; dL/dhidden sums over the chunks in it and is rounded once. Per-row
    losses are rounded once to the inputs' dtype; `sum` and `mean` reduce in the compute
    dtype first. Against `cross_entropy` on the same logits: tests/numerics/
    test_linear_cross_entropy.py states and checks the bound (one more exp and product
    per term than the materialized sum, from the chunk rescaling).

    Example (D = 2, V = 3):
      >>> import jax, jax.numpy as jnp
      >>> from numerics import cross_entropy
      >>> h = jnp.array([[1.0, 2.0], [0.5, -1.0]])
      >>> w = jnp.array([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0]])
      >>> t = jnp.array([1, 0])
      >>> got = linear_cross_entropy(h, w, t, chunk_size=2)
      >>> want = cross_entropy(h @ w, t)
      >>> bool(jnp.allclose(got, want, rtol=1e-6))
      True
      >>> dh, dw = jax.grad(lambda h, w: linear_cross_entropy(h, w, t, reduction="mean"),
      ...                   (0, 1))(h, w)
      >>> dh.shape, dw.shape
      ((2, 2), (2, 3))

    Per-token outputs (`return_aux=True`; derivations in `numerics._linear`'s docstring):
    the result is `(loss, aux)`, `aux` a dict of arrays of the labels' shape, computed in
    the same chunk loop from running statistics (the logits are never materialized):

    - `log_prob`: log p_y of the label, -CE of the plain margin form (no smoothing, no
      z-loss), accurate near 0 where `log_softmax` rounds to 0; as `numerics.log_prob`.
    - `entropy`: H = -sum_j p_j log p_j as log1p(S_others) + T / (1 + S_others), two
      non-negative terms, accurate for peaked rows and under a large common offset; as
      `numerics.entropy`.
    - `lse`: logsumexp of the logits the loss sees.
    - `argmax` (int32): the first index of the row's max (jnp.argmax's ties), of the same
      logits; `argmax == labels` is the token accuracy.
    - `z_loss`: the z-loss term w lse^2 the loss contains (0 when `z_loss` is 0).

    In the inputs' dtype (rounded once from the accumulation dtype), but argmax. Gradients:
    `log_prob`, `entropy` and `lse` are differentiable with respect to hidden, weight and
    bias (reverse mode, the backward recomputes the chunks: d log p_y / dz = onehot - p,
    its target entry S_others / S; dH / dz_k = p_k (g_k - A), g_k = max z - z_k; d lse /
    dz = p), so a policy-gradient loss sum(adv * log_prob) with an entropy bonus trains
    through it in one backward pass; `z_loss` is w lse^2 of the differentiable lse;
    `argmax` has none. Positions masked out (`where`, `ignore_index`) give 0 in every
    float output (and gradient 0); argmax is computed there too. Not with `vocab_axis`.

    `temperature` T > 0: the logits become c tanh(z / c) / T, the soft cap (a property of
    the model's logits, Gemma 2's) first, then the temperature (the sampler's), so the cap
    bounds the logits before T scales them; everything (loss, options, aux) is of those
    logits, and the gradients carry sech^2(z / c) / T. T = 1 is no division at all.

    `accumulation_dtype`: the dtype the chunks' dots accumulate in and the running sums,
    the loss, the outputs and the gradient's chunks are computed in; None (the default)
    is float32 for bf16, fp16 and fp32 inputs and float64 for float64 (the path above,
    unchanged); float64 (x64 on) is allowed for any input. What it buys, per logit z =
    sum_d h_d w_d over D terms: a product of two bf16 (8 significant bits) or two fp16
    (11) values is exact in float32 and float64, of two float32 values exact in float64
    only; a sum of D terms in a dtype of unit roundoff u is within (D - 1) u sum_d |h_d w_d|
    (worst case, any order). So |dz| <= (D - 1) 2^-24 sum |h w| for bf16 / fp16 with
    float32, D 2^-24 sum |h w| for fp32 with float32 (the products round too), and
    (D - 1) 2^-53 sum |h w| with float64 for all three. The loss and log_prob move by at
    most 2 max_j |dz_j| (lse and z_y each by max |dz|), lse by max |dz|, the entropy by
    sum_k |dH / dz_k| max |dz| <= 2 H max |dz|; the running sums add (log2 C + 3) u
    relative in the accumulation dtype. In bf16 (half an ulp 2^-9 relative) float32
    accumulation is enough unless D sum |h w| 2^-24 nears 2^-9 of the output (D 4,096 and
    sum |h w| around 100 in the worst case); for fp32 inputs float64 removes the logits'
    rounding, which for a confident row is the loss's largest error (tests/numerics/
    test_linear_aux.py measures both). float32 for float64 inputs is refused (it would
    drop precision), as is any other dtype.

    Edge cases: positions masked out by `where` (or with `labels == ignore_index`) give
    loss 0 and gradient 0 and their labels are not checked; `mean` over no kept position
    is 0. Concrete labels outside [0, V) raise ValueError; traced ones give NaN (loss
    and gradient). NaN in hidden or weight gives NaN.

    Args:
      hidden: (..., D) floating-point activations (bf16, fp16, fp32 or fp64).
      weight: (D, V) of the same dtype.
      bias: optional (V,) of the same dtype, added to each chunk's logits in the compute
        dtype (as Liger-Kernel's fused loss takes one); its gradient sums g over the rows.
      labels: integer targets of shape hidden.shape[:-1].
      where: optional boolean mask of the labels' shape: False positions (padding) are
        left out, as optax's per-example `where`.
      ignore_index: optional label value that also marks a position as left out
        (torch's and Liger's -100).
      reduction: "none" (per-position losses, shape labels.shape), "sum", or "mean"
        over the kept positions.
      z_loss, soft_cap, label_smoothing: as in `cross_entropy`.
      chunk_size: vocabulary columns per chunk, > 0 (capped at V, or at this device's
        V / P with `vocab_axis`).
      vocab_axis: inside `jax.shard_map`, the mesh axis (P devices) the vocabulary is
        split over: `weight` (and `bias`) are then this device's contiguous shard, (D, V / P)
        and (V / P,), device i holding columns [i V / P, (i + 1) V / P), and labels index
        the whole vocabulary. The result is the unsharded call's (docs/lm-losses.md,
        "The vocabulary over devices"); `numerics.sharded_linear_cross_entropy` builds
        the `shard_map` from a mesh.
      batch_axis: with `vocab_axis`, the mesh axis the rows are split over (data
        parallel): "sum" and "mean" then reduce over every device's rows (psum), not
        only this device's.
      return_aux: True or False: also return the per-token outputs (above).
      temperature: T > 0, a Python number: the logits (after the cap) divided by T.
      accumulation_dtype: None, float32 or float64 (above). These three (return_aux,
        a temperature other than 1, any accumulation_dtype) are not taken with
        vocab_axis / batch_axis yet: ValueError.

    Returns:
      Losses in the dtype of `hidden`: labels.shape for "none", a scalar otherwise; with
      `return_aux`, (losses, aux), aux's arrays of shape labels.shape.
    """
    opts = validate_options(z_loss, soft_cap, label_smoothing)
    if not isinstance(return_aux, bool):
        raise TypeError(f"return_aux must be True or False; got {return_aux!r}.")
    temperature = _check_temperature(temperature)
    general = return_aux or temperature != 1.0 or accumulation_dtype is not None
    if general and (vocab_axis is not None or batch_axis is not None):
        raise ValueError(
            "return_aux, temperature and accumulation_dtype are not supported with "
            "vocab_axis / batch_axis yet: call linear_cross_entropy without them there."
        )
    num_classes = None
    if vocab_axis is not None or batch_axis is not None:
        num_classes = _vocab_parallel.global_classes(weight, vocab_axis, batch_axis, "weight")
    hidden, weight, labels, kept, chunk = _validate_linear(
        hidden, weight, labels, where, ignore_index, chunk_size, reduction, num_classes
    )
    bias = _check_bias(bias, hidden.dtype, weight.shape[1])
    ctype = _check_accumulation(accumulation_dtype, hidden.dtype)
    if return_aux or temperature != 1.0 or ctype != compute_dtype(hidden.dtype):
        cfg = AuxConfig(chunk, temperature, ctype.name)
        return _general(hidden, weight, bias, labels, kept, opts, reduction, return_aux, cfg)
    num_classes = weight.shape[1] if num_classes is None else num_classes
    shape = labels.shape
    ctype = compute_dtype(hidden.dtype)
    h = hidden.reshape(-1, hidden.shape[-1])
    t = labels.reshape(-1)
    keep = None if kept is None else kept.reshape(-1)
    if weight.shape[1] == 0:  # no class: no valid label (only traced ones get here)
        loss = jnp.full(t.shape, jnp.nan, ctype)
    elif t.size == 0:
        loss = jnp.zeros(t.shape, ctype)
    else:
        if keep is not None:
            # Padding positions compute on label 0 and are zeroed below: their loss and
            # its cotangent are 0, so they add 0 to both gradients.
            t = jnp.where(keep, t, 0)
        valid = (t >= 0) & (t < num_classes)
        if vocab_axis is None and reduction != "none" and fused_dtype(hidden.dtype):
            # A scalar loss: its cotangent is one number, so the gradients are computed in
            # the forward pass (`_linear_reduced`); "none" keeps the per-row cotangents.
            t = jnp.where(valid, t, 0)
            args = (opts, chunk, reduction, batch_axis)
            total = _linear_reduced(h, weight, bias, t, keep, valid, *args)
            return total.astype(hidden.dtype)
        if vocab_axis is None:
            loss = _linear(h, weight, bias, jnp.where(valid, t, 0), opts, chunk)
        else:
            loss = _sharded(h, weight, bias, jnp.where(valid, t, 0), opts, chunk, vocab_axis)
        loss = _masked(loss, keep, valid)
    if reduction == "none":
        return loss.reshape(shape).astype(hidden.dtype)
    return _reduce(loss, keep, reduction, batch_axis).astype(hidden.dtype)


def _check_temperature(temperature) -> float:
    """T as a Python float: a finite number > 0 (static under jit), else one clear error."""
    if isinstance(temperature, jax.core.Tracer):
        raise TypeError(
            "temperature must be a Python number (static under jit); got a traced value."
        )
    if isinstance(temperature, bool):
        raise TypeError(f"temperature must be a number; got {temperature!r}.")
    try:
        value = float(temperature)
    except (TypeError, ValueError):
        raise TypeError(f"temperature must be a number; got {temperature!r}.") from None
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(f"temperature must be a finite number > 0; got {temperature}.")
    return value


def _check_accumulation(accumulation_dtype, dtype) -> np.dtype:
    """The accumulation dtype: the compute dtype for None (float32, float64 for float64
    inputs); float32 or float64 (x64 on), never narrower than the compute dtype."""
    default = np.dtype(compute_dtype(dtype))
    if accumulation_dtype is None:
        return default
    try:
        acc = np.dtype(accumulation_dtype)
    except TypeError:
        acc = None
    if acc is None or acc not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(
            f"accumulation_dtype must be float32 or float64 (or None); got {accumulation_dtype!r}."
        )
    if acc == np.float64 and jax.dtypes.canonicalize_dtype(np.float64) != np.float64:
        raise ValueError(
            "accumulation_dtype float64 needs JAX's x64 mode (`jax.enable_x64(True)`); "
            "without it the sums would silently be float32."
        )
    if acc.itemsize < default.itemsize:
        raise ValueError(
            f"accumulation_dtype {acc.name} is narrower than {np.dtype(dtype).name}'s compute "
            f"dtype {default.name}: the lab never drops precision silently."
        )
    return acc


def _general(hidden, weight, bias, labels, kept, opts, reduction, return_aux, cfg: AuxConfig):
    """`linear_cross_entropy` with the per-token outputs, a temperature or an accumulation
    dtype (`_linear_aux`): (loss, aux) with `return_aux`, else the loss."""
    shape = labels.shape
    ctype = np.dtype(cfg.ctype)
    num_classes = weight.shape[1]
    h = hidden.reshape(-1, hidden.shape[-1])
    t = labels.reshape(-1)
    keep = None if kept is None else kept.reshape(-1)
    total = None  # the fused path's reduced loss
    if num_classes == 0 or t.size == 0:  # nothing to compute: NaN (no class) or empty
        fill = jnp.nan if num_classes == 0 else 0
        loss = log_prob = ent = lse = jnp.full(t.shape, fill, ctype)
        argmax = jnp.zeros(t.shape, jnp.int32)
    else:
        if keep is not None:
            t = jnp.where(keep, t, 0)
        valid = (t >= 0) & (t < num_classes)
        t = jnp.where(valid, t, 0)
        if reduction != "none" and fused_dtype(hidden.dtype) and ctype == compute_dtype(h.dtype):
            # A scalar loss: its gradients computed in the forward pass, as `_linear_reduced`.
            total, log_prob, ent, lse, argmax = _linear_aux_reduced(
                h, weight, bias, t, keep, valid, opts, cfg, reduction
            )
        else:
            loss, log_prob, ent, lse, argmax = _linear_aux(h, weight, bias, t, opts, cfg)
            loss = _masked(loss, keep, valid)
        log_prob = _masked(log_prob, keep, valid)
        if keep is not None:
            zero = jnp.zeros((), ctype)
            ent, lse = (jnp.where(keep, x, zero) for x in (ent, lse))
    if reduction == "none":
        out = loss.reshape(shape).astype(hidden.dtype)
    else:
        if total is None:
            total = _reduce(loss, keep, reduction, None)
        out = total.astype(hidden.dtype)
    if not return_aux:
        return out
    z_term = (
        jnp.asarray(opts.z_loss, ctype) * lse * lse if opts.z_loss else jnp.zeros(t.shape, ctype)
    )
    aux = {
        "log_prob": log_prob,
        "entropy": ent,
        "lse": lse,
        "argmax": argmax,
        "z_loss": z_term,
    }
    return out, {
        k: v.reshape(shape) if k == "argmax" else v.reshape(shape).astype(hidden.dtype)
        for k, v in aux.items()
    }
