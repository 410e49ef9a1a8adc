"""The check of integer-label cross-entropy, with its options and fused with a linear layer."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from numerics import _check_calls as calls
from numerics import _check_cases as cases
from numerics import oracle
from numerics._check_tally import CheckResult, Tally, fail_zero_from
from numerics._check_tolerances import (
    OPTION_ULPS,
    OPTIONS,
    ULPS,
    as_dtype,
    conditioned_bound,
    errors_in_ulps_of,
    finite_gaps,
    option_conditioning,
    weighted_gap,
)
from numerics._cliffs import precision_cliff


def _capped_cliff(dtype, cap) -> str:
    """Where the cliff of the capped logits sits in the raw margin, for the cliff line."""
    if cap is None:
        return ""
    cliff = precision_cliff(dtype)
    if cliff >= cap:
        return f"; with soft_cap {cap:g} the capped margin never reaches it on [m, 0]"
    return f" of the capped logits, m = {cap * math.atanh(cliff / cap):.6g} before the cap"


def check_cross_entropy(
    fn: Callable,
    dtype,
    *,
    max_ulps: float | None = None,
    quick: bool = False,
    reference: Callable | None = None,
    z_loss: float = 0.0,
    soft_cap: float | None = None,
    label_smoothing: float = 0.0,
    max_k: int = 50_000,
    kind: str = "ce",
) -> CheckResult:
    """Check an integer-label cross-entropy `fn(logits, labels) -> losses` against mpmath.

    Inputs: logits [m, 0] with label 0 for every ulp around `precision_cliff(dtype)` and a
    dense grid of m from -40 to past exponent underflow; random rows (K from 2
    to 50,000, scales 1e-3 to 10, logits near 1e4, ties, near-ties, -inf classes); a
    row holding NaN. Loss and gradient (of the summed loss) are compared in ulps: within
    `ULPS` (or `max_ulps`) on the margin sweep, plus `general_bound`'s conditioning on
    random rows. The target gradient must not be 0 where the exact one is a normal
    number, the gradients must sum to zero within rounding, a NaN must give NaN and
    finite logits a finite loss.

    With `z_loss`, `soft_cap` or `label_smoothing`, `fn` is checked as a cross-entropy
    with those options (the semantics of `numerics.cross_entropy`; `fn` applies them
    itself): the bounds grow by `OPTION_ULPS`, gradients are measured in ulps of the
    terms they are formed from, and the zero-sum check is skipped where the option
    breaks it (z-loss: the gradients sum to 2 w lse; a cap scales each by sech^2).

    Example:
      >>> import numerics
      >>> check_cross_entropy(numerics.cross_entropy, "bf16", quick=True).assert_ok()

    Args:
      fn: the function; called as fn(logits_NxK, labels_N), under `jax.jit` and `jax.vjp`.
      dtype: 'bf16', 'fp16', 'fp32', 'fp64', or NumPy's names and dtypes. float64 runs
        with x64 enabled for the duration.
      max_ulps: replaces the table's bound (the conditioning of random rows stays).
      quick: fewer margins, K up to 100: about a second per dtype.
      reference: the exact (loss, grad) function, `oracle.cross_entropy_value_and_grad`
        by default (e.g. `oracle.stablemax_cross_entropy_value_and_grad` for StableMax).
      z_loss, soft_cap, label_smoothing: the options `fn` computes (see `OPTIONS`).
      max_k: the largest K of the random rows.
      kind: the name the result carries.

    Returns:
      A `CheckResult`; `.assert_ok()` raises AssertionError listing every failure.

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    dtype = as_dtype(dtype)
    options = {
        name: v
        for name, v, off in (
            ("z_loss", z_loss, 0.0),
            ("soft_cap", soft_cap, None),
            ("label_smoothing", label_smoothing, 0.0),
        )
        if v != off
    }
    reference = reference or functools.partial(oracle.cross_entropy_value_and_grad, **options)
    tally = Tally(kind, dtype)
    value, grad = ULPS["value"][dtype], ULPS["grad"][dtype]
    if options:
        value, grad = value + OPTION_ULPS["value"], grad + OPTION_ULPS["grad"]
    if max_ulps is not None:
        value = grad = float(max_ulps)
    bounds = _Bounds(dtype, value, grad, options)
    with jax.enable_x64(dtype == np.float64):
        run = calls.value_and_grad_runner(fn, "ce")
        out_dtype = calls.probe_signature(fn, run, "ce", dtype)
        dies, zero = _check_margin_sweep(tally, run, reference, bounds, quick)
        _check_random_rows(tally, run, reference, bounds, quick, max_k, kind)
        nan = calls.nan_propagation(tally, run, "ce", dtype)
    return tally.result(
        grad_dies_at=dies,
        value_zero_at=zero,
        zero_at_teacher=None,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )


@dataclasses.dataclass(frozen=True)
class _Bounds:
    """A check's dtype, its ulp bounds (value, gradient) and the options `fn` computes."""

    dtype: np.dtype
    value: float
    grad: float
    options: dict

    @property
    def zero_sum(self) -> bool:
        """Whether the gradients must sum to zero (z-loss and a cap break it)."""
        return not ({"z_loss", "soft_cap"} & set(self.options))

    def grad_errors(self, z, labels, grad, exact_grad):
        """(value conditioning (rows,), gradient conditioning (rows, K), gradient errors,
        scale) for the options; zeros and None without options."""
        if not self.options:
            return 0.0, 0.0, None, None
        conditioning, grad_conditioning, scale = option_conditioning(z, labels, **self.options)
        err = errors_in_ulps_of(grad, exact_grad, scale, self.dtype)
        return conditioning, grad_conditioning, err, scale


def _value_name(kind: str) -> str:
    """What failure lines call the checked value: the loss, or -log_prob for a log-prob
    (checked as the cross-entropy -fn)."""
    return "-log_prob" if kind == "log-prob" else "loss"


def _check_margin_sweep(tally, run, reference, b: _Bounds, quick: bool):
    """Logits [m, 0], label 0, over the margin sweep: loss and both gradients in ulps, the
    zero sum, and where the target gradient and the loss first turn 0 spuriously.
    Returns (gradient's first spurious zero, loss's), None where there is none."""
    dtype, soft_cap = b.dtype, b.options.get("soft_cap")
    m = cases.margin_sweep(dtype, quick)
    z = np.stack([m, np.zeros_like(m)], -1)
    labels = np.zeros(len(m), np.int32)
    got = calls.run_or_fail(tally, run, "the margin sweep", z, labels)
    if got is None:
        return None, None
    loss, grad = got
    exact_loss, exact_grad = reference(z, labels, exact=True)
    cond, grad_cond, err, scale = b.grad_errors(z, labels, grad, exact_grad)

    def name_margin(r, *_):
        return f"m={float(m[r]):.8g} (logits [m, 0], label 0)"

    value_name = _value_name(tally.kind)
    tally.rows += len(m)
    tally.compare(value_name, "value", loss, exact_loss, b.value + cond, z, name_margin)
    for j, what in enumerate(("target gradient", "other gradient")):
        bound = b.grad + (0.0 if err is None else grad_cond[:, j])
        tally.compare(
            what,
            "grad",
            grad[:, j],
            exact_grad[:, j],
            bound,
            z,
            name_margin,
            None if err is None else err[:, j],
        )
    if b.zero_sum:
        tally.grad_sums(grad, np.full(len(m), b.grad), name_margin)

    def at_margins(mi):  # (loss, gradient) at logits [m, 0] for each m in mi
        return run(np.stack([mi, np.zeros_like(mi)], -1), np.zeros(len(mi), np.int32))

    exact_t = exact_grad[:, 0]
    if scale is not None:
        # Near an option's equilibrium the exact gradient is a cancellation; a 0
        # there is within the bound and no collapse.
        ulp_scale = oracle.ulp(scale[:, 0], dtype) * (b.grad + grad_cond[:, 0])
        exact_t = np.where(np.abs(exact_t.astype(np.float64)) > ulp_scale, exact_t, 0.0)
    found = {
        "target gradient": calls.spurious_zeros(
            dtype, grad[:, 0], exact_t, m, lambda v: np.asarray(at_margins(v)[1])[:, 0]
        ),
        value_name: calls.spurious_zeros(dtype, loss, exact_loss, m, lambda v: at_margins(v)[0]),
    }
    for what, zeros in found.items():
        if zeros is not None:
            exact_at = reference(np.array([[zeros.start, 0.0]]), np.zeros(1, int))
            exact_at = exact_at[1][0, 0] if what != value_name else exact_at[0][0]
            fail_zero_from(tally, what, zeros, exact_at, _capped_cliff(dtype, soft_cap))
    dies, zero = (None if z is None else z.start for z in found.values())
    return dies, zero


def _check_random_rows(tally, run, reference, b: _Bounds, quick: bool, max_k: int, kind: str):
    """The random rows: loss and gradient within the bounds grown by each row's
    conditioning, and the zero sum."""
    soft_cap = b.options.get("soft_cap")
    for case in cases.random_cases(quick, max_k, b.dtype):
        if kind == "linear-ce" and case[4] == "masked":
            continue  # -inf hidden times the identity's zeros is NaN, not a masked class
        z, labels = cases.plant_rows(case, b.dtype, 2, seed=0)
        got = calls.run_or_fail(tally, run, cases.describe_case(case), z, labels)
        if got is None:
            continue
        loss, grad = got
        exact_loss, exact_grad = reference(z, labels, exact=True)
        cond, grad_cond, err, _ = b.grad_errors(z, labels, grad, exact_grad)
        k = case[0]
        zc = soft_cap * np.tanh(z.astype(np.float64) / soft_cap) if soft_cap else z
        gaps = finite_gaps(zc)
        is_target = np.arange(k) == labels[:, None]
        conditioning = np.where(is_target, weighted_gap(gaps, is_target)[:, None], gaps)
        name_element = cases.case_element_namer(case)
        tally.rows += len(z)
        tally.compare(
            _value_name(kind),
            "value",
            loss,
            exact_loss,
            conditioned_bound(b.value, gaps.max(-1) + cond, k),
            z,
            name_element,
        )
        grad_bound = conditioned_bound(b.grad, conditioning + grad_cond, k)
        tally.compare("gradient", "grad", grad, exact_grad, grad_bound, z, name_element, err)
        if b.zero_sum:
            tally.grad_sums(grad, grad_bound.max(-1), name_element)


def check_option_cross_entropy(fn: Callable, dtype, kind: str, **check) -> CheckResult:
    """`check_cross_entropy` of `fn(logits, labels)` with the option of `kind` (a key of
    `OPTIONS`) at its value there, unless `check` sets it.

    Example:
      >>> import functools, numerics
      >>> fixed = functools.partial(numerics.cross_entropy, z_loss=1e-4)
      >>> check_option_cross_entropy(fixed, "bf16", "z-loss", quick=True).ok
      True

    Args:
      fn: the function, computing the option itself.
      dtype: as `check_cross_entropy`.
      kind: "z-loss", "soft-cap" or "label-smoothing".
      **check: `check_cross_entropy`'s keywords (max_ulps, quick, the option's value).

    Returns:
      A `CheckResult`.
    """
    if kind not in OPTIONS:
        raise ValueError(f"kind must be one of {sorted(OPTIONS)}; got {kind!r}.")
    return check_cross_entropy(fn, dtype, **{**OPTIONS[kind], **check, "kind": kind})


LINEAR_MAX_K = 1000  # documented in numerics.testing


def check_linear_cross_entropy(fn: Callable, dtype, **check) -> CheckResult:
    """Check a fused linear cross-entropy `fn(hidden, weight, labels) -> per-row losses`.

    hidden = the logits of `check_cross_entropy`'s cases and weight = the identity, so
    hidden @ weight is exact in any accumulation order and the same margins, ties and
    -inf-free random rows (K up to `LINEAR_MAX_K`) are checked; the gradient checked is
    d/d hidden (= d/d logits here). `check` goes to `check_cross_entropy` (options too).

    Example:
      >>> import numerics
      >>> check_linear_cross_entropy(numerics.linear_cross_entropy, "fp32", quick=True).ok
      True

    Args:
      fn: called as fn(hidden_NxD, weight_DxV, labels_N).
      dtype: as `check_cross_entropy`.
      **check: `check_cross_entropy`'s keywords.

    Returns:
      A `CheckResult`.
    """

    def through_identity(logits, labels):
        return fn(logits, jnp.eye(logits.shape[-1], dtype=logits.dtype), labels)

    through_identity.__qualname__ = calls.fn_name(fn)
    check = {"max_k": LINEAR_MAX_K, "kind": "linear-ce", **check}
    return check_cross_entropy(through_identity, dtype, **check)
