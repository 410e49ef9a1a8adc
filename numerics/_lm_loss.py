"""The per-row statistics of the fixed cross-entropy with the trainers' options.

z-loss (a weight w on logsumexp^2), logit soft-capping (c tanh(z / c)) and label
smoothing (alpha), shared by the materialized `cross_entropy(..., z_loss=, soft_cap=,
label_smoothing=)` and the chunked `linear_cross_entropy`. Everything here works on
(rows, C) chunks of logits in the compute dtype; the materialized loss is one chunk.

With the capped logits z, M their row max, S_others = sum_{j != t} e^(z_j - M) (the
target's own term summed apart, as in `cross_entropy`), S = S_others + e^(z_t - M),
lse = M + log S, n the number of classes and G = sum_j (M - z_j) >= 0,

    CE     = log1p(S_others e^(M - z_t))                 (the margin form)
    smooth = (1/n) sum_j (lse - z_j) = log S + G / n     (two non-negative terms)
    L      = (1 - alpha) CE + alpha smooth + w lse^2,

and dL/dz_j = (1 + 2 w lse) q_j - alpha / n for j != t, while the target entry is
-S_others / S + 2 w lse q_t + alpha (n - 1) / n: the q_t - 1 of the plain gradient is
never formed, and the z-loss factor 1 + 2 w lse is never rounded before it
multiplies q_t. Soft-capping multiplies by dz/dz_raw = sech^2(z_raw / c), never 1 - tanh^2.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from numerics._softmax import compute_dtype, finite_row_max


class LossOptions(NamedTuple):
    """The trainers' options, as Python floats (static under `jit`)."""

    z_loss: float = 0.0  # weight w on logsumexp^2 (T5X's z_loss, 1e-4 there)
    soft_cap: float | None = None  # c of c tanh(z / c) (Gemma 2: 30 on the final logits)
    label_smoothing: float = 0.0  # alpha: (1 - alpha) one-hot + alpha / n

    @property
    def plain(self) -> bool:
        """Whether no option is set (the plain fixed cross-entropy)."""
        return self.z_loss == 0 and self.soft_cap is None and self.label_smoothing == 0


def _static_float(value, name: str) -> float:
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{name} must be a Python number (static under jit); got a traced value.")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number; got {value!r}.") from None


def validate_options(z_loss, soft_cap, label_smoothing) -> LossOptions:
    """Validate the options on entry: ValueError for values outside their range."""
    w = _static_float(z_loss, "z_loss")
    if not (w >= 0 and math.isfinite(w)):
        raise ValueError(f"z_loss must be a finite number >= 0; got {z_loss}.")
    c = None if soft_cap is None else _static_float(soft_cap, "soft_cap")
    if c is not None and not (c > 0 and math.isfinite(c)):
        raise ValueError(f"soft_cap must be a finite number > 0 (or None); got {soft_cap}.")
    alpha = _static_float(label_smoothing, "label_smoothing")
    if not 0 <= alpha < 1:
        raise ValueError(f"label_smoothing must lie in [0, 1); got {label_smoothing}.")
    return LossOptions(w, c, alpha)


def capped(z: jax.Array, opts: LossOptions) -> jax.Array:
    """c tanh(z / c) (or z), in z's dtype: bounded by c, so the margin stays below 2c."""
    if opts.soft_cap is None:
        return z
    c = jnp.asarray(opts.soft_cap, z.dtype)
    return c * jnp.tanh(z / c)


def cap_slope(z: jax.Array, opts: LossOptions) -> jax.Array | None:
    """d capped / dz = sech^2(z / c), None without a cap.

    As 1 / cosh^2, never 1 - tanh^2: once tanh(z / c) rounds towards 1 that difference
    cancels to 0 or to a few ulps of 1, while 1 / cosh keeps its relative accuracy down
    to underflow (cosh overflowing to inf gives the right limit, 0).
    """
    if opts.soft_cap is None:
        return None
    r = 1 / jnp.cosh(z / jnp.asarray(opts.soft_cap, z.dtype))
    return r * r


def loss_from(kept_t, shift_t, s_others, s_all) -> jax.Array:
    """CE = log(1 + e^-m) from the row statistics, never adding 1 to e^-m.

    Near the max (z_t - z_max > -1), e^-m = S_others e^(z_max - z_t) is formed from
    S_others, which leaves the target out by its index, so log1p never forms 1 + e^-m and
    never subtracts the target's own term; at the max e^0 = 1 exactly. This also holds
    where z_t and z_max disagree by rounding: XLA may recompute a fused producer of the
    logits separately for the gather and for the max, with a multiply-add contracted in
    one copy and not the other, so the gathered z_t can sit an ulp above the row max;
    log(S) - (z_t - z_max) then gave losses of about -ulp(z) where the true loss was
    1e-20. Far below the max, L = log(S) - (z_t - z_max) adds two non-negative terms
    (S >= 1), with no cancellation; a masked-out target gives optax's
    logsumexp(kept) - z_t.
    """
    near = jnp.log1p(s_others * jnp.exp(-jnp.maximum(shift_t, -1)))
    return jnp.where(kept_t & (shift_t > -1), near, jnp.log(s_all) - shift_t)


class ChunkStats(NamedTuple):
    """One chunk's per-row statistics (rows,), in the compute dtype."""

    z_max: jax.Array  # max of the (capped, kept) logits; 0 for a row of only -inf
    s_others: jax.Array  # sum of e^(z_j - z_max) over kept j != t
    z_t: jax.Array  # the target's capped logit, -inf where the target is not in the chunk
    gaps: jax.Array  # sum of (z_max - z_j) over kept j (0 unless label smoothing)
    count: jax.Array  # kept entries


def chunk_stats(z: jax.Array, local_t: jax.Array, kept, opts: LossOptions) -> ChunkStats:
    """Statistics of capped logits z (rows, C) whose target sits at column local_t
    (outside [0, C): not in this chunk); `kept` an entry mask or None."""
    masked = z if kept is None else jnp.where(kept, z, -jnp.inf)
    z_max = finite_row_max(masked)
    iota = jax.lax.broadcasted_iota(local_t.dtype, z.shape, z.ndim - 1)
    is_t = iota == local_t[:, None]
    zero = jnp.zeros((), z.dtype)
    s_others = jnp.sum(jnp.where(is_t, zero, jnp.exp(masked - z_max)), axis=-1)
    in_chunk = (local_t >= 0) & (local_t < z.shape[-1])
    picked = jnp.take_along_axis(z, jnp.clip(local_t, 0, z.shape[-1] - 1)[:, None], -1)[:, 0]
    z_t = jnp.where(in_chunk, picked, -jnp.inf)
    if kept is None:
        count = jnp.full(local_t.shape, z.shape[-1], z.dtype)
    else:
        count = jnp.sum(kept, axis=-1).astype(z.dtype)
    if opts.label_smoothing:
        # Each z_max - z_j >= 0 is exact where z_j is within a factor 2 of z_max, and a
        # sum of non-negative terms never cancels. Entries masked out by `kept` are left
        # out; a -inf logit that is kept has -log q = inf, and so has the smoothed loss.
        gap = z_max - z
        gaps = jnp.sum(gap if kept is None else jnp.where(kept, gap, zero), axis=-1)
    else:
        gaps = jnp.zeros(local_t.shape, z.dtype)
    return ChunkStats(z_max[:, 0], s_others, z_t, gaps, count)


def combine(stats: ChunkStats) -> ChunkStats:
    """One row's statistics from the chunks' (stacked on a leading axis).

    Each chunk's S_others is rescaled once, by e^(m_c - M) with M the overall max,
    at the end: an online update would rescale the running sum each time the max grows,
    one rounding of an exp and a product per chunk; here each term carries one. The
    gap sums shift exactly as sum (M - z_j) = sum (m_c - z_j) + n_c (M - m_c), all >= 0.
    """
    z_max = jnp.max(stats.z_max, axis=0, keepdims=True)
    scale = jnp.exp(stats.z_max - z_max)
    return ChunkStats(
        z_max[0],
        jnp.sum(stats.s_others * scale, axis=0),
        jnp.max(stats.z_t, axis=0),  # -inf in every chunk but the target's
        jnp.sum(stats.gaps + stats.count * (z_max - stats.z_max), axis=0),
        jnp.sum(stats.count, axis=0),
    )


class RowTerms(NamedTuple):
    """What the gradient needs per row (rows,), in the compute dtype."""

    z_max: jax.Array
    s_others: jax.Array
    inv_s: jax.Array  # 1 / S
    lse: jax.Array  # logsumexp of the capped logits
    count: jax.Array


def finish(stats: ChunkStats, kept_t, opts: LossOptions) -> tuple[jax.Array, RowTerms]:
    """Per-row loss L = (1 - alpha) CE + alpha smooth + w lse^2 and the gradient's terms."""
    shift_t = stats.z_t - stats.z_max
    zero = jnp.zeros((), shift_t.dtype)
    # S >= 1 holds a max entry's e^0 = 1, so adding the target's term rounds harmlessly.
    s_all = stats.s_others + jnp.where(kept_t, jnp.exp(shift_t), zero)
    loss = loss_from(kept_t, shift_t, stats.s_others, s_all)
    log_s = jnp.log(s_all)
    lse = stats.z_max + log_s
    if opts.label_smoothing:
        alpha = jnp.asarray(opts.label_smoothing, loss.dtype)
        # smooth = log S + G / n: both >= 0. Where log S is inaccurate (S near 1, one
        # logit dominating) G / n is the larger term by far.
        smooth = log_s + stats.gaps / stats.count
        loss = (1 - alpha) * loss + alpha * smooth
    if opts.z_loss:
        loss = loss + jnp.asarray(opts.z_loss, loss.dtype) * lse * lse
    return loss, RowTerms(stats.z_max, stats.s_others, 1 / s_all, lse, stats.count)


def chunk_grad(z_raw, local_t, kept, kept_t, terms: RowTerms, opts: LossOptions) -> jax.Array:
    """dL/dz_raw on one chunk (rows, C) of raw logits in the compute dtype.

    Non-target q_j = e^(z_j - M) / S directly; the target entry -S_others / S (plus the
    z-loss and smoothing terms), never q_t - 1.
    """
    z = capped(z_raw, opts)
    if kept is not None:
        z = jnp.where(kept, z, -jnp.inf)  # masked: q = 0
    col = lambda v: v[:, None]  # noqa: E731
    q = jnp.exp(z - col(terms.z_max)) * col(terms.inv_s)
    iota = jax.lax.broadcasted_iota(local_t.dtype, z.shape, z.ndim - 1)
    is_t = iota == col(local_t)
    target = -terms.s_others * terms.inv_s
    if opts.z_loss:
        # (1 + 2 w lse) q_j: the factor rounds once, a relative error that q_j keeps.
        # At the target the 2 w lse q_t term is added to -S_others / S, never to q_t - 1:
        # the difference of the two (the z-loss equilibrium) is all that can cancel,
        # and both terms arrive accurate.
        two_w_lse = 2 * jnp.asarray(opts.z_loss, z.dtype) * terms.lse
        q_t = jnp.sum(jnp.where(is_t, q, jnp.zeros((), q.dtype)), axis=-1)
        target = target + two_w_lse * q_t
        q = q * col(1 + two_w_lse)
    if opts.label_smoothing:
        alpha = jnp.asarray(opts.label_smoothing, z.dtype)
        smooth = alpha / terms.count
        target = target + alpha - jnp.where(kept_t, smooth, jnp.zeros((), z.dtype))
        q = q - col(smooth)
        if kept is not None:
            q = jnp.where(kept, q, jnp.zeros((), q.dtype))
    grad = jnp.where(is_t, col(target), q)
    slope = cap_slope(z_raw, opts)
    return grad if slope is None else grad * slope


def rows_value_and_grad(logits, labels, mask, opts: LossOptions):
    """The materialized loss with options on (rows..., K) logits: (loss, dL/dlogits), both
    computed in the compute dtype and rounded once to the logits' dtype.

    Padding rows (every entry masked) give loss 0 and gradient 0; labels outside [0, K)
    (possible only under jit) NaN for both.
    """
    shape = logits.shape
    ctype = compute_dtype(logits.dtype)
    z_raw = logits.reshape(-1, shape[-1]).astype(ctype)
    t = labels.reshape(-1)
    kept = None if mask is None else mask.reshape(-1, shape[-1])
    stats = chunk_stats(capped(z_raw, opts), t, kept, opts)
    kept_t = (
        jnp.ones(t.shape, bool)
        if kept is None
        else jnp.take_along_axis(kept, jnp.clip(t, 0, shape[-1] - 1)[:, None], -1)[:, 0]
    )
    loss, terms = finish(stats, kept_t, opts)
    grad = chunk_grad(z_raw, t, kept, kept_t, terms, opts)
    valid = (t >= 0) & (t < shape[-1])
    padding = jnp.zeros(t.shape, bool) if kept is None else ~jnp.any(kept, axis=-1)
    zero, nan = jnp.zeros((), ctype), jnp.asarray(jnp.nan, ctype)
    loss = jnp.where(padding, zero, jnp.where(valid, loss, nan))
    grad = jnp.where(padding[:, None], zero, jnp.where(valid[:, None], grad, nan))
    return loss.reshape(shape[:-1]).astype(logits.dtype), grad.reshape(shape).astype(logits.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _options_cross_entropy(logits, labels, mask, opts):
    return rows_value_and_grad(logits, labels, mask, opts)[0]


@_options_cross_entropy.defjvp
def _options_jvp(opts, primals, tangents):
    logits, labels, mask = primals
    loss, grad = rows_value_and_grad(logits, labels, mask, opts)
    # Linear in the tangent, so reverse mode is grad * cotangent, fused into one pass.
    # The gradient's own derivative (second order) is JAX's autodiff of its formula.
    return loss, jnp.sum(grad * tangents[0], axis=-1)


def options_cross_entropy(logits, labels, mask, opts: LossOptions) -> jax.Array:
    """The materialized fixed cross-entropy with options, class axis last (checked)."""
    return _options_cross_entropy(logits, labels, mask, opts)
