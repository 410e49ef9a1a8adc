"""Vocabulary-parallel cross-entropy: the classes split over a mesh axis (issue 48, item 1).

Inside `jax.shard_map`, each of the P devices of the mesh axis `vocab_axis` holds a
contiguous slice of the classes, device i the columns [i K / P, (i + 1) K / P) (K the
whole vocabulary, K / P the shard). Each device forms its shard's statistics with the
unsharded code (`numerics._lm_loss.chunk_stats`, chunked for `linear_cross_entropy`), and
the devices combine them as the chunks of one device combine (`_lm_loss.combine`):

    M = pmax_i M_i,     S_others = psum_i S_others,i e^(M_i - M),
    z_t = the target's logit from the device that holds it (-inf on the others: pmax),
    G = psum_i (G_i + n_i (M - M_i)),   n = psum_i n_i,

then the loss in the margin form from these global statistics (`_lm_loss.finish`). The
backward pass (`jax.custom_vjp`) keeps each device's logits' gradient on that device:
g = dL/dz on the shard is formed from the saved global terms (M, S_others, 1 / S, lse, n),
the weight's (and bias's) gradient is the local shard's, and the hidden's, a sum over the
whole vocabulary, is psum'd over `vocab_axis` in the compute dtype and rounded once.
Communication: a few (rows,) vectors forward and one (rows, D) psum backward, never a
(rows, K) array.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from numerics import _validate
from numerics._lm_loss import (
    ChunkStats,
    LossOptions,
    capped,
    chunk_grad,
    chunk_stats,
    finish,
)
from numerics._softmax import compute_dtype


def _axis_size(name, what: str) -> int:
    """The size of the bound mesh axis `name`; ValueError naming it when none is bound."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a mesh axis name (a str); got {name!r}.")
    try:
        return int(jax.lax.axis_size(name))
    except NameError:
        raise ValueError(
            f"{what}={name!r} is not a mesh axis bound here: call inside jax.shard_map over "
            f"a mesh with an axis {name!r}, or use numerics.sharded_linear_cross_entropy / "
            "numerics.sharded_cross_entropy, which build the shard_map from a mesh."
        ) from None


def global_classes(shard, vocab_axis, batch_axis, name: str) -> int:
    """The whole vocabulary K = P x (the shard's classes), after checking the axes are bound."""
    if batch_axis is not None:
        _axis_size(batch_axis, "batch_axis")
        if batch_axis == vocab_axis:
            raise ValueError(f"batch_axis and vocab_axis must differ; both are {vocab_axis!r}.")
    local = np.shape(shard)[-1] if np.ndim(shard) else 0
    if vocab_axis is None:
        return local
    return local * _axis_size(vocab_axis, "vocab_axis")


def offset(vocab_axis, local: int) -> jax.Array:
    """The first class this device holds."""
    return jax.lax.axis_index(vocab_axis).astype(jnp.int32) * local


def across(stats: ChunkStats, vocab_axis) -> ChunkStats:
    """One row's statistics over the devices of `vocab_axis` from each device's, as
    `_lm_loss.combine` forms them over chunks: each S_others rescaled once by e^(M_i - M),
    then summed; the target's logit is -inf on every device but the one holding it."""
    z_max = jax.lax.pmax(stats.z_max, vocab_axis)
    scale = jnp.exp(stats.z_max - z_max)
    s_others, gaps, count = jax.lax.psum(
        (stats.s_others * scale, stats.gaps + stats.count * (z_max - stats.z_max), stats.count),
        vocab_axis,
    )
    return ChunkStats(z_max, s_others, jax.lax.pmax(stats.z_t, vocab_axis), gaps, count)


# The materialized loss -------------------------------------------------------------------


def _rows(logits, labels, mask, opts: LossOptions, vocab_axis):
    """(loss, g), both in the compute dtype, for (rows, K / P) logits and global labels."""
    ctype = compute_dtype(logits.dtype)
    local_k = logits.shape[-1]
    z_raw = logits.astype(ctype)
    local = labels - offset(vocab_axis, local_k)
    stats = across(chunk_stats(capped(z_raw, opts), local, mask, opts), vocab_axis)
    here = (local >= 0) & (local < local_k)
    if mask is None:
        kept_t = jnp.ones(labels.shape, bool)
        padding = jnp.zeros(labels.shape, bool)
    else:
        picked = jnp.take_along_axis(mask, jnp.clip(local, 0, local_k - 1)[:, None], -1)[:, 0]
        kept_t, any_kept = jax.lax.pmax(
            ((here & picked).astype(jnp.int32), jnp.any(mask, axis=-1).astype(jnp.int32)),
            vocab_axis,
        )
        kept_t, padding = kept_t > 0, any_kept == 0
    loss, terms = finish(stats, kept_t, opts)
    grad = chunk_grad(z_raw, local, mask, kept_t, terms, opts)
    valid = (labels >= 0) & (labels < local_k * jax.lax.axis_size(vocab_axis))
    zero, nan = jnp.zeros((), ctype), jnp.asarray(jnp.nan, ctype)
    loss = jnp.where(padding, zero, jnp.where(valid, loss, nan))
    grad = jnp.where(padding[:, None], zero, jnp.where(valid[:, None], grad, nan))
    return loss, grad


def _materialized_forward(logits, labels, mask, opts, vocab_axis):
    loss, grad = _rows(logits, labels, mask, opts, vocab_axis)
    # g is rounded once to the logits' dtype, as the unsharded loss's gradient is.
    return loss.astype(logits.dtype), (grad.astype(logits.dtype), mask, labels)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _materialized(logits, labels, mask, opts, vocab_axis):
    return _materialized_forward(logits, labels, mask, opts, vocab_axis)[0]


def _materialized_bwd(opts, vocab_axis, residuals, cotangent):
    grad, mask, labels = residuals
    d_mask = None if mask is None else np.zeros(mask.shape, jax.dtypes.float0)
    return grad * cotangent[:, None], np.zeros(labels.shape, jax.dtypes.float0), d_mask


_materialized.defvjp(_materialized_forward, _materialized_bwd)


def cross_entropy(logits, labels, axis, where, opts: LossOptions, vocab_axis) -> jax.Array:
    """`numerics.cross_entropy(..., vocab_axis=)`: logits (..., K / P), this device's shard
    of the class axis (the last); labels index the whole K."""
    logits = _validate.float_array(logits, "logits")
    if axis not in (-1, logits.ndim - 1) or logits.ndim == 0:
        raise ValueError(
            f"with vocab_axis the class axis must be the last one (axis=-1); got axis={axis!r} "
            f"for logits of shape {np.shape(logits)}."
        )
    num_classes = global_classes(logits, vocab_axis, None, "logits")
    mask = _validate.loss_mask(where, logits.shape, (logits.ndim - 1,))
    labels = _validate.int_array(labels, "labels")
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels of shape {labels.shape} do not match logits of shape {logits.shape}: "
            f"expected {logits.shape[:-1]}."
        )
    check_labels(labels, None if mask is None else jnp.any(mask, axis=-1), num_classes)
    shape = labels.shape
    if logits.shape[-1] == 0 or labels.size == 0:
        fill = jnp.nan if logits.shape[-1] == 0 else 0
        return jnp.full(shape, fill, logits.dtype)
    rows = logits.reshape(-1, logits.shape[-1])
    kept = None if mask is None else mask.reshape(rows.shape)
    loss = _materialized(rows, labels.reshape(-1).astype(jnp.int32), kept, opts, vocab_axis)
    return loss.reshape(shape)


def check_labels(labels, kept, num_classes: int) -> None:
    """Concrete labels (of kept rows) outside [0, K) raise, as in the unsharded calls."""
    if isinstance(labels, jax.core.Tracer) or not labels.size:
        return
    host = np.asarray(labels)
    if kept is not None and not isinstance(kept, jax.core.Tracer):
        host = host[np.asarray(kept)]
    if host.size and (host.min() < 0 or host.max() >= num_classes):
        raise ValueError(
            f"labels must lie in [0, {num_classes}) (outside where / ignore_index); got values "
            f"in [{int(host.min())}, {int(host.max())}]."
        )
