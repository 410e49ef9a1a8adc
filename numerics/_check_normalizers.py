"""The checks of softmax and log-softmax, plain and with a sink logit: both on the margin
sweep and random rows."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from numerics import _check_calls as calls
from numerics import _check_cases as cases
from numerics import oracle
from numerics._check_tally import CheckResult, Tally, fail_zero_from
from numerics._check_tolerances import (
    ULPS,
    as_dtype,
    conditioned_bound,
    finite_gaps,
    weighted_gap,
)


def _sink_references(log: bool):
    """The oracle of the sink kinds on rows [x, s] (the sink last): (value, vjp), the vjp's
    last column d/ds."""
    value = oracle.sink_log_softmax if log else oracle.sink_softmax
    vjp = oracle.sink_log_softmax_vjp if log else oracle.sink_softmax_vjp

    def reference(rows, exact=False):
        return value(rows[:, :-1], rows[:, -1], exact=exact)

    def reference_vjp(rows, cotangent, exact=False):
        grad_x, grad_s = vjp(rows[:, :-1], rows[:, -1], cotangent, exact=exact)
        return np.concatenate([grad_x, np.asarray(grad_s)[:, None]], -1)

    return reference, reference_vjp


def _check_normalizer(fn, dtype, kind, max_ulps, quick) -> CheckResult:
    """`check_softmax`, `check_log_softmax` and their sink forms: `kind` picks the oracle.

    The sink kinds run on rows [x, s] of K + 1 logits, the last the sink (`calls.SINK_KINDS`):
    the margin sweep's [m, 0] is softmax off by one of the row [m], and the random rows'
    last logit is the sink, which may be the max, tie with it or sit far below.
    """
    dtype = as_dtype(dtype)
    sink = kind in calls.SINK_KINDS
    log = kind in ("log_softmax", "sink-log_softmax")
    reference = oracle.log_softmax if log else oracle.softmax
    reference_vjp = oracle.log_softmax_vjp if log else oracle.softmax_vjp
    if sink:
        reference, reference_vjp = _sink_references(log)
    outputs = 1 if sink else 2  # entries of the sweep's output: [m] or [m, 0]
    tally = Tally(kind, dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["autodiff_grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    with jax.enable_x64(dtype == np.float64):
        run = calls.value_and_grad_runner(fn, kind)
        out_dtype = calls.probe_signature(fn, run, kind, dtype)
        m = cases.margin_sweep(dtype, quick)
        x = np.stack([m, np.zeros_like(m)], -1)
        cotangent = np.broadcast_to(np.array([1, 0][:outputs], dtype), (len(m), outputs))
        dies = zero = None
        got = calls.run_or_fail(tally, run, "the margin sweep", x, cotangent)
        if got is not None:
            out, grad = got
            exact = reference(x, exact=True)
            exact_grad = reference_vjp(x, cotangent, exact=True)

            def name_margin(r, j=None):
                entry = "" if j is None else f", entry {int(j)}"
                row = "x = [m], sink 0" if sink else "x = [m, 0]"
                return f"m={float(m[r]):.8g} ({row}{entry})"

            tally.rows += len(m)
            tally.compare(f"{kind}", "value", out, exact, value, x, name_margin)
            for j in range(2):
                what = f"d {kind}[0] / " + ("dsink" if sink and j == 1 else f"dx{j}")
                tally.compare(what, "grad", grad[:, j], exact_grad[:, j], grad_base, x, name_margin)
            tally.grad_sums(grad, np.full(len(m), grad_base), name_margin)

            def at_margins(mi):  # (output, gradient) at x = [m, 0], cotangent [1, 0]
                one = np.zeros((len(mi), outputs), dtype)
                one[:, 0] = 1
                return run(np.stack([mi, np.zeros_like(mi)], -1), one)

            found = {
                f"d {kind}[0] / dx0": calls.spurious_zeros(
                    dtype, grad[:, 0], exact_grad[:, 0], m, lambda v: at_margins(v)[1][:, 0]
                )
            }
            if log:
                found[f"{kind}[0]"] = calls.spurious_zeros(
                    dtype, out[:, 0], exact[:, 0], m, lambda v: at_margins(v)[0][:, 0]
                )
            for what, zeros in found.items():
                if zeros is None:
                    continue
                where = np.array([[zeros.start, 0.0]])
                if what.startswith("d "):
                    exact_at = reference_vjp(where, np.array([[1.0, 0.0][:outputs]]))[0, 0]
                else:
                    exact_at = reference(where)[0, 0]
                fail_zero_from(tally, what, zeros, exact_at)
            starts = [None if z is None else z.start for z in found.values()]
            dies, zero = starts[0], (starts[1] if log else None)
        for case in cases.random_cases(quick, dtype=dtype):
            x, _ = cases.plant_rows(case, dtype, 2, seed=1)
            k = case[0]
            if sink and k < 2:
                continue
            out_k = k - 1 if sink else k  # the sink kinds: rows [x, s], outputs for x
            cotangent = (np.arange(out_k) == np.argmax(x[:, :out_k], -1)[:, None]).astype(dtype)
            got = calls.run_or_fail(tally, run, cases.describe_case(case), x, cotangent)
            if got is None:
                continue
            gaps = finite_gaps(x)
            if log:  # log q_k = -gap_k - log1p(S - 1): the sum's conditioning
                is_max = np.arange(k) == np.argmax(x, -1)[:, None]
                gaps = np.broadcast_to(weighted_gap(gaps, is_max)[:, None], gaps.shape)
            tally.rows += len(x)
            # With a sink, its term is added to each of the row's sums after them: one more
            # rounding, log2(2 k) = 1 + log2(k).
            bound = conditioned_bound(value, gaps[:, :out_k], 2 * k if sink else k)
            tally.compare(
                kind,
                "value",
                got[0],
                reference(x, exact=True),
                bound,
                x,
                cases.case_element_namer(case),
            )
        nan = calls.nan_propagation(tally, run, kind, dtype)
    return tally.result(
        grad_dies_at=dies,
        value_zero_at=zero,
        zero_at_teacher=None,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )


def check_log_softmax(fn: Callable, dtype, *, max_ulps: float | None = None, quick: bool = False):
    """Check a log-softmax `fn(x) -> log q` (class axis last) against mpmath.

    As `check_cross_entropy`, on x = [m, 0] (values of both entries, and the gradient of
    entry 0, within `ULPS['value']` and `ULPS['autodiff_grad']`) and on random rows
    (values). Entry 0 (the log-probability of the max) must not round to 0 while the
    exact value is a normal number, and its gradient must not die at the cliff.

    Example:
      >>> import jax
      >>> check_log_softmax(jax.nn.log_softmax, "fp16", quick=True).value_zero_at  # the cliff
      7.625

    Args:
      fn: the function, called as fn(x_NxK) under `jax.jit` and `jax.vjp`.
      dtype: as `check_cross_entropy`.
      max_ulps: replaces the table's bounds.
      quick: fewer margins, K up to 100.

    Returns:
      A `CheckResult`.

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    return _check_normalizer(fn, dtype, "log_softmax", max_ulps, quick)


def check_softmax(fn: Callable, dtype, *, max_ulps: float | None = None, quick: bool = False):
    """Check a softmax `fn(x) -> q` (class axis last) against mpmath.

    As `check_log_softmax`; the collapse shows in the gradient of the dominant
    probability, q_0 (1 - q_0), which standard softmax rounds to 0 past the cliff.

    Example:
      >>> import numerics
      >>> check_softmax(numerics.softmax, "fp32", quick=True).grad_dies_at is None
      True

    Args:
      fn: the function, called as fn(x_NxK) under `jax.jit` and `jax.vjp`.
      dtype: as `check_cross_entropy`.
      max_ulps: replaces the table's bounds.
      quick: fewer margins, K up to 100.

    Returns:
      A `CheckResult`.

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    return _check_normalizer(fn, dtype, "softmax", max_ulps, quick)


def check_sink_softmax(fn: Callable, dtype, *, max_ulps: float | None = None, quick: bool = False):
    """Check a sink softmax `fn(x, sink=s) -> p` against mpmath: p_k = e^x_k / (e^s +
    sum_j e^x_j), s one logit per row (shape (N,) for x of shape (N, K)), its mass dropped.

    As `check_softmax`, on rows [x, s]: the margin sweep is softmax off by one of [m]
    (x = [m], s = 0; values, d p / dm and d p / ds within the table), the random rows'
    last logit is the sink. The collapse shows in d p / dm = p P_sink, which a standard
    formula rounds to 0 past the cliff of the margin to the sink while d p / ds = -p P_sink
    stays: its gradients no longer sum to zero.

    Example:
      >>> import numerics
      >>> check_sink_softmax(numerics.softmax, "bf16", quick=True).ok
      True

    Args:
      fn: the function, called as fn(x_NxK, sink=s_N) under `jax.jit` and `jax.vjp`.
      dtype: as `check_cross_entropy`; the sink has the logits' dtype.
      max_ulps: replaces the table's bounds.
      quick: fewer margins, K up to 100.

    Returns:
      A `CheckResult` (its gradient errors include d/ds).

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    return _check_normalizer(fn, dtype, "sink-softmax", max_ulps, quick)


def check_sink_log_softmax(
    fn: Callable, dtype, *, max_ulps: float | None = None, quick: bool = False
):
    """Check a sink log-softmax `fn(x, sink=s) -> log p` against mpmath, as
    `check_sink_softmax`: log p_m = -log1p(e^-m) of softmax off by one must not round to 0
    while it is a normal number, nor d log p / dm = P_sink die at the cliff.

    Args:
      fn: the function, called as fn(x_NxK, sink=s_N) under `jax.jit` and `jax.vjp`.
      dtype: as `check_cross_entropy`.
      max_ulps: replaces the table's bounds.
      quick: fewer margins, K up to 100.

    Returns:
      A `CheckResult`.

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    return _check_normalizer(fn, dtype, "sink-log_softmax", max_ulps, quick)
