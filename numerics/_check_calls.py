"""Calling the checked function: under `jit` and `vjp`, once on plain input to check its
signature, on each case (a raise is a finding, not a crash), and on NaN."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from numerics._check_tally import SignatureError, Tally
from numerics._cliffs import first_zero

PAIR_KINDS = ("soft-target", "kl", "reverse-kl", "js")
"""The kinds called as fn(student_logits, teacher_logits) -> per-row losses."""


def value_and_grad_runner(fn: Callable, kind: str) -> Callable:
    """jit of (input, other) -> (output, gradient) for `kind`.

    ce and the student/teacher kinds (`PAIR_KINDS`): gradient of the summed loss with
    respect to the first argument; softmax / log_softmax: the vector-Jacobian product
    with the cotangent `other`.
    """
    if kind in ("ce", *PAIR_KINDS):

        def run(x, other):
            out, vjp = jax.vjp(lambda x: fn(x, other), x)
            return out, vjp(jnp.ones_like(out))[0]

    else:

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
    else:
        other, call = np.eye(3, dtype=dtype)[[2, 0]], "(x)"
    try:
        out, _ = run(z, other)
    except Exception as err:  # any failure on plain input means we cannot check it
        message = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        raise SignatureError(
            f"calling {fn_name(fn)}{call} with {dtype.name} arrays of shape (2, 3) raised {message}"
        ) from err
    expected = (2,) if kind in ("ce", *PAIR_KINDS) else (2, 3)
    if out.shape != expected:
        raise SignatureError(
            f"{fn_name(fn)}{call} on shape (2, 3) returned shape {out.shape}; a {kind} function "
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


def first_spurious_zero(tally, computed, exact, m, at_margin) -> float | None:
    """First margin in `m` where `computed` is 0 though |exact| is a normal number,
    refined to the exact representable margin by bisection on bit patterns
    (`at_margin(m)` evaluates one margin); None if there is none."""
    tiny = float(ml_dtypes.finfo(tally.dtype).smallest_normal)
    dead = (np.asarray(computed, np.float64) == 0) & (
        np.abs(np.asarray(exact).astype(np.float64)) >= tiny
    )
    if not dead.any():
        return None
    i = int(np.flatnonzero(dead)[0])
    if i == 0 or m[i - 1] <= 0:
        return float(m[i])
    return first_zero(at_margin, float(m[i - 1]), float(m[i]), tally.dtype)


def nan_propagation(tally, run, kind, dtype) -> bool:
    """A row holding a NaN must give NaN; records a failure if it gives a finite number."""
    z = np.array([[np.nan, 0.0, 1.0]], dtype)
    if kind == "ce":
        other = np.array([1], np.int32)
    elif kind in PAIR_KINDS:
        other = np.array([[0.0, 0.0, 1.0]], dtype)
    else:
        other = np.eye(3, dtype=dtype)[:1]
    got = run_or_fail(tally, run, "a row holding NaN", z, other)
    if got is None:
        return False
    propagates = bool(np.isnan(got[0].astype(np.float64)).any())
    if not propagates:
        tally.fail("NaN", f"NaN: logits [nan, 0, 1] give the finite {got[0].tolist()}, not NaN")
    return propagates
