"""Entry checks shared by every public function (docs/style.md 2).

They run at trace time, so a bad call fails with a clear message before XLA
sees it, under `jit` and `vmap` alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_FLOATS = "bfloat16, float16, float32 or float64"


def check_float(x, name: str) -> jax.Array:
    """Return `x` as a jax array, raising TypeError unless it is floating point."""
    dtype = np.result_type(x) if not hasattr(x, "dtype") else x.dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{name} must be a floating-point array ({_FLOATS}); got dtype {dtype}.")
    return jnp.asarray(x)


def check_int(x, name: str) -> jax.Array:
    """Return `x` as a jax array, raising TypeError unless it holds integers."""
    dtype = np.result_type(x) if not hasattr(x, "dtype") else x.dtype
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer array of class indices; got dtype {dtype}.")
    return jnp.asarray(x)


def check_axis(x: jax.Array, axis: int, name: str) -> int:
    """Normalise `axis` to a non-negative int, raising ValueError when out of range."""
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (the class axis); got a scalar.")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for {name} of shape {x.shape}.")
    return axis % x.ndim


def check_mask(where, shape: tuple[int, ...]) -> jax.Array | None:
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


def check_labels(labels, logits: jax.Array, axis: int) -> jax.Array:
    """Check integer labels against logits with the class axis at `axis`.

    Concrete labels outside [0, K) raise ValueError here; traced ones (under
    `jit`) cannot be inspected, and the losses return NaN for those rows.
    """
    labels = check_int(labels, "labels")
    expected = logits.shape[:axis] + logits.shape[axis + 1 :]
    if labels.shape != expected:
        raise ValueError(
            f"labels of shape {labels.shape} do not match logits of shape {logits.shape} "
            f"with the class axis at {axis}: expected labels of shape {expected}."
        )
    num_classes = logits.shape[axis]
    if not isinstance(labels, jax.core.Tracer) and labels.size:
        # numpy, not jnp: under an outer `jit` a jnp reduction of even a concrete
        # array would be traced.
        host = np.asarray(labels)
        lo, hi = int(host.min()), int(host.max())
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"labels must lie in [0, {num_classes}); got values in [{lo}, {hi}].")
    return labels


def check_student_teacher(student, teacher, axis: int, temperature):
    """Check a (student, teacher) logit pair; return both with the class axis last, divided by T."""
    student = check_float(student, "student_logits")
    teacher = check_float(teacher, "teacher_logits")
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
    axis = check_axis(student, axis, "student_logits")
    if not isinstance(temperature, jax.core.Tracer) and not float(temperature) > 0:
        raise ValueError(f"temperature must be > 0; got {temperature}.")
    student = jnp.moveaxis(student, axis, -1)
    teacher = jnp.moveaxis(teacher, axis, -1)
    if not (isinstance(temperature, (int, float)) and temperature == 1):
        # Both sides divided in their own dtype: equal logits stay bit-identical.
        temperature = jnp.asarray(temperature, student.dtype)
        student, teacher = student / temperature, teacher / temperature
    return student, teacher
