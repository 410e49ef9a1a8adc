"""Argument validation shared by every public function (docs/style.md 2).

They run at trace time, so a bad call fails with a clear message before XLA
sees it, under `jit` and `vmap` alike.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.typing import ArrayLike

_FLOATS = "bfloat16, float16, float32 or float64"

FLOAT8 = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))
"""The 8-bit formats numerics takes, as storage: values rounded to float8, the math of the
fixed functions in float32, each result rounded once to float8 (docs/numerics.md)."""

# An axis argument as jax.nn takes it: one axis, several normalised together, or all.
Axis = int | tuple[int, ...] | None


def _dtype(x: ArrayLike, name: str) -> np.dtype:
    """The dtype `x` has as a JAX array: its own, or JAX's default for Python values and lists.

    float64 without x64 would silently become float32, so it raises instead.
    """
    if hasattr(x, "dtype"):
        dtype = np.dtype(x.dtype)
    elif isinstance(x, list | tuple | bool | int | float):
        try:
            dtype = np.dtype(jnp.asarray(x).dtype)  # as jnp.asarray would convert it
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be an array of numbers; {err}") from None
    else:
        raise TypeError(f"{name} must be an array; got {type(x).__name__}.")
    if dtype == np.float64 and jax.dtypes.canonicalize_dtype(np.float64) != np.float64:
        raise TypeError(
            f"{name} is float64 but JAX's x64 mode is off, which would silently compute in "
            "float32: enable x64 (`jax.config.update('jax_enable_x64', True)`, or "
            "`with jax.enable_x64(True):`) or pass float32."
        )
    return dtype


def float_array(x: ArrayLike, name: str, *, float8: bool = False) -> jax.Array:
    """Return `x` as a jax array, raising TypeError unless it is floating point.

    Formats narrower than 16 bits raise TypeError too, unless `float8` and `x` is one of
    `FLOAT8` (the functions that take float8 logits say so).
    """
    dtype = _dtype(x, name)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{name} must be a floating-point array ({_FLOATS}); got dtype {dtype}.")
    if dtype.itemsize == 1:
        if dtype not in FLOAT8:
            raise TypeError(
                f"{name} is {dtype}: of the formats narrower than 16 bits numerics takes "
                "float8_e4m3fn and float8_e5m2 only (the OCP formats; the fnuz, e3m4, e8m0, "
                "float6 and float4 ones are refused)."
            )
        if not float8:
            raise TypeError(
                f"{name} is {dtype}: this function does not take float8 (a storage format "
                "here, whose math the fixed softmax, log-softmax and losses do in float32); "
                "cast to bfloat16 or float32 first."
            )
    return jnp.asarray(x)


def int_array(x: ArrayLike, name: str) -> jax.Array:
    """Return `x` as a jax array, raising TypeError unless it holds integers."""
    dtype = _dtype(x, name)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer array of class indices; got dtype {dtype}.")
    return jnp.asarray(x)


def class_axes(x: jax.Array, axis: Axis, name: str) -> tuple[int, ...]:
    """Normalise `axis` (an int, a tuple of ints, or None for all) to non-negative axes.

    The order given is kept: `classes_last` flattens the class axes in that order, so a
    loss's flat label reads them as optax does (`axis=(3, 2)` makes axis 3 the slow one).
    Raises TypeError for any other type of `axis`, ValueError when an axis is out of
    range or repeated.
    """
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (the class axis); got a scalar.")
    if axis is None:
        return tuple(range(x.ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not all(isinstance(a, int | np.integer) and not isinstance(a, bool) for a in axes):
        raise TypeError(f"axis must be an int, a tuple of ints or None; got {axis!r}.")
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise ValueError(f"axis {a} is out of range for {name} of shape {x.shape}.")
    normalised = [int(a) % x.ndim for a in axes]
    if len(set(normalised)) != len(normalised):
        raise ValueError(f"axis {axis} repeats an axis of {name}.")
    return tuple(normalised)


def classes_last(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """Move `axes` to the end and flatten them into one class axis of size prod(shape[axes])."""
    batch = [a for a in range(x.ndim) if a not in axes]
    x = jnp.transpose(x, (*batch, *axes))
    return x.reshape(*x.shape[: len(batch)], math.prod(x.shape[len(batch) :]))


def classes_back(y: jax.Array, axes: tuple[int, ...], shape: tuple[int, ...]) -> jax.Array:
    """Undo `classes_last` for an output of the input's `shape`."""
    batch = [a for a in range(len(shape)) if a not in axes]
    order = (*batch, *axes)
    y = y.reshape(tuple(shape[a] for a in order))
    return jnp.transpose(y, tuple(int(a) for a in np.argsort(order)))


def entry_mask(where: ArrayLike | None, shape: tuple[int, ...]) -> jax.Array | None:
    """Return the boolean mask broadcast to `shape`, or None when there is none."""
    if where is None:
        return None
    where = jnp.asarray(where)
    if where.dtype != jnp.bool_:
        raise TypeError(f"where must be a boolean mask; got dtype {where.dtype}.")
    try:
        np.broadcast_shapes(where.shape, shape)
    except ValueError:
        raise ValueError(
            f"where of shape {where.shape} does not broadcast to logits of shape {shape}."
        ) from None
    return jnp.broadcast_to(where, shape)


def loss_mask(
    where: ArrayLike | None, shape: tuple[int, ...], axes: tuple[int, ...]
) -> jax.Array | None:
    """`entry_mask` for a loss, reading `where` as optax does.

    `where` of the logits' rank masks entries; `where` of the labels' rank (the
    logits' rank less the class axes) masks whole examples, so it is expanded at
    the class axes rather than broadcast along them. Other ranks are ambiguous and
    raise ValueError.
    """
    if where is None:
        return None
    ndim = np.ndim(where)
    if ndim == len(shape) - len(axes):
        where = jnp.expand_dims(jnp.asarray(where), axes)
    elif ndim != len(shape):
        raise ValueError(
            f"where must have the rank of logits {shape} (an entry mask) or of the labels, "
            f"without the class axes {axes} (an example mask); got rank {ndim}."
        )
    return entry_mask(where, shape)


def class_labels(
    labels: ArrayLike, logits: jax.Array, axes: tuple[int, ...], mask: jax.Array | None = None
) -> jax.Array:
    """Check integer labels against logits with the class axes `axes`.

    A label is a flat index into the class slice, as in optax. Concrete labels
    outside [0, K) raise ValueError here; traced ones (under `jit`) cannot be
    inspected, and the losses return NaN for those rows. Rows that a concrete
    `mask` (of the logits' shape) masks out entirely are padding: their labels
    are not checked.
    """
    labels = int_array(labels, "labels")
    expected = tuple(n for a, n in enumerate(logits.shape) if a not in axes)
    if labels.shape != expected:
        raise ValueError(
            f"labels of shape {labels.shape} do not match logits of shape {logits.shape} "
            f"with the class axis at {axes if len(axes) > 1 else axes[0]}: "
            f"expected labels of shape {expected}."
        )
    num_classes = math.prod(logits.shape[a] for a in axes)
    if not isinstance(labels, jax.core.Tracer) and labels.size:
        # numpy, not jnp: under an outer `jit` a jnp reduction of even a concrete
        # array would be traced.
        host = np.asarray(labels)
        if mask is not None and not isinstance(mask, jax.core.Tracer):
            host = host[np.asarray(mask).any(axis=axes)]
        if not host.size:
            return labels
        lo, hi = int(host.min()), int(host.max())
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"labels must lie in [0, {num_classes}); got values in [{lo}, {hi}].")
    return labels


def student_teacher(
    student: ArrayLike,
    teacher: ArrayLike,
    axis: Axis,
    temperature: ArrayLike,
    where: ArrayLike | None = None,
):
    """Check a (student, teacher) logit pair and its optional `where` (read as
    `loss_mask` reads it); return both with the class axes flattened last, divided
    by T, and the mask in the same layout (or None). float8 logits are accepted; their
    division by T is done in float32 and rounded once to float8."""
    student = float_array(student, "student_logits", float8=True)
    teacher = float_array(teacher, "teacher_logits", float8=True)
    if student.shape != teacher.shape:
        raise ValueError(
            f"student_logits {student.shape} and teacher_logits {teacher.shape} "
            "must have the same shape."
        )
    if student.dtype != teacher.dtype:
        raise TypeError(
            f"student_logits ({student.dtype}) and teacher_logits ({teacher.dtype}) "
            "must have the same dtype: the lab never promotes precision silently."
        )
    axes = class_axes(student, axis, "student_logits")
    if not isinstance(temperature, jax.core.Tracer) and not float(temperature) > 0:
        raise ValueError(f"temperature must be > 0; got {temperature}.")
    mask = loss_mask(where, student.shape, axes)
    student = classes_last(student, axes)
    teacher = classes_last(teacher, axes)
    mask = None if mask is None else classes_last(mask, axes)
    if not (isinstance(temperature, (int, float)) and temperature == 1):
        # Both sides divided in their own dtype: equal logits stay bit-identical. float8 in
        # float32, rounded once (XLA would round through float16 first).
        dtype = student.dtype
        if dtype.itemsize == 1:
            t = jnp.asarray(temperature, jnp.float32)
            student = (student.astype(jnp.float32) / t).astype(dtype)
            teacher = (teacher.astype(jnp.float32) / t).astype(dtype)
        else:
            temperature = jnp.asarray(temperature, dtype)
            student, teacher = student / temperature, teacher / temperature
    return student, teacher, mask


def reduction(
    a: ArrayLike, axis: Axis, b: ArrayLike | None, where: ArrayLike | None, keepdims: bool
):
    """Check the arguments of a logsumexp (`jax.nn.logsumexp`'s): return a (0-d as shape
    (1,)), its reduced axes, b and the mask broadcast to a's shape (or None), and the
    output's shape (a's without the axes; with them, size 1, when `keepdims`; () for a 0-d
    a, which only axis None or () can reduce). b must have a's dtype: no promotion."""
    a = float_array(a, "a", float8=True)
    shape = a.shape
    if a.ndim == 0:
        if axis not in (None, ()):
            raise ValueError(f"axis {axis!r} is out of range for a 0-d a: use None or ().")
        a, axis = a.reshape(1), None
    axes = class_axes(a, axis, "a")
    if b is not None:
        b = float_array(b, "b", float8=True)
        if b.dtype != a.dtype:
            raise TypeError(
                f"b ({b.dtype}) must have the dtype of a ({a.dtype}): the lab never promotes "
                "precision silently."
            )
        try:
            np.broadcast_shapes(b.shape, a.shape)
        except ValueError:
            raise ValueError(
                f"b of shape {b.shape} does not broadcast to a of shape {a.shape}."
            ) from None
        b = jnp.broadcast_to(b, a.shape)
    mask = entry_mask(where, a.shape)
    kept = [(1 if i in axes else n) for i, n in enumerate(shape) if keepdims or i not in axes]
    return a, axes, b, mask, tuple(kept)


def sink_logits(sink: ArrayLike, shape: tuple[int, ...], axes: tuple[int, ...]) -> jax.Array:
    """The sink logit of `numerics.softmax(..., sink=)` broadcast to `shape` without `axes`.

    A Python number (0 for softmax off by one) or a floating-point array that broadcasts
    to the logits' shape with the class axes removed (per row), or, with as many dimensions
    as the logits, to their shape with size 1 at the class axes (keepdims: a per-head
    (1, H, 1, 1) against scores (B, H, Q, K)). Integer and boolean arrays are refused: a
    sink is a learned logit, and an integer one has no gradient. Raises TypeError for the
    dtype, ValueError for a shape that does not broadcast, in one line each.
    """
    if isinstance(sink, int) and not isinstance(sink, bool):
        sink = float(sink)  # a Python 0 means the logit 0, not an integer array
    sink = float_array(sink, "sink", float8=True)
    batch = tuple(n for a, n in enumerate(shape) if a not in axes)
    given = sink.shape
    if sink.ndim == len(shape):
        if any(sink.shape[a] != 1 for a in axes):
            raise ValueError(
                f"sink of shape {sink.shape} has the logits' {len(shape)} dimensions but not "
                f"size 1 at the class axes {axes}: it must broadcast to {batch} (one logit "
                f"per row) or, keeping the class axes, to {_keepdims(shape, axes)}."
            )
        sink = jnp.squeeze(sink, axis=axes)
    try:
        fits = np.broadcast_shapes(sink.shape, batch) == batch
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"sink of shape {given} does not broadcast to the logits' shape {shape} "
            f"without the class axes, {batch} (one logit per row), nor to "
            f"{_keepdims(shape, axes)} (class axes kept as 1)."
        )
    return jnp.broadcast_to(sink, batch)


def _keepdims(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if a in axes else n for a, n in enumerate(shape))
