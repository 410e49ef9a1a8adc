"""The check of soft-target cross-entropy: accurate near the teacher, exactly 0 at it."""

from __future__ import annotations

from collections.abc import Callable

import jax
import ml_dtypes
import numpy as np

from numerics import _check_calls as calls
from numerics import _check_cases as cases
from numerics import oracle
from numerics._check_tally import CheckResult, Tally
from numerics._check_tolerances import ULPS, as_dtype, conditioned_bound, finite_gaps

_DISTANCES = (0.0, 1e-6, 1e-2, 1.0)


def check_soft_target_cross_entropy(
    fn: Callable, dtype, *, max_ulps: float | None = None, quick: bool = False
) -> CheckResult:
    """Check a soft-target cross-entropy `fn(student_logits, teacher_logits) -> losses`.

    Teachers are the random rows of `check_cross_entropy` up to K = 1,000 (100 with
    `quick`), students the teacher plus noise of scale 0, 1e-6, 1e-2 and 1, rounded to
    the dtype. The loss is held to `general_bound('value') + log2 K`, the student
    gradient q - p, measured in ulps of max(p, q) (the numbers it is formed from), to
    `general_bound('grad') + 2 log2 K`; at student == teacher it must be exactly 0.

    Example:
      >>> import numerics
      >>> check_soft_target_cross_entropy(numerics.standard.soft_target_cross_entropy, "fp32",
      ...                                 quick=True).zero_at_teacher
      False

    Args:
      fn: the function, called as fn(student_NxK, teacher_NxK) under `jax.jit`, and
        differentiated with respect to the student.
      dtype: as `check_cross_entropy`.
      max_ulps: replaces the table's bounds (the conditioning stays).
      quick: K up to 100.

    Returns:
      A `CheckResult` (`grad_dies_at` and `value_zero_at` are None: no margin sweep).

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    dtype = as_dtype(dtype)
    tally = Tally("soft-target", dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    zero_ok = True
    with jax.enable_x64(dtype == np.float64):
        run = calls.value_and_grad_runner(fn, "soft-target")
        out_dtype = calls.probe_signature(fn, run, "soft-target", dtype)
        for case in cases.random_cases(quick, max_k=1000, dtype=dtype):
            teacher = np.repeat(cases.plant_rows(case, dtype, 1, seed=2)[0], len(_DISTANCES), 0)
            noise = np.random.default_rng(case[0]).standard_normal(teacher.shape)
            scales = np.array(_DISTANCES)[:, None]
            with np.errstate(invalid="ignore"):  # -inf + 0 * noise stays -inf
                student = (teacher.astype(np.float64) + scales * noise).astype(dtype)
            student = np.where(np.isfinite(teacher), student, teacher)
            got = calls.run_or_fail(tally, run, cases.describe_case(case), student, teacher)
            if got is None:
                continue
            loss, grad = got
            exact_loss, exact_grad = oracle.soft_target_cross_entropy_value_and_grad(
                student, teacher, exact=True
            )
            k = case[0]
            gaps = np.maximum(finite_gaps(student), finite_gaps(teacher))
            scale_of = np.maximum(oracle.softmax(student), oracle.softmax(teacher))
            diff = np.abs(grad.astype(np.float64) - exact_grad.astype(np.float64))
            # XLA flushes subnormal results to zero: one smallest-normal is the hardware's.
            err = np.maximum(diff - tiny, 0) / oracle.ulp(scale_of, dtype)
            name_element = cases.case_element_namer(case, [f"distance {d:g}" for d in _DISTANCES])
            tally.rows += len(student)
            loss_bound = conditioned_bound(value, gaps.max(-1), k) + np.log2(k)
            tally.compare("loss", "value", loss, exact_loss, loss_bound, student, name_element)
            grad_bound = conditioned_bound(grad_base, gaps, k) + 2 * np.log2(k)
            tally.compare(
                "gradient", "grad", grad, exact_grad, grad_bound, student, name_element, err
            )
            tally.grad_sums(grad, grad_bound.max(-1), name_element)
            residual = np.abs(grad[0].astype(np.float64)).max()
            if residual != 0:
                zero_ok = False
                tally.fail(
                    "not zero at teacher",
                    f"gradient at student = teacher: largest |g| {residual:.3g}, not exactly 0, "
                    f"at {name_element(0)}",
                )
        nan = calls.nan_propagation(tally, run, "soft-target", dtype)
    return tally.result(
        grad_dies_at=None,
        value_zero_at=None,
        zero_at_teacher=zero_ok,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )
