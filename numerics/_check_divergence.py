"""The checks of the distillation divergences: KL, reverse KL and Jensen-Shannon.

Each is held to mpmath near the teacher, where the divergence is of order |s|^2 and a
formula that subtracts terms of order 1 loses every digit, exactly 0 (value and
gradient) at student == teacher, and finite where a teacher probability is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import ml_dtypes
import numpy as np

from numerics import _check_calls as calls
from numerics import _check_cases as cases
from numerics import oracle
from numerics._check_tally import CheckResult, Tally
from numerics._check_tolerances import (
    ULPS,
    as_dtype,
    conditioned_bound,
    errors_in_ulps_of,
    finite_gaps,
)

DISTANCES = (0.0, 1e-6, 1e-2, 1.0)  # student = teacher + distance * N(0, 1), rounded
FORMS = {"kl": "kl", "reverse-kl": "reverse_kl", "js": "js"}


def _pairs(case, dtype):
    """(student, teacher) rows of one case, a row per distance. Where the teacher is
    -inf (the masked variant) the student is too at distance 0, and finite elsewhere:
    a class the teacher gives probability 0 and the student does not."""
    teacher = np.repeat(cases.plant_rows(case, dtype, 1, seed=3)[0], len(DISTANCES), 0)
    noise = np.random.default_rng(case[0]).standard_normal(teacher.shape)
    scales = np.array(DISTANCES)[:, None]
    finite = np.isfinite(teacher)
    with np.errstate(invalid="ignore"):  # -inf + 0 * noise stays -inf
        student = (teacher.astype(np.float64) + scales * noise).astype(dtype)
    low = np.min(np.where(finite, teacher.astype(np.float64), np.inf), -1, keepdims=True) - 1
    student = np.where(finite, student, np.where(scales > 0, low.astype(dtype), teacher))
    return student, teacher


def _underflow_case(dtype):
    """A teacher row with one class so far below the others that its probability is 0
    in `dtype` (its logit stays finite), students at each distance."""
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    gap = min(1.2 * -math.log(tiny), float(ml_dtypes.finfo(dtype).max) / 4)
    rng = np.random.default_rng(7)
    teacher = rng.standard_normal(10)
    teacher[3] = teacher.max() - gap
    teacher = np.repeat(teacher.astype(dtype)[None], len(DISTANCES), 0)
    noise = rng.standard_normal(teacher.shape)
    student = (teacher.astype(np.float64) + np.array(DISTANCES)[:, None] * noise).astype(dtype)
    return student, teacher


def _softmax64(z: np.ndarray) -> np.ndarray:
    top = np.max(np.where(np.isfinite(z), z, -np.inf), -1, keepdims=True)
    e = np.exp(z - np.where(np.isfinite(top), top, 0.0))
    return e / e.sum(-1, keepdims=True)


def sensitivity(student, teacher, form: str, exact_value):
    """Per entry, the ulps that the rounding of s_k = log(q_k / p_k) can carry (c_k), and
    per row the divergence's conditioning on them in ulps of its value (kappa), both
    float64: s_k = d_k - r with d_k = (z_S,k - z_T,k) - (max z_S - max z_T), each
    difference rounding by an ulp of its size, and r = log(S_S / S_T) from a sum of
    signed terms whose absolute sum is A. A divergence sum_k w_k phi(t_k) moves by
    |x_k - w_k| per unit of t_k (x = w e^t), so kappa = sum_k |x_k - w_k| c_k / V."""
    zs, zt = student.astype(np.float64), teacher.astype(np.float64)
    k = zs.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        p, q = _softmax64(zt), _softmax64(zs)
        both_out = np.isneginf(zs) & np.isneginf(zt)
        delta = np.where(both_out, 0.0, zs - zt)
        top = lambda z: np.max(np.where(np.isfinite(z), z, -np.inf), -1, keepdims=True)  # noqa: E731
        d = delta - (top(zs) - top(zt))
        ratio = np.exp(zs - top(zs)).sum(-1, keepdims=True) / np.exp(zt - top(zt)).sum(
            -1, keepdims=True
        )
        absolute = np.sum(np.abs(q * ratio - p), -1, keepdims=True)
        r = np.log(ratio)
        # Entries where one side is -inf enter through limits, not through s's rounding.
        reach = np.where(np.isfinite(d), np.abs(delta) + np.abs(d), 0.0)
        c = reach + np.abs(r) + (np.log2(k) + 2) * absolute
        if form == "js":
            m = (p + q) / 2
            # t = psi(+-s) = log(m / p) or log(m / q), each rounded within 2 ulps of itself.
            psi = np.log(np.where(p > 0, m / p, 1.0)), np.log(np.where(q > 0, m / q, 1.0))
            c = c + 2 * np.maximum(np.abs(psi[0]), np.abs(psi[1]))
            moves = np.abs(m - p) + np.abs(m - q)
        else:
            moves = np.abs(q - p)
        exact = np.asarray(exact_value).astype(np.float64)
        kappa = np.sum(moves * c, -1) / exact
    kappa = np.where(np.isfinite(kappa) & (exact > 0), kappa, 0.0)
    return np.nan_to_num(c, posinf=0.0), kappa


def check_divergence(fn: Callable, dtype, kind: str, *, max_ulps=None, quick=False):
    """The check of `check_kl_divergence`, `check_reverse_kl_divergence` and
    `check_js_divergence`: `kind` is 'kl', 'reverse-kl' or 'js'."""
    dtype = as_dtype(dtype)
    form = FORMS[kind]
    tally = Tally(kind, dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    zero_ok = True
    labels = [f"distance {d:g}" for d in DISTANCES]
    with jax.enable_x64(dtype == np.float64):
        run = calls.value_and_grad_runner(fn, kind)
        out_dtype = calls.probe_signature(fn, run, kind, dtype)
        groups = [(cases.describe_case(c), c[0], _pairs(c, dtype)) for c in _cases(quick, dtype)]
        groups.append(("a teacher probability that underflows", 10, _underflow_case(dtype)))
        for what, k, (student, teacher) in groups:
            got = calls.run_or_fail(tally, run, what, student, teacher)
            if got is None:
                continue
            loss, grad = got
            exact_loss, exact_grad = oracle.divergence_value_and_grad(
                student, teacher, form, exact=True
            )
            c, kappa = sensitivity(student, teacher, form, exact_loss)
            gaps = np.maximum(finite_gaps(student), finite_gaps(teacher))

            def name_element(r, j=None, what=what):
                entry = "" if j is None else f", class {int(j)}"
                return f"{what} (row {r} {labels[r]}{entry})"

            tally.rows += len(student)
            loss_bound = conditioned_bound(value, gaps.max(-1), k) + np.log2(k) + kappa
            tally.compare("value", "value", loss, exact_loss, loss_bound, student, name_element)
            err = errors_in_ulps_of(
                grad, exact_grad, gradient_scale(student, teacher, form, exact_loss), dtype
            )
            grad_bound = conditioned_bound(grad_base, gaps, k) + 2 * np.log2(k) + c
            tally.compare(
                "gradient", "grad", grad, exact_grad, grad_bound, student, name_element, err
            )
            at_teacher = max(np.abs(loss[0].astype(np.float64)), np.abs(grad[0]).max())
            if at_teacher != 0:
                zero_ok = False
                tally.fail(
                    "not zero at teacher",
                    f"value and gradient at student = teacher: largest |.| {float(at_teacher):.3g},"
                    f" not exactly 0, at {name_element(0)}",
                )
        nan = calls.nan_propagation(tally, run, kind, dtype)
    return tally.result(
        grad_dies_at=None,
        value_zero_at=None,
        zero_at_teacher=zero_ok,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )


def gradient_scale(student, teacher, form: str, exact_value) -> np.ndarray:
    """Per entry, the size of the terms a student gradient is formed from, in whose ulps
    it is measured: max(p, q), times (for the reverse KL and JS) |s| + V + 1, a bound on
    the factor (s - V, or log(q / m) - KL(q || m) with |log(q / m)| <= |s| + log 2 and
    KL(q || m) <= log 2) that multiplies q; 1 where s is infinite."""
    zs, zt = student.astype(np.float64), teacher.astype(np.float64)
    p, q = _softmax64(zt), _softmax64(zs)
    scale = np.maximum(p, q)
    if form == "kl":
        return scale
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = (
            np.abs(np.log(q) - np.log(p)) + np.abs(np.asarray(exact_value, np.float64))[:, None] + 1
        )
    return scale * np.where(np.isfinite(factor), factor, 1.0)


def _cases(quick: bool, dtype):
    return cases.random_cases(quick, max_k=1000, dtype=dtype)


def check_kl_divergence(fn: Callable, dtype, *, max_ulps=None, quick=False) -> CheckResult:
    """Check a KL divergence `fn(student_logits, teacher_logits) -> KL(p || q)` per row.

    p = softmax(teacher), q = softmax(student). Teachers are `check_cross_entropy`'s
    random rows up to K = 1,000 (100 with `quick`) and a row with a probability that
    underflows; students the teacher plus noise of scale 0, 1e-6, 1e-2 and 1, rounded
    to the dtype, finite where the teacher has -inf classes (probability 0). The value
    is held to `general_bound('value') + log2 K` plus its conditioning on the rounding of
    log(q / p) (`sensitivity`), in ulps of the value itself, so that near the teacher,
    where KL ~ |s|^2, a formula subtracting terms of order 1 fails; the gradient q - p,
    in ulps of max(p, q), to `general_bound('grad') + 2 log2 K` plus that rounding. At
    student == teacher value and gradient must be exactly 0.

    Example:
      >>> import numerics
      >>> check_kl_divergence(numerics.kl_divergence, "fp32", quick=True).ok
      True

    Args:
      fn: called as fn(student_NxK, teacher_NxK) under `jax.jit`, differentiated with
        respect to the student.
      dtype: as `check_cross_entropy` (float8 too).
      max_ulps: replaces the table's bounds (the conditioning stays).
      quick: K up to 100.

    Returns:
      A `CheckResult` (`zero_at_teacher` for the exact zero).
    """
    return check_divergence(fn, dtype, "kl", max_ulps=max_ulps, quick=quick)


def check_reverse_kl_divergence(fn: Callable, dtype, *, max_ulps=None, quick=False) -> CheckResult:
    """Check a reverse KL `fn(student_logits, teacher_logits) -> KL(q || p)` per row.

    As `check_kl_divergence`; the student gradient q (s - KL(q || p)) is measured in ulps
    of max(p, q) (|s| + KL + 1), the size of the terms it is formed from. Where the
    teacher's probability is exactly 0 (a -inf logit) and the student's is not, the
    exact value is +inf.

    Example:
      >>> import numerics
      >>> check_reverse_kl_divergence(numerics.standard.reverse_kl_divergence, "bf16",
      ...                             quick=True).zero_at_teacher
      False

    Args:
      fn: called as fn(student_NxK, teacher_NxK).
      dtype: as `check_cross_entropy`.
      max_ulps: replaces the table's bounds.
      quick: K up to 100.

    Returns:
      A `CheckResult`.
    """
    return check_divergence(fn, dtype, "reverse-kl", max_ulps=max_ulps, quick=quick)


def check_js_divergence(fn: Callable, dtype, *, max_ulps=None, quick=False) -> CheckResult:
    """Check a Jensen-Shannon divergence `fn(student_logits, teacher_logits)` per row (nats).

    As `check_reverse_kl_divergence`, for JS = (KL(p || m) + KL(q || m)) / 2 with
    m = (p + q) / 2, which is finite wherever either probability is 0.

    Example:
      >>> import numerics
      >>> check_js_divergence(numerics.js_divergence, "bf16", quick=True).ok
      True

    Args:
      fn: called as fn(student_NxK, teacher_NxK).
      dtype: as `check_cross_entropy`.
      max_ulps: replaces the table's bounds.
      quick: K up to 100.

    Returns:
      A `CheckResult`.
    """
    return check_divergence(fn, dtype, "js", max_ulps=max_ulps, quick=quick)
