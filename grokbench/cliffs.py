"""Measure, per float dtype, where standard and fixed cross-entropy break."""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import numerics
from numerics import standard

__all__ = ["DEFAULT_DTYPES", "DTYPES", "measure", "report"]

DTYPES = ("bfloat16", "float16", "float32", "float64")
"""The arithmetic dtypes `measure` takes (NumPy names); the float8 formats follow them."""

_FLOAT8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
"""Storage formats: the fixed loss computes in float32 and rounds once to float8; the
standard one computes as JAX does on CPU, each operation in float16 rounded to float8."""

DEFAULT_DTYPES = DTYPES + _FLOAT8_DTYPES
"""What `grokbench cliffs` measures when given no dtype."""


@dataclasses.dataclass(frozen=True)
class _CliffRow:
    """Where cross-entropy on logits [m, 0] (target 0) breaks in one dtype."""

    dtype: str
    significand_bits: int
    cliff: float  # precision_cliff(dtype) = p ln 2
    standard_grad_zero_from: float  # first m whose standard target gradient is exactly 0
    standard_loss_zero_from: float  # first m whose standard loss is exactly 0
    fixed_grad_zero_from: float  # first m whose fixed target gradient underflows to 0
    fixed_grad_at_cliff: float  # fixed target gradient at the first m >= cliff
    true_grad_at_cliff: float  # mpmath value there


def _target_grad(loss_fn: Callable) -> Callable:
    def grad_t(m):
        logits = jnp.stack([m, jnp.zeros_like(m)], axis=-1)
        labels = jnp.zeros(m.shape, jnp.int32)
        return jax.vmap(jax.grad(loss_fn))(logits, labels)[..., 0]

    return jax.jit(grad_t)


def _loss(loss_fn: Callable) -> Callable:
    def loss(m):
        logits = jnp.stack([m, jnp.zeros_like(m)], axis=-1)
        return loss_fn(logits, jnp.zeros(m.shape, jnp.int32))

    return jax.jit(loss)


def _first_zero_from(fn: Callable, dtype: np.dtype, hi: float) -> float:
    """Smallest positive m of `dtype` in (0, hi] with fn(m) == 0 for all m' >= m
    (`numerics.first_zero`); inf if fn(hi) != 0."""
    if fn(jnp.asarray(np.array(hi, dtype)[None]))[0] != 0:
        return float("inf")
    # fn(0) != 0 for every function here.
    return numerics.first_zero(lambda m: fn(jnp.asarray(m))[0], 0.0, hi, dtype)


def measure(dtype_name: str) -> _CliffRow:
    """Measure one dtype's row (enables x64 only for the duration, when needed)."""
    dtype = np.dtype(dtype_name)
    with jax.enable_x64(dtype == np.float64):
        cliff = numerics.precision_cliff(dtype)
        hi = 4.0 * float(-np.log(float(ml_dtypes.finfo(dtype).smallest_subnormal)))
        hi = min(hi, float(ml_dtypes.finfo(dtype).max) / 2)
        std_grad = _target_grad(standard.cross_entropy)
        fixed_grad = _target_grad(numerics.cross_entropy)
        # jax.nn shifts by 0 where its max is not finite, as in float8_e4m3fn, which cannot
        # hold its -inf start: then e^m overflows past log(max). The standard loss collapses
        # far below that in every dtype; its search stays there.
        std_hi = min(hi, math.log(float(ml_dtypes.finfo(dtype).max)))
        std_zero = _first_zero_from(std_grad, dtype, std_hi)
        loss_zero = _first_zero_from(_loss(standard.cross_entropy), dtype, std_hi)
        fixed_zero = _first_zero_from(fixed_grad, dtype, hi)
        at_cliff = np.array([cliff], dtype)
        if float(at_cliff[0]) < cliff:  # towards max, not inf: e4m3fn has no inf
            at_cliff = np.nextafter(at_cliff, np.array(ml_dtypes.finfo(dtype).max, dtype))
        fixed_at = float(fixed_grad(jnp.asarray(at_cliff))[0])
    true_at = float(
        numerics.oracle.cross_entropy_grad(
            np.stack([at_cliff.astype(np.float64), np.zeros(1)], -1), np.zeros(1, int)
        )[0, 0]
    )
    return _CliffRow(
        dtype=dtype_name,
        significand_bits=ml_dtypes.finfo(dtype).nmant + 1,
        cliff=cliff,
        standard_grad_zero_from=std_zero,
        standard_loss_zero_from=loss_zero,
        fixed_grad_zero_from=fixed_zero,
        fixed_grad_at_cliff=fixed_at,
        true_grad_at_cliff=true_at,
    )


def _format_table(rows: list[_CliffRow]) -> str:
    """Render rows as a fixed-width text table, columns two spaces apart."""
    header = [
        "dtype",
        "p",
        "cliff p*ln2",
        "std g_t=0 from",
        "std loss=0 from",
        "fixed g_t=0 from",
        "fixed g_t at cliff",
        "mpmath g_t",
    ]
    cells = [
        [
            r.dtype,
            str(r.significand_bits),
            f"{r.cliff:.4f}",
            f"{r.standard_grad_zero_from:.6g}",
            f"{r.standard_loss_zero_from:.6g}",
            f"{r.fixed_grad_zero_from:.6g}",
            f"{r.fixed_grad_at_cliff:.4e}",
            f"{r.true_grad_at_cliff:.4e}",
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]

    def line(values: list[str]) -> str:  # the dtype left-aligned, numbers right-aligned
        first, *rest = values
        padded = [v.rjust(w) for v, w in zip(rest, widths[1:], strict=True)]
        return "  ".join([first.ljust(widths[0]), *padded])

    lines = [line(header), "-" * len(line(header)), *(line(c) for c in cells)]
    notes = [_float8_note(r) for r in rows if r.dtype in _FLOAT8_DTYPES]
    return "\n".join(lines + ([""] + [n for n in notes if n] if any(notes) else []))


def _float8_note(row: _CliffRow) -> str:
    """What a float8 row means: storage, and the standard loss as JAX computes it."""
    never = ""
    if math.isinf(row.standard_grad_zero_from):
        never = (
            "; it has no -inf for jax.nn's max to start from, so the standard loss shifts by 0: "
            "its target gradient is rounding noise that never stays 0 (inf), NaN past log(max)"
        )
    text = (
        f"{row.dtype}: logits stored in float8; fixed computes in float32, standard in "
        f"float16 rounded to float8 after every operation{never}."
    )
    return textwrap.fill(text, width=90, subsequent_indent="  ")


def report(names: Sequence[str], as_json: bool = False) -> str:
    """`grokbench cliffs`: `measure` each dtype of `names` (NumPy's names), as a table with
    its explanation, or as JSON."""
    rows = [measure(name) for name in names]
    if as_json:
        return json.dumps([dataclasses.asdict(r) for r in rows], indent=2)
    return "\n".join(
        [
            "Cross-entropy on logits [m, 0] with target 0, for every representable m > 0:",
            _format_table(rows),
            "\nstd: numerics.standard (as optax); fixed: numerics.cross_entropy. The fixed",
            "target gradient reaches 0 only where exp(-m) itself underflows.",
        ]
    )
