"""The tally of one check: its worst errors, its failure lines, and the `CheckResult`
built from them."""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np

from numerics._check_tolerances import ulp_errors
from numerics._cliffs import precision_cliff


class SignatureError(TypeError):
    """The checked function cannot be called with the standard signature, raised on plain
    input, or returned the wrong shape."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What one check measured for one function in one dtype, and what broke."""

    kind: str  # one of KINDS
    dtype: str  # NumPy's name of the dtype
    rows: int  # rows compared with the oracle
    value_ulps: float  # worst value error, in ulps of the dtype
    value_bound: float  # the bound at that element
    value_at: str  # where it was
    grad_ulps: float  # worst gradient error, in ulps
    grad_bound: float  # the bound at that element
    grad_at: str  # where it was
    cliff: float  # precision_cliff(dtype)
    grad_dies_at: float | None  # margin m (logits [m, 0]) from which the target gradient is
    # 0 though the exact one is a normal number; None: never (ce, softmax, log_softmax)
    value_zero_at: float | None  # the same for the loss (log_softmax: its entry 0)
    grad_sum_error: float  # worst |sum_k g_k| / (eps * sum_k |g_k|) over rows
    zero_at_teacher: bool | None  # soft-target: gradient exactly 0 at student == teacher
    nan_propagates: bool  # a NaN logit gives NaN, never a silent finite number
    nonfinite_rows: int  # rows with inf/NaN output where the exact value is finite
    output_dtype: str  # the dtype the function returned
    failures: tuple[str, ...]  # one line each: what and where

    @property
    def ok(self) -> bool:
        """True when the function met every bound."""
        return not self.failures

    def assert_ok(self) -> None:
        """Raise AssertionError listing every failure, one per line."""
        if self.failures:
            lines = "\n".join(f"  {f}" for f in self.failures)
            raise AssertionError(f"{self.kind} in {self.dtype} fails its bounds:\n{lines}")


class Tally:
    """Collects the worst errors of one check and one failure line per kind of failure."""

    def __init__(self, kind: str, dtype: np.dtype) -> None:
        self.kind, self.dtype = kind, dtype
        self.worst = {"value": (0.0, 0.0, "-"), "grad": (0.0, 0.0, "-")}
        self._failures: dict[str, tuple[float, str, int]] = {}  # key -> (severity, line, count)
        self._headlines: set[str] = set()
        self.nonfinite_rows = 0
        self.grad_sum = 0.0
        self.rows = 0

    def fail(self, key: str, line: str, severity: float = math.inf, count: int = 1) -> None:
        """Record a failure; per `key` the most severe line is kept and the counts add up.
        Failures with the default severity are headlines, listed first."""
        if severity == math.inf:
            self._headlines.add(key)
        old_severity, old_line, old_count = self._failures.get(key, (-math.inf, line, 0))
        kept = line if severity > old_severity else old_line
        self._failures[key] = (max(severity, old_severity), kept, old_count + count)

    @property
    def failures(self) -> tuple[str, ...]:
        # Overflow first, then the other qualitative failures (collapse, NaN, raising),
        # then the ulps.
        keys = sorted(self._failures, key=lambda k: (k != "overflow", k not in self._headlines))
        lines = []
        for key in keys:
            _, line, count = self._failures[key]
            more = f" ({count:,} in all)" if count > 1 else ""
            lines.append(f"{self.dtype.name} {line}{more}")
        return tuple(lines)

    def compare(self, what, category, actual, expected, bound, z, name_of, err=None):
        """Errors of `actual` (rows, ...) against `expected`, per element; `z` the rows'
        logits (for the overflow diagnosis), `name_of(row, index)` names an element."""
        actual = np.asarray(actual)
        ulps, wrong = ulp_errors(actual, expected, self.dtype)
        ulps = ulps if err is None else np.where(wrong, 0.0, err)
        bound = np.broadcast_to(np.asarray(bound, np.float64), ulps.shape)
        flat_rows = wrong.reshape(len(z), -1).any(-1)
        if flat_rows.any():
            self._nonfinite(what, actual, z, flat_rows, name_of)
        i = np.unravel_index(int(np.argmax(ulps)), ulps.shape)
        if ulps[i] >= self.worst[category][0]:
            self.worst[category] = (float(ulps[i]), float(bound[i]), name_of(*i))
        over = ulps > bound
        if over.any():
            i = np.unravel_index(int(np.argmax(ulps / bound)), ulps.shape)
            got, exact = float(actual[i]), float(np.asarray(expected)[i])
            self.fail(
                what,
                f"{what}: {ulps[i]:.3g} ulps > bound {bound[i]:.3g} at {name_of(*i)}: "
                f"got {got:.7g}, exact {exact:.7g}",
                float(ulps[i] / bound[i]),
                int(over.sum()),
            )

    def _nonfinite(self, what, actual, z, rows, name_of) -> None:
        """One failure per cause: an overflow (logits beyond log(max float)), -inf logits
        mishandled (masked classes must contribute nothing), or neither."""
        self.nonfinite_rows += int(rows.sum())
        z = np.asarray(z).reshape(len(z), -1).astype(np.float64)
        got = np.asarray(actual).reshape(len(z), -1).astype(np.float64)
        finite_z = np.where(np.isfinite(z), z, 0.0)
        largest = np.max(np.abs(finite_z), -1)
        log_max = math.log(float(ml_dtypes.finfo(self.dtype).max))
        has_inf = np.isinf(z).any(-1)
        causes = {
            "overflow": (
                rows & ~has_inf & (largest > log_max),
                f"an exp or a sum overflowed past log(max {self.dtype.name}) = {log_max:.4g} "
                "(no shift by the row max?)",
            ),
            "-inf logits": (
                rows & has_inf,
                "classes at -inf (masked) must contribute nothing (0 * -inf?)",
            ),
            "non-finite": (rows & ~has_inf & (largest <= log_max), "on finite logits"),
        }
        for key, (group, cause) in causes.items():
            if not group.any():
                continue
            r = int(np.flatnonzero(group)[0])
            bad = got[r][~np.isfinite(got[r])][0]
            self.fail(
                key,
                f"{key}: {what} is {bad} where the exact value is finite, at {name_of(r)} "
                f"(largest finite |logit| {largest[r]:.6g}): {cause}",
                count=int(group.sum()),
            )

    def grad_sums(self, grads: np.ndarray, bound: np.ndarray, name_of) -> None:
        """|sum_k g_k| / (eps sum_k |g_k|) per row (g flushed to zero may add K tiny)."""
        g = np.asarray(grads).astype(np.float64)
        finite = np.isfinite(g).all(-1)
        eps = float(ml_dtypes.finfo(self.dtype).eps)
        tiny = float(ml_dtypes.finfo(self.dtype).smallest_normal)
        size = np.sum(np.abs(g), -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.maximum(np.abs(np.sum(g, -1)) - g.shape[-1] * tiny, 0) / (eps * size)
        ratio = np.where(finite & (size > 0), ratio, 0.0)
        self.grad_sum = max(self.grad_sum, float(ratio.max()))
        over = ratio > bound
        if over.any():
            r = int(np.argmax(ratio / bound))
            self.fail(
                "gradient sum",
                f"gradient sum: |sum g| = {ratio[r]:.3g} eps * sum |g| > {bound[r]:.3g} at "
                f"{name_of(r)}: the gradients do not sum to zero",
                float(ratio[r] / bound[r]),
                int(over.sum()),
            )

    def result(self, **fields) -> CheckResult:
        (v, vb, va), (g, gb, ga) = self.worst["value"], self.worst["grad"]
        return CheckResult(
            kind=self.kind,
            dtype=self.dtype.name,
            rows=self.rows,
            value_ulps=v,
            value_bound=vb,
            value_at=va,
            grad_ulps=g,
            grad_bound=gb,
            grad_at=ga,
            cliff=precision_cliff(self.dtype),
            grad_sum_error=self.grad_sum,
            nonfinite_rows=self.nonfinite_rows,
            failures=tuple(self.failures),
            **fields,
        )


def fail_zero_from(tally, what, zeros, exact_at, note: str = "") -> None:
    """Record that `what` is exactly 0 from the margin `zeros.start`, where the exact value
    is `exact_at`: the collapse of a check's margin sweep, named against the cliff
    (`zeros`: a `numerics._check_calls.Zeros`)."""
    after = ""
    if not zeros.for_good:
        after = f", and nonzero again at larger margins (at m={zeros.again:.8g})"
    if zeros.lowest is not None:
        after += (
            f"; 0 already at scattered margins below it (the lowest seen: m={zeros.lowest:.8g})"
        )
    tally.fail(
        f"{what} is 0",
        f"{what}: exactly 0 from m={zeros.start:.8g} (logits [m, 0]; precision cliff "
        f"{precision_cliff(tally.dtype):.8g}{note}) where the exact value is "
        f"{exact_at:.4g}{after}",
    )
