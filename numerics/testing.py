"""Test anyone's softmax and cross-entropy against the mpmath oracle (as numpy.testing, chex).

Three kinds of tools, for a user's own pytest suite:

- **Checks.** `check_cross_entropy(fn, dtype)`, `check_softmax`, `check_log_softmax` and
  `check_soft_target_cross_entropy` call any function with the standard signature on
  the hard cases (margins from -40 to past exponent underflow with every ulp around
  `precision_cliff(dtype)`, K from 2 to 50,000, tiny and huge logit scales, ties and
  near-ties at the max, -inf entries, NaN, student/teacher pairs at distance 0) and
  compare values and gradients with `numerics.oracle`. Each returns a `CheckResult`;
  one line in a test asserts it: `check_cross_entropy(my_loss, "bf16").assert_ok()`.
- **`assert_ulp_close(actual, expected, ulps)`**, whose message says where and by how much.
- **Hypothesis strategies** (`logits`, `labelled_logits`, `masked_logits`,
  `student_teacher`) drawing the same hard cases for property tests. They need
  hypothesis: `pip install 'grokbench[testing]'`.

Bounds are `ULPS`, in ulps of the dtype (the same table the lab's own tests use), plus,
for random rows, the conditioning every in-dtype implementation inherits
(`general_bound`). Signatures: `fn(logits, labels)` returns per-row losses
(`labels.shape`); `fn(x)` returns x's shape; `fn(student_logits, teacher_logits)`
returns per-row losses. The class axis is the last.

In a test file:

    import numerics.testing

    def test_my_loss():
        numerics.testing.check_cross_entropy(my_loss, "bf16").assert_ok()

`grokbench audit MODULE:FUNCTION` runs the same checks from the command line, per dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from numerics import oracle
from numerics._cliffs import precision_cliff

__all__ = [
    "DTYPES",
    "KINDS",
    "ULPS",
    "CheckResult",
    "SignatureError",
    "as_dtype",
    "assert_ulp_close",
    "check_cross_entropy",
    "check_log_softmax",
    "check_soft_target_cross_entropy",
    "check_softmax",
    "general_bound",
    "labelled_logits",
    "logits",
    "masked_logits",
    "student_teacher",
]

DTYPES = tuple(np.dtype(d) for d in (ml_dtypes.bfloat16, np.float16, np.float32, np.float64))
"""The float dtypes every check and strategy covers: bfloat16, float16, float32, float64."""

_SHORT = dict(zip(("bf16", "fp16", "fp32", "fp64"), DTYPES, strict=True))

KINDS = ("ce", "softmax", "log_softmax", "soft-target")
"""What a checked function computes: integer-label cross-entropy, softmax, log-softmax,
soft-target (student, teacher) cross-entropy."""

ULPS = {
    # log1p of a ratio of two sums: a division, a log1p and a final rounding.
    "value": dict.fromkeys(DTYPES, 2.0),
    # e^(z_j - z_max) times a per-row scale cotangent / S: exp, one division, one
    # multiply, each up to half an ulp, plus the rounding of S itself.
    "grad": dict.fromkeys(DTYPES, 3.0),
    # log_softmax / softmax gradients come from autodiff through the margin form:
    # exp(log q), softplus' derivative, and two products, each rounded.
    "autodiff_grad": dict.fromkeys(DTYPES, 4.0),
}
"""Bounds in ulps of each dtype for inputs whose differences z_j - z_max are exact.

Errors are |computed - exact| / ulp(exact), `exact` from `numerics.oracle`. Each output
is a short chain of correctly-rounded-or-nearly operations (XLA's exp/log1p are within
about 1 ulp; 16-bit types evaluate them in f32 and round once), so a few roundings add
up. A computed 0 where the exact value is below the smallest normal counts as exact:
XLA's CPU kernels flush subnormal results to zero."""


def general_bound(kind: str, dtype, exponent_args, num_classes: int) -> np.ndarray:
    """Per-element bound for general inputs: `ULPS[kind][dtype]` plus conditioning.

    For general inputs z_j - z_max is itself rounded (relative error up to 2^-p), and
    exp turns that into a relative error |z_j - z_max| 2^-p of its result: between
    |z_j - z_max| / 2 and |z_j - z_max| ulps. Any implementation working in the dtype
    inherits it. Sums over K terms add about log2(K) roundings.
    """
    return _conditioned(ULPS[kind][np.dtype(dtype)], exponent_args, num_classes)


def _conditioned(base: float, exponent_args, num_classes: int) -> np.ndarray:
    return base + np.abs(np.asarray(exponent_args, np.float64)) + np.log2(max(num_classes, 2))


def as_dtype(dtype) -> np.dtype:
    """One of `DTYPES`, from 'bf16', 'fp16', 'fp32', 'fp64', NumPy's names or a dtype.

    Raises TypeError for anything else.
    """
    if isinstance(dtype, str):
        by_name = {**_SHORT, **{d.name: d for d in DTYPES}}
        if dtype in by_name:
            return by_name[dtype]
    try:
        found = None if dtype is None else np.dtype(dtype)  # np.dtype(None) is float64
    except TypeError:
        found = None
    if found is None or found not in DTYPES:
        raise TypeError(f"expected bf16, fp16, fp32 or fp64 (or NumPy's names); got {dtype!r}")
    return found


def _ulp_errors(actual, expected, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(ulp error, unexpected non-finite): NaN matching NaN and equal infinities count 0."""
    actual = np.asarray(actual).astype(np.float64)
    exact = np.asarray(expected).astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf - -inf in mpmath, handled below
        err = oracle.ulp_error(actual, expected, dtype)
    same_nan = np.isnan(actual) & np.isnan(exact)
    wrong = ~np.isfinite(actual) & ~(same_nan | (actual == exact))
    return np.where(same_nan | wrong, 0.0, np.nan_to_num(err, nan=np.inf)), wrong


def assert_ulp_close(actual, expected, ulps, dtype=None, *, inputs=None, err_msg: str = ""):
    """Assert |actual - expected| <= `ulps` ulps of `dtype` at |expected|, elementwise.

    `expected` may be float64 or an object array of `mpmath.mpf` (the oracle's
    `exact=True`); `ulps` a number or an array broadcasting to `actual`. NaN must match
    NaN and an infinity the same infinity. A computed 0 where |expected| is below the
    smallest normal counts as exact (flush to zero).

    Example:
      >>> import numpy as np
      >>> assert_ulp_close(np.float32([1.0, 2.0]), [1.0, 2.0000003], 2)
      >>> assert_ulp_close(np.float32([1, 2]), [1, 2.001], 2, inputs=[0, 7])  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      AssertionError: 1 of 2 elements off by more than their bound; worst 4194.30 ulps > 2 ...

    Args:
      actual: the computed array (its dtype is the default `dtype`).
      expected: the exact values.
      ulps: the bound, in ulps of `dtype`.
      dtype: the dtype whose ulps count (default: `actual`'s).
      inputs: optional array of the shape of `actual` naming each element's input, shown
        in the message (for example the margin m).
      err_msg: prefix of the message.

    Raises:
      AssertionError: naming how many elements fail, the worst one's index, input, error,
        bound, computed and expected values.
    """
    actual = np.asarray(actual)
    dtype = as_dtype(actual.dtype if dtype is None else dtype)
    expected = np.asarray(expected)
    err, wrong = _ulp_errors(actual, expected, dtype)
    bound = np.broadcast_to(np.asarray(ulps, np.float64), err.shape)
    excess = np.where(wrong, np.inf, err - bound)
    failing = int(np.sum(excess > 0))
    if not failing:
        return
    worst = np.unravel_index(int(np.argmax(excess)), err.shape)
    at = "" if inputs is None else f" (input {np.asarray(inputs)[worst].item()!r})"
    size = "non-finite" if wrong[worst] else f"{err[worst]:.2f} ulps > {bound[worst]:g}"
    got, exact = float(actual[worst]), float(expected[worst])
    prefix = f"{err_msg}: " if err_msg else ""
    raise AssertionError(
        f"{prefix}{failing} of {err.size} elements off by more than their bound; worst {size} "
        f"at index {tuple(int(i) for i in worst)}{at}: got {got!r}, expected {exact!r}"
    )


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
    nonfinite_rows: int  # rows with inf/NaN output on finite input (overflow)
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
_CASES = (
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
_QUICK_MAX_K = 100  # quick=True: only cases up to this K
_VARIANTS = (None, "tie", "near-tie", "masked")


def _plant(rng, k: int, scale: float, margin: float, offset: float, variant, dtype):
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


def _rows(case, dtype, count: int, seed: int):
    """`count` planted rows of one case: (logits (count, K), labels (count,))."""
    rng = np.random.default_rng([seed, *(int(abs(v) * 1000) % 2**31 for v in case[:4])])
    made = [_plant(rng, *case, dtype) for _ in range(count)]
    return np.stack([z for z, _ in made]), np.array([t for _, t in made], np.int32)


def _describe(case) -> str:
    k, scale, margin, offset, variant = case
    words = f"K={k} scale {scale:g} margin {margin:g}"
    return words + (f" offset {offset:g}" if offset else "") + (f" {variant}" if variant else "")


def _margins(dtype, quick: bool) -> np.ndarray:
    """Every ulp around the cliff and a dense grid from -40 to past exponent underflow."""
    window = oracle.ulp_window(precision_cliff(dtype), dtype, 64 if quick else 512)
    underflow = -math.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    grid = np.linspace(-40.0, 1.05 * underflow, 513 if quick else 4001).astype(dtype)
    return np.unique(np.concatenate([window, grid]))


def _finite_gaps(z: np.ndarray) -> np.ndarray:
    """z_max - z_j per entry (float64), 0 for infinite entries (they carry no rounding)."""
    z = z.astype(np.float64)
    finite = np.isfinite(z)
    z_max = np.max(np.where(finite, z, -np.inf), axis=-1, keepdims=True)
    return np.where(finite, z_max - z, 0.0)


def _weighted_gap(gaps: np.ndarray, exclude: np.ndarray) -> np.ndarray:
    """Per row, the e^-gap-weighted mean gap over entries not in `exclude`: the
    conditioning of the sum of e^-gap_j, each carrying |gap_j| / 2 ulps."""
    weights = np.where(exclude, 0.0, np.exp(-gaps))
    return np.sum(weights * gaps, -1) / np.maximum(np.sum(weights, -1), 1e-300)


# ----------------------------------------------------------------------------- tally
class _Tally:
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
        ulps, wrong = _ulp_errors(actual, expected, self.dtype)
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
        self.nonfinite_rows += int(rows.sum())
        r = int(np.flatnonzero(rows)[0])
        got = np.asarray(actual).reshape(len(z), -1)[r]
        bad = got[~np.isfinite(got.astype(np.float64))][0]
        largest = float(np.max(np.abs(np.where(np.isfinite(z[r]), z[r], 0).astype(np.float64))))
        log_max = math.log(float(ml_dtypes.finfo(self.dtype).max))
        cause = (
            f"exp overflows past {log_max:.4g} in {self.dtype.name} (no shift by the row max?)"
            if largest > log_max
            else "on finite input"
        )
        self.fail(
            "overflow",
            f"overflow: {what} is {float(bad)} where the exact value is finite, at {where(r)} "
            f"(largest |logit| {largest:.6g}): {cause}",
            count=int(rows.sum()),
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
def _evaluator(fn: Callable, kind: str) -> Callable:
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


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _probe(fn: Callable, run: Callable, kind: str, dtype: np.dtype) -> np.dtype:
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
            f"calling {_name(fn)}{call} with {dtype.name} arrays of shape (2, 3) raised {message}"
        ) from err
    expected = (2,) if kind in ("ce", "soft-target") else (2, 3)
    if out.shape != expected:
        raise SignatureError(
            f"{_name(fn)}{call} on shape (2, 3) returned shape {out.shape}; a {kind} function "
            f"must return {expected} (per-row losses, class axis last)"
        )
    return np.dtype(out.dtype)


def _call(tally: _Tally, run: Callable, what: str, *args):
    """run(*args) as NumPy arrays, or None after recording a failure if it raises."""
    try:
        return tuple(np.asarray(a) for a in run(*args))
    except Exception as err:  # a function may reject some hard cases: that is a finding
        first = str(err).splitlines()[0] if str(err) else ""
        tally.fail(f"raises {what}", f"raises {type(err).__name__} on {what}: {first}")
        return None


def _first_dead(tally, computed, exact, m, single) -> float | None:
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
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[tally.dtype.itemsize]
    lo, hi = int(m[i - 1 : i].view(uint)[0]), int(m[i : i + 1].view(uint)[0])
    while hi - lo > 1:  # positive floats order like their bit patterns
        mid = (lo + hi) // 2
        if single(np.array([mid], uint).view(tally.dtype)) == 0:
            hi = mid
        else:
            lo = mid
    return float(np.array([hi], uint).view(tally.dtype)[0])


def _cliff_line(tally, what, at, exact_at) -> None:
    tally.fail(
        f"{what} is 0",
        f"{what}: exactly 0 from m={at:.8g} (logits [m, 0]; precision cliff "
        f"{precision_cliff(tally.dtype):.8g}) where the exact value is {exact_at:.4g}",
    )


def _nan_check(tally, run, kind, dtype) -> bool:
    """A row holding a NaN must give NaN; records a failure if it gives a finite number."""
    z = np.array([[np.nan, 0.0, 1.0]], dtype)
    other = {"ce": np.array([1], np.int32), "soft-target": np.array([[0.0, 0.0, 1.0]], dtype)}
    got = _call(tally, run, "a row holding NaN", z, other.get(kind, np.eye(3, dtype=dtype)[:1]))
    if got is None:
        return False
    propagates = bool(np.isnan(got[0].astype(np.float64)).any())
    if not propagates:
        tally.fail("NaN", f"NaN: logits [nan, 0, 1] give the finite {got[0].tolist()}, not NaN")
    return propagates


def _random_cases(quick: bool, max_k: int = 50_000):
    limit = min(max_k, _QUICK_MAX_K if quick else max_k)
    return [case for case in _CASES if case[0] <= limit]


def _where_row(case, rows=None):
    def where(r, j=None):
        entry = "" if j is None else f", class {int(j)}"
        extra = "" if rows is None else f" {rows[r]}"
        return f"{_describe(case)} (row {r}{extra}{entry})"

    return where


# ----------------------------------------------------------------------------- checks
def check_cross_entropy(
    fn: Callable,
    dtype,
    *,
    max_ulps: float | None = None,
    quick: bool = False,
    reference: Callable | None = None,
) -> CheckResult:
    """Check an integer-label cross-entropy `fn(logits, labels) -> losses` against mpmath.

    Inputs: logits [m, 0] with label 0 for every ulp around `precision_cliff(dtype)` and a
    dense grid of m from -40 to past exponent underflow; random rows (`_CASES`: K from 2
    to 50,000, scales 1e-3 to 10, logits near 1e4, ties, near-ties, -inf classes); a
    row holding NaN. Loss and gradient (of the summed loss) are compared in ulps: within
    `ULPS` (or `max_ulps`) on the margin sweep, plus `general_bound`'s conditioning on
    random rows. The target gradient must not be 0 where the exact one is a normal
    number, the gradients must sum to zero within rounding, a NaN must give NaN and
    finite logits a finite loss.

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

    Returns:
      A `CheckResult`; `.assert_ok()` raises AssertionError listing every failure.

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    dtype = as_dtype(dtype)
    reference = reference or oracle.cross_entropy_value_and_grad
    tally = _Tally("ce", dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    with jax.enable_x64(dtype == np.float64):
        run = _evaluator(fn, "ce")
        out_dtype = _probe(fn, run, "ce", dtype)
        m = _margins(dtype, quick)
        z = np.stack([m, np.zeros_like(m)], -1)
        labels = np.zeros(len(m), np.int32)
        dies = zero = None
        got = _call(tally, run, "the margin sweep", z, labels)
        if got is not None:
            loss, grad = got
            exact_loss, exact_grad = reference(z, labels, exact=True)

            def where(r, *_):
                return f"m={float(m[r]):.8g} (logits [m, 0], label 0)"

            tally.rows += len(m)
            tally.compare("loss", "value", loss, exact_loss, value, z, where)
            tally.compare(
                "target gradient", "grad", grad[:, 0], exact_grad[:, 0], grad_base, z, where
            )
            tally.compare(
                "other gradient", "grad", grad[:, 1], exact_grad[:, 1], grad_base, z, where
            )
            tally.sums(grad, np.full(len(m), grad_base), where)

            def single(index):
                def at(mi):
                    row = np.array([[mi[0], 0]], dtype)
                    return run(row, np.zeros(1, np.int32))[index]

                return at

            dies = _first_dead(tally, grad[:, 0], exact_grad[:, 0], m, lambda v: single(1)(v)[0, 0])
            zero = _first_dead(tally, loss, exact_loss, m, lambda v: single(0)(v)[0])
            for what, at in (("target gradient", dies), ("loss", zero)):
                if at is not None:
                    exact_at = reference(np.array([[at, 0.0]]), np.zeros(1, int))
                    _cliff_line(
                        tally, what, at, exact_at[1][0, 0] if what != "loss" else exact_at[0][0]
                    )
        for case in _random_cases(quick):
            z, labels = _rows(case, dtype, 2, seed=0)
            got = _call(tally, run, _describe(case), z, labels)
            if got is None:
                continue
            loss, grad = got
            exact_loss, exact_grad = reference(z, labels, exact=True)
            k = case[0]
            gaps = _finite_gaps(z)
            is_target = np.arange(k) == labels[:, None]
            conditioning = np.where(is_target, _weighted_gap(gaps, is_target)[:, None], gaps)
            where = _where_row(case)
            tally.rows += len(z)
            tally.compare(
                "loss", "value", loss, exact_loss, _conditioned(value, gaps.max(-1), k), z, where
            )
            grad_bound = _conditioned(grad_base, conditioning, k)
            tally.compare("gradient", "grad", grad, exact_grad, grad_bound, z, where)
            tally.sums(grad, grad_bound.max(-1), where)
        nan = _nan_check(tally, run, "ce", dtype)
    return tally.result(
        grad_dies_at=dies,
        value_zero_at=zero,
        zero_at_teacher=None,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )


def _check_normalizer(fn, dtype, kind, max_ulps, quick) -> CheckResult:
    """`check_softmax` and `check_log_softmax`: `kind` picks the oracle."""
    dtype = as_dtype(dtype)
    log = kind == "log_softmax"
    reference = oracle.log_softmax if log else oracle.softmax
    reference_vjp = oracle.log_softmax_vjp if log else oracle.softmax_vjp
    tally = _Tally(kind, dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["autodiff_grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    with jax.enable_x64(dtype == np.float64):
        run = _evaluator(fn, kind)
        out_dtype = _probe(fn, run, kind, dtype)
        m = _margins(dtype, quick)
        x = np.stack([m, np.zeros_like(m)], -1)
        cotangent = np.broadcast_to(np.array([1, 0], dtype), x.shape)
        dies = zero = None
        got = _call(tally, run, "the margin sweep", x, cotangent)
        if got is not None:
            out, grad = got
            exact = reference(x, exact=True)
            exact_grad = reference_vjp(x, cotangent, exact=True)

            def where(r, j=None):
                entry = "" if j is None else f", entry {int(j)}"
                return f"m={float(m[r]):.8g} (x = [m, 0]{entry})"

            tally.rows += len(m)
            tally.compare(f"{kind}", "value", out, exact, value, x, where)
            for j in range(2):
                what = f"d {kind}[0] / dx{j}"
                tally.compare(what, "grad", grad[:, j], exact_grad[:, j], grad_base, x, where)
            tally.sums(grad, np.full(len(m), grad_base), where)

            def single(index):
                def at(mi):
                    row = np.array([[mi[0], 0]], dtype)
                    return run(row, np.array([[1, 0]], dtype))[index][0, 0]

                return at

            dies = _first_dead(tally, grad[:, 0], exact_grad[:, 0], m, single(1))
            if dies is not None:
                exact_at = reference_vjp(np.array([[dies, 0.0]]), np.array([[1.0, 0.0]]))[0, 0]
                _cliff_line(tally, f"d {kind}[0] / dx0", dies, exact_at)
            if log:
                zero = _first_dead(tally, out[:, 0], exact[:, 0], m, single(0))
                if zero is not None:
                    _cliff_line(tally, f"{kind}[0]", zero, reference(np.array([[zero, 0.0]]))[0, 0])
        for case in _random_cases(quick):
            x, _ = _rows(case, dtype, 2, seed=1)
            k = case[0]
            cotangent = (np.arange(k) == np.argmax(x, -1)[:, None]).astype(dtype)
            got = _call(tally, run, _describe(case), x, cotangent)
            if got is None:
                continue
            gaps = _finite_gaps(x)
            if log:  # log q_k = -gap_k - log1p(S - 1): the sum's conditioning
                is_max = np.arange(k) == np.argmax(x, -1)[:, None]
                gaps = np.broadcast_to(_weighted_gap(gaps, is_max)[:, None], gaps.shape)
            tally.rows += len(x)
            bound = _conditioned(value, gaps, k)
            tally.compare(
                kind, "value", got[0], reference(x, exact=True), bound, x, _where_row(case)
            )
        nan = _nan_check(tally, run, kind, dtype)
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
    tally = _Tally("soft-target", dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    zero_ok = True
    with jax.enable_x64(dtype == np.float64):
        run = _evaluator(fn, "soft-target")
        out_dtype = _probe(fn, run, "soft-target", dtype)
        for case in _random_cases(quick, max_k=1000):
            teacher = np.repeat(_rows(case, dtype, 1, seed=2)[0], len(_DISTANCES), 0)
            noise = np.random.default_rng(case[0]).standard_normal(teacher.shape)
            scales = np.array(_DISTANCES)[:, None]
            with np.errstate(invalid="ignore"):  # -inf + 0 * noise stays -inf
                student = (teacher.astype(np.float64) + scales * noise).astype(dtype)
            student = np.where(np.isfinite(teacher), student, teacher)
            got = _call(tally, run, _describe(case), student, teacher)
            if got is None:
                continue
            loss, grad = got
            exact_loss, exact_grad = oracle.soft_target_cross_entropy_value_and_grad(
                student, teacher, exact=True
            )
            k = case[0]
            gaps = np.maximum(_finite_gaps(student), _finite_gaps(teacher))
            scale_of = np.maximum(oracle.softmax(student), oracle.softmax(teacher))
            diff = np.abs(grad.astype(np.float64) - exact_grad.astype(np.float64))
            # XLA flushes subnormal results to zero: one smallest-normal is the hardware's.
            err = np.maximum(diff - tiny, 0) / oracle.ulp(scale_of, dtype)
            where = _where_row(case, [f"distance {d:g}" for d in _DISTANCES])
            tally.rows += len(student)
            loss_bound = _conditioned(value, gaps.max(-1), k) + np.log2(k)
            tally.compare("loss", "value", loss, exact_loss, loss_bound, student, where)
            grad_bound = _conditioned(grad_base, gaps, k) + 2 * np.log2(k)
            tally.compare("gradient", "grad", grad, exact_grad, grad_bound, student, where, err)
            tally.sums(grad, grad_bound.max(-1), where)
            residual = np.abs(grad[0].astype(np.float64)).max()
            if residual != 0:
                zero_ok = False
                tally.fail(
                    "not zero at teacher",
                    f"gradient at student = teacher: largest |g| {residual:.3g}, not exactly 0, "
                    f"at {where(0)}",
                )
        nan = _nan_check(tally, run, "soft-target", dtype)
    return tally.result(
        grad_dies_at=None,
        value_zero_at=None,
        zero_at_teacher=zero_ok,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )


CHECKS: dict[str, Callable[..., CheckResult]] = {
    "ce": check_cross_entropy,
    "softmax": check_softmax,
    "log_softmax": check_log_softmax,
    "soft-target": check_soft_target_cross_entropy,
}
"""The check for each of `KINDS`."""


# ----------------------------------------------------------------------------- strategies
def _strategies():
    try:
        from hypothesis import strategies
    except ImportError as err:
        raise ImportError(
            "numerics.testing's strategies need hypothesis, which `pip install grokbench` "
            "does not install: pip install 'grokbench[testing]' (hypothesis==6.170.17)"
        ) from err
    return strategies


_SIZES = (2, 3, 10, 100, 1000, 50_000)


def labelled_logits(dtype, *, sizes=_SIZES, batch: int = 2):
    """Hypothesis strategy of (logits (batch, K) of `dtype`, labels (batch,) int32): hard cases.

    Each example plants a margin from -40 to past exponent underflow on a random target,
    at a logit scale of 1e-3 to 10, sometimes offset by 1e4 (huge logits), with the
    target sometimes tied at the max or one ulp above another class, or with three
    classes at -inf. K is drawn from `sizes` (few distinct shapes, so few compilations).
    The rows come from a seeded NumPy generator, so shrinking works on the parameters.

    Example:
      >>> from hypothesis import given, settings
      >>> @settings(max_examples=5, derandomize=True)
      ... @given(labelled_logits("bf16", sizes=(3,)))
      ... def test(case):
      ...     logits, labels = case
      ...     assert logits.shape == (2, 3) and labels.shape == (2,)
      >>> test()

    Args:
      dtype: 'bf16', 'fp16', 'fp32', 'fp64' or NumPy's names and dtypes.
      sizes: the numbers of classes K to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy. Raises ImportError, saying how to install it, without
      hypothesis.
    """
    return _planted_rows(dtype, sizes, batch, _VARIANTS)


def _planted_rows(dtype, sizes, batch: int, variants):
    st = _strategies()
    dtype = as_dtype(dtype)
    underflow = -math.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    params = st.tuples(
        st.sampled_from(sizes),
        st.sampled_from([1e-3, 0.1, 1.0, 10.0]),  # logit scale
        st.floats(-40.0, 1.05 * underflow),  # planted margin
        st.sampled_from([0.0, 1e4]),  # offset: huge logits
        st.sampled_from(variants),
        st.integers(0, 2**32 - 1),  # seed of the rows
    )
    return params.map(lambda p: _rows(p[:5], dtype, batch, p[5]))


def logits(dtype, *, sizes=_SIZES, batch: int = 2):
    """Hypothesis strategy of logits (batch, K) of `dtype`: the rows of `labelled_logits`.

    Args:
      dtype: as `labelled_logits`.
      sizes: the numbers of classes K to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy of NumPy arrays.
    """
    return labelled_logits(dtype, sizes=sizes, batch=batch).map(lambda case: case[0])


def masked_logits(dtype, *, sizes=tuple(k for k in _SIZES if k > 4), batch: int = 2):
    """Hypothesis strategy of (logits, labels, where): three classes per row masked out.

    The masked entries hold a finite value above the row's max, so a function that
    ignores `where` gives a visibly wrong result. The target is never masked.

    Args:
      dtype: as `labelled_logits`.
      sizes: the numbers of classes K (> 4) to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy of (logits (batch, K), labels (batch,), where (batch, K) bool).
    """

    def unmask(case):
        z, labels = case
        where = ~np.isneginf(z)
        top = np.max(np.where(where, z, -np.inf), -1, keepdims=True).astype(np.float64)
        return np.where(where, z, (top + 1.0).astype(z.dtype)), labels, where

    return _planted_rows(dtype, sizes, batch, ("masked",)).map(unmask)


def student_teacher(dtype, *, distance=None, sizes=_SIZES[:-1], batch: int = 2):
    """Hypothesis strategy of (student, teacher) logits (batch, K) at a chosen distance.

    Teachers are `logits` rows without -inf classes; the student is the teacher plus
    `distance` times standard normal noise, rounded to the dtype. `distance` None draws
    it from 0 (student == teacher, bit for bit), 1e-6, 1e-3, 0.1 and 1.

    Args:
      dtype: as `labelled_logits`.
      distance: the noise scale, or None to draw it.
      sizes: the numbers of classes K to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy of (student, teacher) NumPy arrays of `dtype`.
    """
    st = _strategies()
    distances = (
        st.sampled_from([0.0, 1e-6, 1e-3, 0.1, 1.0]) if distance is None else st.just(distance)
    )
    teachers = _planted_rows(dtype, sizes, batch, (None, "tie", "near-tie"))

    def perturb(args):
        (teacher, _), scale, seed = args
        noise = np.random.default_rng(seed).standard_normal(teacher.shape)
        return (teacher.astype(np.float64) + scale * noise).astype(teacher.dtype), teacher

    return st.tuples(teachers, distances, st.integers(0, 2**32 - 1)).map(perturb)
