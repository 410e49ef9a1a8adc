"""Precision policies: which dtype holds the parameters, which one computes, and x64 scoping.

A name is one dtype for both ('bf16', 'fp16', 'fp32', 'fp64': training wholly in that
format, parameters and optimizer state included) or 'PARAM/COMPUTE' for mixed precision,
e.g. 'fp32/bf16' keeps float32 master parameters and runs the model in bfloat16. The fix
paper's bf16 results reproduce with 'fp32/bf16', not with 'bf16', whose parameter updates
round away at lr 1e-3 (see grokbench/recipes.py).

float64 needs JAX's x64 mode. `precision_scope` sets x64 inside the `with` block to
exactly what the policy needs: on for policies that use float64, off for the others. So
fp64 never leaks into the rest of the process, and a bf16/fp16/fp32 run computes the
same bits whatever x64 state its caller was in (JAX's default float stays float32).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from grokbench.errors import ConfigError

__all__ = ["dtype_names", "get_precision", "precision_scope"]

_DTYPES: dict[str, np.dtype] = {
    "bf16": np.dtype(jnp.bfloat16),
    "fp16": np.dtype(jnp.float16),
    "fp32": np.dtype(jnp.float32),
    "fp64": np.dtype(jnp.float64),
}
"""Short precision names and their dtypes."""

_LONG_NAMES: dict[str, str] = {dtype.name: short for short, dtype in _DTYPES.items()}
"""NumPy's names ('bfloat16', 'float32', ...) -> the short ones, which are canonical."""

_FLOAT8: dict[str, np.dtype] = {
    "e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
"""The float8 formats by short name: storage dtypes that `grokbench cliffs` and `grokbench
audit --dtypes` take (logits rounded to float8, the fixed functions' math in float32), never
a training precision. The other 8-bit formats (fnuz, e3m4, e8m0) are refused."""


def dtype_names(names: Sequence[str], default: Sequence[str] = tuple(_DTYPES)) -> list[str]:
    """NumPy's names of the float dtypes `names` (short, as in precision=bf16 or e4m3fn, or
    NumPy's); those of `default` when `names` is empty. ConfigError (one line, a ValueError)
    for any other name."""
    known = {**_DTYPES, **_FLOAT8}
    names = [known[n].name if n in known else n for n in names or default]
    allowed = [dtype.name for dtype in known.values()]
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        narrow = [n for n in unknown if n.startswith(("float8", "float6", "float4"))]
        refused = f" ({', '.join(narrow)}: only the OCP float8 formats)" if narrow else ""
        raise ConfigError(
            f"unknown dtype(s) {', '.join(unknown)}{refused}; choose from "
            f"{', '.join(allowed)} or {', '.join(known)}"
        )
    return names


@dataclasses.dataclass(frozen=True)
class Precision:
    """A precision policy: parameter dtype and compute dtype (separate on purpose)."""

    name: str = "fp32"  # the papers' default training precision
    param_dtype: np.dtype = _DTYPES["fp32"]  # dtype of parameters and optimizer state
    compute_dtype: np.dtype = _DTYPES["fp32"]  # dtype the model and loss run in

    @property
    def needs_x64(self) -> bool:
        """True when either dtype is float64."""
        return np.dtype(jnp.float64) in (self.param_dtype, self.compute_dtype)

    @property
    def matmul_precision(self) -> str:
        """The `jax.default_matmul_precision` the engine pins while tracing the model.

        'highest' when the compute dtype is float32 or float64: "fp32" then means fp32
        products on every backend (JAX's default computes float32 matmuls in TF32 on NVIDIA
        GPUs and in bf16 passes on TPUs; the CPU is exact either way). 'default' for bf16
        and fp16 compute, whose products are already in their own dtype.
        """
        wide = self.compute_dtype.itemsize >= 4
        return "highest" if wide else "default"

    def cast_to_param(self, tree: object) -> object:
        """Cast every floating leaf of `tree` to the parameter dtype."""
        return _cast_floats(tree, self.param_dtype)

    def cast_to_compute(self, tree: object) -> object:
        """Cast every floating leaf of `tree` to the compute dtype."""
        return _cast_floats(tree, self.compute_dtype)


def _cast_floats(tree: object, dtype: np.dtype) -> object:
    """Cast floating leaves only: integer tokens and labels pass through untouched."""

    def cast(x: jax.Array) -> jax.Array:
        return x.astype(dtype) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating) else x

    return jax.tree.map(cast, tree)


def get_precision(name: str | Precision) -> Precision:
    """Parse 'bf16' | 'fp16' | 'fp32' | 'fp64' or 'PARAM/COMPUTE' (e.g. 'fp32/bf16').

    NumPy's names ('bfloat16', 'float32/bfloat16') are accepted too; the policy's `name` is
    always the short form.
    """
    if isinstance(name, Precision):
        return name
    if not isinstance(name, str):
        raise TypeError(f"precision must be a name like 'fp32', got {type(name).__name__}")
    parts = [_LONG_NAMES.get(part, part) for part in name.split("/")]
    unknown = [part for part in parts if part not in _DTYPES]
    if len(parts) not in (1, 2) or unknown:
        raise ValueError(
            f"unknown precision {name!r}: expected one of {sorted(_DTYPES)} (or NumPy's "
            "names) or 'PARAM/COMPUTE' such as 'fp32/bf16'"
        )
    param, compute = parts if len(parts) == 2 else (parts[0], parts[0])
    canonical = param if param == compute else f"{param}/{compute}"
    return Precision(canonical, _DTYPES[param], _DTYPES[compute])


@contextlib.contextmanager
def precision_scope(name: str | Precision) -> Iterator[Precision]:
    """Yield the policy with x64 on inside the block iff the policy uses float64."""
    policy = get_precision(name)
    with jax.enable_x64(policy.needs_x64):
        yield policy
