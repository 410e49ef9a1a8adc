"""The wrappers that build the `jax.shard_map` of a vocabulary-parallel loss from a mesh.

`numerics.sharded_linear_cross_entropy` and `numerics.sharded_cross_entropy` split the
vocabulary (and, with `batch_axis`, the rows) over a mesh and call the public losses with
`vocab_axis` inside; the per-device combination is `numerics._vocab_parallel`'s. This module
is the top of `numerics`' layers: it imports the public losses, and nothing imports it but
the package.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from numerics import _validate
from numerics._cross_entropy import cross_entropy as ce
from numerics._linear import DEFAULT_CHUNK_SIZE, linear_cross_entropy
from numerics._vocab_parallel import check_labels

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
    check_labels(labels, kept, weight.shape[1])
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
    check_labels(labels, None if mask is None else jnp.any(mask, axis=-1), logits.shape[-1])
    if batch_axis is not None:
        if logits.ndim < 2:
            raise ValueError(f"batch_axis needs a batch axis: logits have shape {logits.shape}.")
        _divides(logits.shape[0], mesh, batch_axis, "the batch (logits' leading axis)", "")
    rows = P(batch_axis)
    full = P(batch_axis, *([None] * (logits.ndim - 2)), vocab_axis)
    opts = dict(z_loss=z_loss, soft_cap=soft_cap, label_smoothing=label_smoothing)
    if mask is None:
        body = functools.partial(ce, vocab_axis=vocab_axis, **opts)
        return _shard_map(body, mesh, (full, rows), rows, (logits, labels))

    def body(z, t, m):
        return ce(z, t, where=m, vocab_axis=vocab_axis, **opts)

    return _shard_map(body, mesh, (full, rows, full), rows, (logits, labels, mask))
