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
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

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


def _offset(vocab_axis, local: int) -> jax.Array:
    """The first class this device holds."""
    return jax.lax.axis_index(vocab_axis).astype(jnp.int32) * local


def _across(stats: ChunkStats, vocab_axis) -> ChunkStats:
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


# The chunked linear loss -----------------------------------------------------------------


def _linear_forward(hidden, weight, bias, labels, opts, chunk, vocab_axis):
    from numerics._linear import _stats

    local = labels - _offset(vocab_axis, weight.shape[1])
    stats = _across(_stats(hidden, weight, bias, local, opts, chunk), vocab_axis)
    loss, terms = finish(stats, jnp.ones(labels.shape, bool), opts)
    return loss, (hidden, weight, bias, local, terms)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def linear(hidden, weight, bias, labels, opts, chunk, vocab_axis):
    """Per-row losses (compute dtype) of hidden_NxD @ the weight shard, labels global."""
    return _linear_forward(hidden, weight, bias, labels, opts, chunk, vocab_axis)[0]


def _linear_bwd(opts, chunk, vocab_axis, residuals, cotangent):
    from numerics._linear import backward

    return backward(opts, chunk, residuals, cotangent, vocab_axis)


linear.defvjp(_linear_forward, _linear_bwd)


# The materialized loss -------------------------------------------------------------------


def _rows(logits, labels, mask, opts: LossOptions, vocab_axis):
    """(loss, g), both in the compute dtype, for (rows, K / P) logits and global labels."""
    ctype = compute_dtype(logits.dtype)
    local_k = logits.shape[-1]
    z_raw = logits.astype(ctype)
    local = labels - _offset(vocab_axis, local_k)
    stats = _across(chunk_stats(capped(z_raw, opts), local, mask, opts), vocab_axis)
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
    _check_labels(labels, None if mask is None else jnp.any(mask, axis=-1), num_classes)
    shape = labels.shape
    if logits.shape[-1] == 0 or labels.size == 0:
        fill = jnp.nan if logits.shape[-1] == 0 else 0
        return jnp.full(shape, fill, logits.dtype)
    rows = logits.reshape(-1, logits.shape[-1])
    kept = None if mask is None else mask.reshape(rows.shape)
    loss = _materialized(rows, labels.reshape(-1).astype(jnp.int32), kept, opts, vocab_axis)
    return loss.reshape(shape)


def _check_labels(labels, kept, num_classes: int) -> None:
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


# The wrappers that build the shard_map -----------------------------------------------------


def _check_mesh(mesh, vocab_axis, batch_axis) -> None:
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}.")
    names = tuple(mesh.axis_names)
    for what, name in (("vocab_axis", vocab_axis), ("batch_axis", batch_axis)):
        if name is None and what == "batch_axis":
            continue
        if name not in names:
            raise ValueError(f"{what}={name!r} is not an axis of the mesh; its axes are {names}.")
    if vocab_axis == batch_axis:
        raise ValueError(f"batch_axis and vocab_axis must differ; both are {vocab_axis!r}.")


def _shard_map(body, mesh, specs, out, args):
    """`jax.shard_map` over `mesh`; on a mesh with Explicit axes (`jax.make_mesh`'s default)
    the inputs are first resharded to the specs, which shard_map then requires."""
    if any(kind == AxisType.Explicit for kind in mesh.axis_types):
        args = [jax.reshard(a, NamedSharding(mesh, s)) for a, s in zip(args, specs, strict=True)]
    return jax.shard_map(body, mesh=mesh, in_specs=tuple(specs), out_specs=out)(*args)


def _divides(size: int, mesh, axis, what: str, fix: str) -> None:
    parts = mesh.shape[axis]
    if size % parts:
        raise ValueError(
            f"{what} ({size}) does not divide over the {parts} devices of mesh axis {axis!r}: {fix}"
        )


_PAD_VOCAB = (
    "pad the vocabulary to a multiple of it (extra weight columns, or logits, that no label "
    "names, with a bias or logits of -inf, so that they take no probability)."
)


def sharded_linear_cross_entropy(
    mesh: Mesh,
    hidden: ArrayLike,
    weight: ArrayLike,
    labels: ArrayLike,
    *,
    vocab_axis: str,
    batch_axis: str | None = None,
    bias: ArrayLike | None = None,
    where: ArrayLike | None = None,
    ignore_index: int | None = None,
    reduction: str = "none",
    z_loss: float = 0.0,
    soft_cap: float | None = None,
    label_smoothing: float = 0.0,
    chunk_size: int | None = None,
) -> jax.Array:
    """`linear_cross_entropy` with the vocabulary split over `mesh`'s axis `vocab_axis`.

    Builds the `jax.shard_map`: weight (D, V) split along V (bias (V,) likewise), and with
    `batch_axis` hidden, labels and `where` split along their leading (batch) axis; the
    rest is replicated. Inside, each device calls `linear_cross_entropy(...,
    vocab_axis=vocab_axis, batch_axis=batch_axis)` on its shards. The result is the
    unsharded call's within the bound tests/numerics/test_vocab_parallel.py derives:
    per-row losses split like the labels for "none", a scalar otherwise. Differentiable
    (`jax.grad` gives the gradients laid out as the inputs); use it under `jax.jit`.

    Errors (ValueError), before anything runs: an axis that is not one of the mesh's,
    the same axis for both, V not a multiple of the vocab axis's size (pad it: extra
    columns with a bias of -inf, never a label) or the batch not a multiple of the batch
    axis's, and the shape mismatches `linear_cross_entropy` itself reports.

    Example (2 host devices, as the test suite's conftest.py sets):
      >>> import jax, jax.numpy as jnp, numpy as np, numerics
      >>> mesh = jax.make_mesh((2,), ("vocab",))
      >>> h = jnp.array([[1.0, 2.0], [0.5, -1.0]])
      >>> w = jnp.array([[1.0, 0.0, -1.0, 2.0], [0.5, 2.0, 0.0, -0.5]])
      >>> t = jnp.array([1, 3])
      >>> got = numerics.sharded_linear_cross_entropy(mesh, h, w, t, vocab_axis="vocab")
      >>> bool(jnp.allclose(got, numerics.linear_cross_entropy(h, w, t), rtol=1e-6))
      True
    """
    from numerics._linear import DEFAULT_CHUNK_SIZE, linear_cross_entropy

    _check_mesh(mesh, vocab_axis, batch_axis)
    hidden = _validate.float_array(hidden, "hidden")
    weight = _validate.float_array(weight, "weight")
    labels = _validate.int_array(labels, "labels")
    if weight.ndim != 2 or hidden.ndim < 1:
        raise ValueError(
            f"hidden must be (..., D) and weight (D, V); got shapes {hidden.shape} and "
            f"{weight.shape}."
        )
    _divides(weight.shape[1], mesh, vocab_axis, "the vocabulary V", _PAD_VOCAB)
    if labels.shape != hidden.shape[:-1]:
        raise ValueError(
            f"labels of shape {labels.shape} do not match hidden of shape {hidden.shape}: "
            f"expected {hidden.shape[:-1]}."
        )
    kept = None if where is None else jnp.asarray(where)
    if kept is not None and (kept.dtype != jnp.bool_ or kept.shape != labels.shape):
        raise ValueError(
            f"where must be a boolean mask of the labels' shape {labels.shape}; got "
            f"{kept.dtype} of shape {kept.shape}."
        )
    if ignore_index is not None:
        kept = (labels != ignore_index) if kept is None else kept & (labels != ignore_index)
    _check_labels(labels, kept, weight.shape[1])
    if batch_axis is not None:
        if hidden.ndim < 2:
            raise ValueError(f"batch_axis needs a batch axis: hidden has shape {hidden.shape}.")
        _divides(hidden.shape[0], mesh, batch_axis, "the batch (hidden's leading axis)", "")
    rows = P(batch_axis)
    args = [hidden, weight, labels]
    specs = [rows, P(None, vocab_axis), rows]
    extra = {}
    if bias is not None:
        bias = _validate.float_array(bias, "bias")
        if bias.shape != (weight.shape[1],):
            raise ValueError(f"bias must have shape (V,) = ({weight.shape[1]},); got {bias.shape}.")
        args.append(bias)
        specs.append(P(vocab_axis))
        extra["bias"] = len(args) - 1
    if where is not None:
        args.append(where)
        specs.append(rows)
        extra["where"] = len(args) - 1
    kwargs = dict(
        ignore_index=ignore_index,
        reduction=reduction,
        z_loss=z_loss,
        soft_cap=soft_cap,
        label_smoothing=label_smoothing,
        chunk_size=DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size,
        vocab_axis=vocab_axis,
        batch_axis=batch_axis,
    )

    def body(*a):
        named = {k: a[i] for k, i in extra.items()}
        return linear_cross_entropy(a[0], a[1], a[2], **named, **kwargs)

    out = rows if reduction == "none" else P()
    return _shard_map(body, mesh, specs, out, args)


def sharded_cross_entropy(
    mesh: Mesh,
    logits: ArrayLike,
    labels: ArrayLike,
    where: ArrayLike | None = None,
    *,
    vocab_axis: str,
    batch_axis: str | None = None,
    z_loss: float = 0.0,
    soft_cap: float | None = None,
    label_smoothing: float = 0.0,
) -> jax.Array:
    """`cross_entropy` on logits (..., K) whose class axis (the last) is split over
    `mesh`'s axis `vocab_axis`, and with `batch_axis` their leading axis over that one.

    Builds the `jax.shard_map` and calls `cross_entropy(..., vocab_axis=vocab_axis)` on
    each device's shard; `where` of the logits' rank (an entry mask) is split like the
    logits, of the labels' rank (an example mask) like the labels. Per-example losses,
    split like the labels; differentiable with `jax.grad`. Errors as
    `sharded_linear_cross_entropy`'s.
    """
    _check_mesh(mesh, vocab_axis, batch_axis)
    logits = _validate.float_array(logits, "logits")
    labels = _validate.int_array(labels, "labels")
    if logits.ndim < 1 or labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels of shape {labels.shape} do not match logits of shape {logits.shape}: "
            f"expected {logits.shape[:-1]} (the class axis is the last)."
        )
    _divides(logits.shape[-1], mesh, vocab_axis, "the number of classes K", _PAD_VOCAB)
    mask = _validate.loss_mask(where, logits.shape, (logits.ndim - 1,))
    _check_labels(labels, None if mask is None else jnp.any(mask, axis=-1), logits.shape[-1])
    if batch_axis is not None:
        if logits.ndim < 2:
            raise ValueError(f"batch_axis needs a batch axis: logits have shape {logits.shape}.")
        _divides(logits.shape[0], mesh, batch_axis, "the batch (logits' leading axis)", "")
    rows = P(batch_axis)
    full = P(batch_axis, *([None] * (logits.ndim - 2)), vocab_axis)
    opts = dict(z_loss=z_loss, soft_cap=soft_cap, label_smoothing=label_smoothing)
    from numerics._cross_entropy import cross_entropy as ce

    if mask is None:
        body = functools.partial(ce, vocab_axis=vocab_axis, **opts)
        return _shard_map(body, mesh, (full, rows), rows, (logits, labels))

    def body(z, t, m):
        return ce(z, t, where=m, vocab_axis=vocab_axis, **opts)

    return _shard_map(body, mesh, (full, rows, full), rows, (logits, labels, mask))
