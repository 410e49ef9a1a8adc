"""The machinery of `numerics.testing`: the hard cases, calling the checked function,
and the tally of its errors and failures."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from numerics import oracle
from numerics._cliffs import first_zero, precision_cliff


def conditioned(base: float, exponent_args, num_classes: int) -> np.ndarray:
    return base + np.abs(np.asarray(exponent_args, np.float64)) + np.log2(max(num_classes, 2))


def ulp_errors(actual, expected, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(ulp error, unexpected non-finite): NaN matching NaN and equal infinities count 0."""
    actual = np.asarray(actual).astype(np.float64)
    exact = np.asarray(expected).astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf - -inf in mpmath, handled below
        err = oracle.ulp_error(actual, expected, dtype)
    same_nan = np.isnan(actual) & np.isnan(exact)
    wrong = ~np.isfinite(actual) & ~(same_nan | (actual == exact))
    return np.where(same_nan | wrong, 0.0, np.nan_to_num(err, nan=np.inf)), wrong


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
    grad_dies_at: float | None  # first margin m (logits [m, 0]) whose target gradient is 0
    # though the exact one is a normal number; None: never (ce, softmax, log_softmax)
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


# ----------------------------------------------------------------------------- inputs
# The hard cases, shared by the deterministic checks and the hypothesis strategies:
# (K, logit scale, planted margin, offset added to every logit, variant).
CASES = (
    (2, 1.0, 0.5, 0.0, None),
    (3, 5.0, 30.0, 0.0, None),
    (10, 0.1, 12.0, 0.0, None),
    (10, 3.0, -4.0, 0.0, None),
    (100, 2.0, 17.0, 0.0, None),
    (100, 10.0, 40.0, 0.0, None),
    (100, 1e-3, 0.0, 0.0, None),  # tiny scale: near-uniform
    (10, 3.0, 8.0, 1e4, None),  # huge logits: exp overflows without the max shift
    (10, 1.0, 0.0, 0.0, "tie"),  # the target shares the max with another class
    (10, 1.0, 0.0, 0.0, "near-tie"),  # another class one ulp below the target
    (10, 2.0, 5.0, 0.0, "masked"),  # three classes at -inf
    (1000, 1.0, 6.0, 0.0, None),
    (50000, 1.0, 20.0, 0.0, None),
)
QUICK_MAX_K = 100  # quick=True: only cases up to this K
VARIANTS = (None, "tie", "near-tie", "masked")


def plant_row(rng, k: int, scale: float, margin: float, offset: float, variant, dtype):
    """One row of `dtype` whose target t has roughly the given margin; returns (row, t)."""
    z = scale * rng.standard_normal(k)
    t = int(rng.integers(k))
    others = np.delete(z, t)
    z[t] = others.max() + np.log(np.sum(np.exp(others - others.max()))) + margin
    z = (z + offset).astype(dtype)
    if k > 1 and variant in ("tie", "near-tie"):
        j = (t + 1) % k
        below = np.nextafter(z[t : t + 1], np.array([-np.inf], dtype))[0]
        z[j] = z[t] if variant == "tie" else below
    if k > 4 and variant == "masked":
        others = np.delete(np.arange(k), t)
        z[rng.choice(others, 3, replace=False)] = -np.inf
    return z, t


def plant_rows(case, dtype, count: int, seed: int):
    """`count` planted rows of one case: (logits (count, K), labels (count,))."""
    rng = np.random.default_rng([seed, *(int(abs(v) * 1000) % 2**31 for v in case[:4])])
    made = [plant_row(rng, *case, dtype) for _ in range(count)]
    return np.stack([z for z, _ in made]), np.array([t for _, t in made], np.int32)


def describe(case) -> str:
    k, scale, margin, offset, variant = case
    words = f"K={k} scale {scale:g} margin {margin:g}"
    return words + (f" offset {offset:g}" if offset else "") + (f" {variant}" if variant else "")


def margin_sweep(dtype, quick: bool) -> np.ndarray:
    """Every ulp around the cliff and a dense grid from -40 to past exponent underflow."""
    window = oracle.ulp_window(precision_cliff(dtype), dtype, 64 if quick else 512)
    underflow = -math.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    grid = np.linspace(-40.0, 1.05 * underflow, 513 if quick else 4001).astype(dtype)
    return np.unique(np.concatenate([window, grid]))


def finite_gaps(z: np.ndarray) -> np.ndarray:
    """z_max - z_j per entry (float64), 0 for infinite entries (they carry no rounding)."""
    z = z.astype(np.float64)
    finite = np.isfinite(z)
    z_max = np.max(np.where(finite, z, -np.inf), axis=-1, keepdims=True)
    return np.where(finite, z_max - z, 0.0)


def weighted_gap(gaps: np.ndarray, exclude: np.ndarray) -> np.ndarray:
    """Per row, the e^-gap-weighted mean gap over entries not in `exclude`: the
    conditioning of the sum of e^-gap_j, each carrying |gap_j| / 2 ulps."""
    weights = np.where(exclude, 0.0, np.exp(-gaps))
    return np.sum(weights * gaps, -1) / np.maximum(np.sum(weights, -1), 1e-300)


# ----------------------------------------------------------------------------- tally
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

    def compare(self, what, category, actual, expected, bound, z, where, err=None):
        """Errors of `actual` (rows, ...) against `expected`, per element; `z` the rows'
        logits (for the overflow diagnosis), `where(row, index)` names an element."""
        actual = np.asarray(actual)
        ulps, wrong = ulp_errors(actual, expected, self.dtype)
        ulps = ulps if err is None else np.where(wrong, 0.0, err)
        bound = np.broadcast_to(np.asarray(bound, np.float64), ulps.shape)
        flat_rows = wrong.reshape(len(z), -1).any(-1)
        if flat_rows.any():
            self._nonfinite(what, actual, z, flat_rows, where)
        i = np.unravel_index(int(np.argmax(ulps)), ulps.shape)
        if ulps[i] >= self.worst[category][0]:
            self.worst[category] = (float(ulps[i]), float(bound[i]), where(*i))
        over = ulps > bound
        if over.any():
            i = np.unravel_index(int(np.argmax(ulps / bound)), ulps.shape)
            got, exact = float(actual[i]), float(np.asarray(expected)[i])
            self.fail(
                what,
                f"{what}: {ulps[i]:.3g} ulps > bound {bound[i]:.3g} at {where(*i)}: "
                f"got {got:.7g}, exact {exact:.7g}",
                float(ulps[i] / bound[i]),
                int(over.sum()),
            )

    def _nonfinite(self, what, actual, z, rows, where) -> None:
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
                f"{key}: {what} is {bad} where the exact value is finite, at {where(r)} "
                f"(largest finite |logit| {largest[r]:.6g}): {cause}",
                count=int(group.sum()),
            )

    def sums(self, grads: np.ndarray, bound: np.ndarray, where) -> None:
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
                f"{where(r)}: the gradients do not sum to zero",
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


# ----------------------------------------------------------------------------- calling
def evaluator(fn: Callable, kind: str) -> Callable:
    """jit of (input, other) -> (output, gradient) for `kind`.

    ce / soft-target: gradient of the summed loss with respect to the first argument;
    softmax / log_softmax: the vector-Jacobian product with the cotangent `other`.
    """
    if kind in ("ce", "soft-target"):

        def run(x, other):
            out, vjp = jax.vjp(lambda x: fn(x, other), x)
            return out, vjp(jnp.ones_like(out))[0]

    else:

        def run(x, cotangent):
            out, vjp = jax.vjp(fn, x)
            return out, vjp(cotangent.astype(out.dtype))[0]

    return jax.jit(run)


def fn_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def probe(fn: Callable, run: Callable, kind: str, dtype: np.dtype) -> np.dtype:
    """Call once on plain input; SignatureError unless it works and has the right shape."""
    z = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -1.0]], dtype)
    other = {"ce": np.array([2, 0], np.int32), "soft-target": z[:, ::-1].copy()}
    other = other.get(kind, np.eye(3, dtype=dtype)[[2, 0]])
    call = {"ce": "(logits, labels)", "soft-target": "(student_logits, teacher_logits)"}
    call = call.get(kind, "(x)")
    try:
        out, _ = run(z, other)
    except Exception as err:  # any failure on plain input means we cannot check it
        message = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        raise SignatureError(
            f"calling {fn_name(fn)}{call} with {dtype.name} arrays of shape (2, 3) raised {message}"
        ) from err
    expected = (2,) if kind in ("ce", "soft-target") else (2, 3)
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


def first_dead(tally, computed, exact, m, single) -> float | None:
    """First margin in `m` where `computed` is 0 though |exact| is a normal number,
    refined to the exact representable margin by bisection on bit patterns (`single(m)`
    evaluates one margin); None if there is none."""
    tiny = float(ml_dtypes.finfo(tally.dtype).smallest_normal)
    dead = (np.asarray(computed, np.float64) == 0) & (
        np.abs(np.asarray(exact).astype(np.float64)) >= tiny
    )
    if not dead.any():
        return None
    i = int(np.flatnonzero(dead)[0])
    if i == 0 or m[i - 1] <= 0:
        return float(m[i])
    return first_zero(single, float(m[i - 1]), float(m[i]), tally.dtype)


def cliff_line(tally, what, at, exact_at, note: str = "") -> None:
    tally.fail(
        f"{what} is 0",
        f"{what}: exactly 0 from m={at:.8g} (logits [m, 0]; precision cliff "
        f"{precision_cliff(tally.dtype):.8g}{note}) where the exact value is {exact_at:.4g}",
    )


def nan_check(tally, run, kind, dtype) -> bool:
    """A row holding a NaN must give NaN; records a failure if it gives a finite number."""
    z = np.array([[np.nan, 0.0, 1.0]], dtype)
    other = {"ce": np.array([1], np.int32), "soft-target": np.array([[0.0, 0.0, 1.0]], dtype)}
    got = run_or_fail(
        tally, run, "a row holding NaN", z, other.get(kind, np.eye(3, dtype=dtype)[:1])
    )
    if got is None:
        return False
    propagates = bool(np.isnan(got[0].astype(np.float64)).any())
    if not propagates:
        tally.fail("NaN", f"NaN: logits [nan, 0, 1] give the finite {got[0].tolist()}, not NaN")
    return propagates


def random_cases(quick: bool, max_k: int = 50_000):
    limit = min(max_k, QUICK_MAX_K if quick else max_k)
    return [case for case in CASES if case[0] <= limit]


def where_row(case, rows=None):
    def where(r, j=None):
        entry = "" if j is None else f", class {int(j)}"
        extra = "" if rows is None else f" {rows[r]}"
        return f"{describe(case)} (row {r}{extra}{entry})"

    return where
