"""Shared pieces of the models: dtype checks, float32-then-cast init, token checks."""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

Params = dict[str, jax.Array]
"""A model's parameters: a flat dict of named arrays (a pytree)."""

MODEL_DTYPES: tuple[np.dtype, ...] = (
    np.dtype(jnp.bfloat16),
    np.dtype(jnp.float16),
    np.dtype(jnp.float32),
    np.dtype(jnp.float64),
)
"""The parameter/compute dtypes the models support."""


def check_model_dtype(dtype: DTypeLike) -> np.dtype:
    """Return `dtype` as a numpy dtype; reject non-float dtypes and float64 without x64."""
    dt = np.dtype(dtype)
    if dt not in MODEL_DTYPES:
        raise ValueError(f"model dtype must be one of {[str(d) for d in MODEL_DTYPES]}, got {dt}")
    if dt == np.float64 and not jax.config.read("jax_enable_x64"):
        # Without x64, JAX would silently build float32 arrays instead (with a warning).
        raise ValueError("float64 parameters need x64: use `with jax.enable_x64(True):`")
    return dt


def normal_init(
    key: jax.Array, shapes: Mapping[str, tuple[int, ...]], stds: Mapping[str, float]
) -> dict[str, jax.Array]:
    """Draw each named array ~ N(0, std^2) in float32: slices of one draw, in sorted name order."""
    names = sorted(shapes)
    sizes = [math.prod(shapes[name]) for name in names]
    # One draw for all arrays: a single threefry call compiles far faster on CPU than one
    # per array. Drawing in float32 for every target dtype makes the same seed give the
    # same starting point in bf16/fp16/fp32/fp64 (fp64 holds the float32 draw exactly),
    # so runs across precisions differ only by the arithmetic, not by the draw.
    flat = jax.random.normal(key, (sum(sizes),), jnp.float32)
    out, start = {}, 0
    for name, size in zip(names, sizes, strict=True):
        chunk = flat[start : start + size].reshape(shapes[name])
        out[name] = chunk * np.float32(stds[name])
        start += size
    return out


def cast_params(params: Mapping[str, jax.Array], dtype: np.dtype) -> Params:
    """Cast every array to `dtype` (round-to-nearest from the float32 draw)."""
    return {name: jnp.asarray(x).astype(dtype) for name, x in params.items()}


def concrete_or_none(x: jax.Array | np.ndarray) -> np.ndarray | None:
    """`x` as a NumPy array when its value is known (not a tracer), else None."""
    return None if isinstance(x, jax.core.Tracer) else np.asarray(x)


def check_tokens(tokens_BxT: jax.Array | np.ndarray, seq_len: int, vocab_size: int) -> jax.Array:
    """Check tokens are an integer (B, seq_len) array; check the range when concrete."""
    if not hasattr(tokens_BxT, "dtype"):
        raise TypeError(f"tokens must be an array, got {type(tokens_BxT).__name__}")
    if not jnp.issubdtype(tokens_BxT.dtype, jnp.integer):
        raise TypeError(f"tokens must be integers, got {tokens_BxT.dtype}")
    if tokens_BxT.ndim != 2 or tokens_BxT.shape[1] != seq_len:
        raise ValueError(f"tokens must have shape (B, {seq_len}), got {tokens_BxT.shape}")
    # The check runs on host values (also for constants closed over by a jitted function);
    # on traced tokens it cannot run: out-of-range gathers then clamp (JAX's default).
    values = concrete_or_none(tokens_BxT)
    if values is not None and values.size:
        lo, hi = int(values.min()), int(values.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"tokens must lie in [0, {vocab_size}), got [{lo}, {hi}]")
    return jnp.asarray(tokens_BxT)
