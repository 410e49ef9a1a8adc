"""Calling the checked function: under `jit` and `vjp`, once on plain input to check its
signature, on each case (a raise is a finding, not a crash), and on NaN."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from numerics._check_tally import SignatureError, Tally
from numerics._cliffs import bits_type, first_zero, from_bits, to_bits

PAIR_KINDS = ("soft-target", "kl", "reverse-kl", "js")
"""The kinds called as fn(student_logits, teacher_logits) -> per-row losses."""

SINK_KINDS = ("sink-softmax", "sink-log_softmax")
"""The kinds called as fn(x, sink=s) -> x's shape: a softmax (log-softmax) with one more
logit s per row in its denominator. The checks hand them rows [x, s] of K + 1 logits: the
last column is the sink, and the gradient's last column is d/ds."""


def with_sink_column(fn: Callable) -> Callable:
    """fn(x, sink=s) as a function of the rows [x, s] (the sink last): `SINK_KINDS`."""
    return lambda rows: fn(rows[..., :-1], sink=rows[..., -1])


def value_and_grad_runner(fn: Callable, kind: str) -> Callable:
    """jit of (input, other) -> (output, gradient) for `kind`.

    ce and the student/teacher kinds (`PAIR_KINDS`): gradient of the summed loss with
    respect to the first argument; softmax / log_softmax: the vector-Jacobian product
    with the cotangent `other`; the sink kinds (`SINK_KINDS`) take rows [x, s] and give
    the gradient with respect to both.
    """
    if kind in ("ce", *PAIR_KINDS):

        def run(x, other):
            out, vjp = jax.vjp(lambda x: fn(x, other), x)
            return out, vjp(jnp.ones_like(out))[0]

    else:
        fn = with_sink_column(fn) if kind in SINK_KINDS else fn

        def run(x, cotangent):
            out, vjp = jax.vjp(fn, x)
            return out, vjp(cotangent.astype(out.dtype))[0]

    return jax.jit(run)


def fn_name(fn: Callable) -> str:
    """The name a failure line gives `fn`."""
    return getattr(fn, "__qualname__", None) or repr(fn)


def probe_signature(fn: Callable, run: Callable, kind: str, dtype: np.dtype) -> np.dtype:
    """Call once on plain input; SignatureError unless it works and has the right shape."""
    z = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -1.0]], dtype)
    if kind == "ce":
        other, call = np.array([2, 0], np.int32), "(logits, labels)"
    elif kind in PAIR_KINDS:
        other, call = z[:, ::-1].copy(), "(student_logits, teacher_logits)"
    elif kind in SINK_KINDS:  # rows [x, s]: x of shape (2, 2), the sink (2,)
        other, call = np.eye(2, dtype=dtype)[[1, 0]], "(x, sink=s)"
    else:
        other, call = np.eye(3, dtype=dtype)[[2, 0]], "(x)"
    shape = "x of shape (2, 2) and s of shape (2,)" if kind in SINK_KINDS else "shape (2, 3)"
    try:
        out, _ = run(z, other)
    except Exception as err:  # any failure on plain input means we cannot check it
        message = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        raise SignatureError(
            f"calling {fn_name(fn)}{call} with {dtype.name} arrays of {shape} raised {message}"
        ) from err
    expected = (2,) if kind in ("ce", *PAIR_KINDS) else (2, 2) if kind in SINK_KINDS else (2, 3)
    if out.shape != expected:
        raise SignatureError(
            f"{fn_name(fn)}{call} on {shape} returned shape {out.shape}; a {kind} function "
            f"must return {expected} (per-row losses, class axis last)"
        )
    return np.dtype(out.dtype)


def run_or_fail(tally: Tally, run: Callable, what: str, *args):
    """run(*args) as NumPy arrays, or None after recording a failure if it raises."""
    try:
        return tuple(np.asarray(a) for a in run(*args))
    except Exception as err:  # a function may reject some hard cases: that is a finding
        first = str(err).splitlines()[0] if str(err) else ""
        tally.fail(f"raises {what}", f"raises {type(err).__name__} on {what}: {first}")
        return None


SCAN_LIMIT = 1 << 18
"""Brackets of at most this many representable margins are searched value by value."""

QUIET = 1 << 17
"""Above a final zero run's first sweep point every representable margin is evaluated up to
this many past the last nonzero one found (all of bf16 and fp16; float32 at m = 18: 0.25)."""


class Zeros(NamedTuple):
    """Where a function of the margin sweep is 0 though its exact value is normal."""

    start: float  # the first margin of the zero run reported, exact to the representable
    for_good: bool  # 0 from `start` to the sweep's end (checked as `spurious_zeros` says)
    again: float | None  # not for good: the first sweep margin above `start` where it is not
    lowest: float | None  # a lower margin where it was 0 already (scattered zeros), if seen


def spurious_zeros(dtype, computed, exact, m, at_margins) -> Zeros | None:
    """Where `computed` is 0 though |exact| is a normal number; None if nowhere.

    The run reported is the final one if `computed` is 0 from some margin to the sweep's
    end (`for_good`), else the one holding the sweep's first spurious zero (it is nonzero
    again from `again` at the latest). A gradient need not turn 0 once and stay 0: where
    XLA fuses a multiply and a subtract (fused multiply-add), a shifted logit can be a
    rounding residual instead of 0, and the softmax rounds to 1 at some margins and not
    at their neighbours, up to where it does at all of them; a z-loss gradient is 0 over
    a window and then grows again. So the run's start is not found by a bisection for
    the first zero, which can land on a scattered one: below the sweep's first point of
    the run, back to the sweep's point before it, every representable margin is
    evaluated where there are at most `SCAN_LIMIT` (float8, bf16, fp16, and float32's
    quick brackets), and otherwise a bisection is followed by probes above the zero it
    found, again until no probe is nonzero. A final run is checked above that point too,
    every representable margin until `QUIET` in a row give 0 (float64: a sliver), and
    beyond at the sweep's margins: nonzero margins between the sweep's points move its
    start up. Every call uses the sweep's own shape, so the program is the sweep's.

    Args:
      dtype: the margins' dtype.
      computed, exact: the function's values over the sweep `m`, and the exact ones.
      m: the sweep's margins, ascending.
      at_margins: 1-D margins of `dtype` -> the function's values there (1-D).
    """
    dtype = np.dtype(dtype)
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    computed = np.asarray(computed, np.float64)
    normal = np.abs(np.asarray(exact).astype(np.float64)) >= tiny
    dead = (computed == 0) & normal
    if not dead.any():
        return None
    live = np.flatnonzero((computed != 0) & normal)
    first = int(np.flatnonzero(dead)[0])
    final = np.flatnonzero(dead & (np.arange(len(m)) > (live[-1] if len(live) else -1)))
    i = int(final[0]) if len(final) else first
    again = None if len(final) else float(m[live[live > i][0]])
    lowest = float(m[first]) if first < i else None
    if i == 0 or m[i - 1] <= 0:
        return Zeros(float(m[i]), again is None, again, lowest)
    below = live[live < i]
    lo = float(m[below[-1]]) if len(below) else float(m[i - 1])
    low, high = to_bits(lo, dtype), to_bits(m[i], dtype)
    start, seen = _run_start(dtype, low, high, at_margins, len(m))
    if again is None:  # a final run: nonzero margins between the sweep's points above it?
        top = to_bits(m[np.flatnonzero(normal)[-1]], dtype)
        last = _last_nonzero(dtype, high, top, at_margins, len(m))
        if last is not None:
            seen, start = start, last + 1
    start, seen = from_bits(start, dtype), None if seen is None else from_bits(seen, dtype)
    if seen is not None and seen < start:
        lowest = seen if lowest is None else min(lowest, seen)
    return Zeros(start, again is None, again, lowest)


def _values_at(at_margins, bits: np.ndarray, dtype, batch: int) -> np.ndarray:
    """`at_margins` at the margins whose bit patterns are `bits` (at most `batch`), padded
    to the sweep's shape `batch`: XLA may compile another shape to other roundings (bf16
    `jax.nn.log_softmax` at 65,536 rows is nonzero at m = 5.625, at 597 rows 0)."""
    padded = np.concatenate([bits, np.full(batch - len(bits), bits[-1], bits.dtype)])
    out = at_margins(padded.astype(bits_type(dtype)).view(dtype))
    return np.asarray(out, np.float64)[: len(bits)]


def _last_nonzero(dtype, low: int, high: int, at_margins, batch: int) -> int | None:
    """The largest bit pattern in (low, high] where `at_margins` is not 0, searched upward
    until `QUIET` representable margins in a row give 0; None if none does."""
    last, at = None, low
    while at < high and at - (low if last is None else last) < QUIET:
        bits = np.arange(at + 1, min(at + batch, high) + 1, dtype=np.uint64)
        nonzero = np.flatnonzero(_values_at(at_margins, bits, dtype, batch) != 0)
        if len(nonzero):
            last = int(bits[nonzero[-1]])
        at = int(bits[-1])
    return last


def _run_start(dtype, low: int, high: int, at_margins, batch: int) -> tuple[int, int | None]:
    """Where the run of zeros holding the bit pattern `high` starts, `at_margins` nonzero at
    `low`; and the lowest zero seen below it (bit patterns)."""
    if high - low <= SCAN_LIMIT:
        top = high
        while top > low:  # from the top down: the run starts after the first nonzero
            bits = np.arange(max(low + 1, top - batch + 1), top + 1, dtype=np.uint64)
            got = _values_at(at_margins, bits, dtype, batch)
            nonzero = np.flatnonzero(got != 0)
            if len(nonzero):
                below = bits[: nonzero[-1]][got[: nonzero[-1]] == 0]
                return int(bits[nonzero[-1]]) + 1, int(below[0]) if len(below) else None
            top = int(bits[0]) - 1
        return low + 1, None

    def single(v):
        bits = np.asarray(v).view(bits_type(dtype)).astype(np.uint64)
        return _values_at(at_margins, bits, dtype, batch)[0]

    seen, lo = None, from_bits(low, dtype)
    for _ in range(64):
        start = to_bits(first_zero(single, lo, from_bits(high, dtype), dtype), dtype)
        near = np.arange(start + 1, min(start + batch // 2, high) + 1, dtype=np.uint64)
        spread = np.linspace(start + 1, high, max(batch - len(near), 1))
        spread = np.minimum(spread.astype(np.uint64), np.uint64(high))
        probes = np.unique(np.concatenate([near, spread]))
        got = _values_at(at_margins, probes, dtype, batch) if len(probes) else np.zeros(0)
        nonzero = np.flatnonzero(got != 0)
        if not len(nonzero):
            break
        seen = start if seen is None else min(seen, start)
        lo = from_bits(probes[nonzero[-1]], dtype)
    return start, seen


def nan_propagation(tally, run, kind, dtype) -> bool:
    """A row holding a NaN must give NaN; records a failure if it gives a finite number."""
    z = np.array([[np.nan, 0.0, 1.0]], dtype)
    if kind == "ce":
        other = np.array([1], np.int32)
    elif kind in PAIR_KINDS:
        other = np.array([[0.0, 0.0, 1.0]], dtype)
    else:
        other = np.eye(3 - (kind in SINK_KINDS), dtype=dtype)[:1]
    got = run_or_fail(tally, run, "a row holding NaN", z, other)
    if got is None:
        return False
    propagates = bool(np.isnan(got[0].astype(np.float64)).any())
    if not propagates:
        tally.fail("NaN", f"NaN: logits [nan, 0, 1] give the finite {got[0].tolist()}, not NaN")
    return propagates
