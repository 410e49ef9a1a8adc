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

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from numerics import _testing, oracle
from numerics._cliffs import precision_cliff
from numerics._testing import CheckResult as CheckResult
from numerics._testing import SignatureError as SignatureError

__all__ = [
    "CAP_ULPS",
    "CHECKS",
    "DTYPES",
    "KINDS",
    "LINEAR_MAX_K",
    "OPTIONS",
    "OPTION_ULPS",
    "ULPS",
    "CheckResult",
    "SignatureError",
    "as_dtype",
    "assert_ulp_close",
    "check_cross_entropy",
    "check_linear_cross_entropy",
    "check_log_softmax",
    "check_option_cross_entropy",
    "check_soft_target_cross_entropy",
    "check_softmax",
    "general_bound",
    "labelled_logits",
    "logits",
    "masked_logits",
    "option_conditioning",
    "student_teacher",
]

DTYPES = tuple(np.dtype(d) for d in (ml_dtypes.bfloat16, np.float16, np.float32, np.float64))
"""The float dtypes every check and strategy covers: bfloat16, float16, float32, float64."""

_SHORT = dict(zip(("bf16", "fp16", "fp32", "fp64"), DTYPES, strict=True))

KINDS = (
    "ce",
    "softmax",
    "log_softmax",
    "soft-target",
    "z-loss",
    "soft-cap",
    "label-smoothing",
    "linear-ce",
)
"""What a checked function computes: integer-label cross-entropy, softmax, log-softmax,
soft-target (student, teacher) cross-entropy, cross-entropy with a z-loss, with
soft-capped logits or with label smoothing (`OPTIONS`), and a fused linear cross-entropy
fn(hidden, weight, labels)."""

ULPS = {
    # log1p of a ratio of two sums: a division, a log1p and a final rounding.
    "value": dict.fromkeys(DTYPES, 2.0),
    # e^(z_j - z_max) times a per-row scale cotangent / S: exp, one division, one
    # multiply, each up to half an ulp, plus the rounding of S itself.
    "grad": dict.fromkeys(DTYPES, 3.0),
    # log_softmax / softmax gradients come from a tangent rule: probabilities (each a
    # few roundings), a centred sum and one or two products, each rounded.
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
    return _testing.conditioned(ULPS[kind][np.dtype(dtype)], exponent_args, num_classes)


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
    err, wrong = _testing.ulp_errors(actual, expected, dtype)
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


# ----------------------------------------------------------------------------- checks
OPTIONS = {
    "z-loss": {"z_loss": 1e-4},
    "soft-cap": {"soft_cap": 30.0},
    "label-smoothing": {"label_smoothing": 0.1},
}
"""The option each kind of `OPTION_KINDS` checks, at the value trainers use: T5X's z-loss
weight 1e-4, Gemma 2's final-logit cap 30, label smoothing 0.1 (Szegedy et al.)."""

OPTION_ULPS = {
    # z-loss: lse = M + log S within 1.5 ulps, squared, scaled and added (three more
    # roundings): 4.5 in all. Smoothing: log S, the mean gap and three products.
    "value": 2.5,
    # (1 + 2 w lse) rounds once before it multiplies q_j, and the option's term adds one
    # more rounding at the target; under a cap, sech^2 = 1 / cosh^2 (cosh, a division,
    # a square) and one product.
    "grad": 3.0,
}
"""Ulps added to `ULPS` when an option (z-loss, soft cap, label smoothing) is checked.

Option gradients are measured in ulps of the largest term they are formed from (as the
soft-target gradient is, in ulps of max(p, q)): the z-loss target gradient -S_others / S
+ 2 w lse q_t and the smoothed q_j - alpha / n cancel near their equilibria, where no
implementation given rounded inputs can do better. Under a cap the capped logits
z' = c tanh(z / c) are themselves rounded, by up to `CAP_ULPS` ulps of z', which e^(z' -
max z') turns into CAP_ULPS |z'| ulps of every value and gradient (|z'| < c), as
`general_bound` adds |z_j - z_max|; the slope sech^2(z / c) adds 3 |z / c| + 2 ulps."""

CAP_ULPS = 8.0
"""Ulps of z' in the capped logit c tanh(z / c): XLA's tanh, measured on this project's CPU
up to 3.9 ulps in float32 and 6.5 in float64 (not correctly rounded), plus the rounding of
z / c (conditioning at most 1) and of the product by c. The slope sech^2(u) = 1 / cosh^2(u)
inherits the rounding of u = z / c times its conditioning 2 |u|, and XLA's cosh (measured
to 3 |u| + 2 in all): the `3 |z / c| + 2` of `OPTION_ULPS`."""


def option_conditioning(z: np.ndarray, labels: np.ndarray, **options):
    """For logits z (rows, K) and labels, with the options of `numerics.cross_entropy`:
    the ulps added to the value bound (rows,) and to the gradient bound (rows, K) under a
    cap (`CAP_ULPS`), and the scale (the largest term) each gradient entry is formed from
    (rows, K), in whose ulps option gradients are measured; all float64.

    Example:
      >>> import numpy as np
      >>> value, grad, scale = option_conditioning(np.array([[20.0, 0.0]]), np.array([0]),
      ...                                          z_loss=1e-4)
      >>> float(value[0]), round(float(scale[0, 0]), 6)  # 2 w lse q_t ~ 0.004 dominates
      (0.0, 0.004)
    """
    z64 = z.astype(np.float64)
    cap = options.get("soft_cap")
    w, alpha = options.get("z_loss", 0.0), options.get("label_smoothing", 0.0)
    zc = cap * np.tanh(z64 / cap) if cap else z64
    finite = np.isfinite(zc)
    k = z.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        top = np.max(np.where(finite, zc, -np.inf), -1, keepdims=True)
        e = np.where(finite, np.exp(zc - top), 0.0)
        total = e.sum(-1, keepdims=True)
        q = e / total
        lse = top + np.log(total)
        is_t = np.arange(k) == labels[:, None]
        others = np.where(is_t, 0.0, e).sum(-1, keepdims=True) / total
        q_t = np.where(is_t, q, 0.0).sum(-1, keepdims=True)
        terms = [np.where(is_t, others, q * (1 + 2 * w * lse))]
        if w:
            terms.append(np.where(is_t, 2 * w * lse * q_t, 0.0))
        if alpha:
            terms.append(np.where(is_t, alpha * (k - 1) / k, alpha / k))
        scale = np.max(np.abs(np.stack(terms)), 0)
        if cap:
            scale = scale / np.cosh(z64 / cap) ** 2
            conditioning = CAP_ULPS * np.max(np.where(finite, np.abs(zc), 0.0), -1)
            slope = np.where(np.isfinite(z64), 3 * np.abs(z64 / cap) + 2, 0.0)
            grad_conditioning = conditioning[:, None] + slope
        else:
            conditioning = np.zeros(len(z))
            grad_conditioning = np.zeros(z.shape)
    return conditioning, grad_conditioning, np.nan_to_num(scale)


def _scaled_error(grad, exact, scale, dtype) -> np.ndarray:
    """|grad - exact| in ulps of `scale` (one smallest normal forgiven: flush to zero)."""
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    diff = np.abs(np.asarray(grad, np.float64) - np.asarray(exact).astype(np.float64))
    with np.errstate(invalid="ignore"):
        return np.maximum(diff - tiny, 0) / oracle.ulp(np.maximum(scale, tiny), dtype)


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
    tally = _testing.Tally(kind, dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["grad"][dtype]
    if options:
        value, grad_base = value + OPTION_ULPS["value"], grad_base + OPTION_ULPS["grad"]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    zero_sum = not ({"z_loss", "soft_cap"} & set(options))

    def grad_errors(z, labels, grad, exact_grad):
        """(value conditioning (rows,), gradient conditioning (rows, K), gradient errors,
        scale) for the options; zeros and None without options."""
        if not options:
            return 0.0, 0.0, None, None
        conditioning, grad_conditioning, scale = option_conditioning(z, labels, **options)
        err = _scaled_error(grad, exact_grad, scale, dtype)
        return conditioning, grad_conditioning, err, scale

    with jax.enable_x64(dtype == np.float64):
        run = _testing.evaluator(fn, "ce")
        out_dtype = _testing.probe(fn, run, "ce", dtype)
        m = _testing.margin_sweep(dtype, quick)
        z = np.stack([m, np.zeros_like(m)], -1)
        labels = np.zeros(len(m), np.int32)
        dies = zero = None
        got = _testing.run_or_fail(tally, run, "the margin sweep", z, labels)
        if got is not None:
            loss, grad = got
            exact_loss, exact_grad = reference(z, labels, exact=True)
            cond, grad_cond, err, scale = grad_errors(z, labels, grad, exact_grad)

            def where(r, *_):
                return f"m={float(m[r]):.8g} (logits [m, 0], label 0)"

            tally.rows += len(m)
            tally.compare("loss", "value", loss, exact_loss, value + cond, z, where)
            for j, what in enumerate(("target gradient", "other gradient")):
                bound = grad_base + (0.0 if err is None else grad_cond[:, j])
                tally.compare(
                    what,
                    "grad",
                    grad[:, j],
                    exact_grad[:, j],
                    bound,
                    z,
                    where,
                    None if err is None else err[:, j],
                )
            if zero_sum:
                tally.sums(grad, np.full(len(m), grad_base), where)

            def single(index):
                def at(mi):
                    row = np.array([[mi[0], 0]], dtype)
                    return run(row, np.zeros(1, np.int32))[index]

                return at

            exact_t = exact_grad[:, 0]
            if scale is not None:
                # Near an option's equilibrium the exact gradient is a cancellation; a 0
                # there is within the bound and no collapse.
                ulp_scale = oracle.ulp(scale[:, 0], dtype) * (grad_base + grad_cond[:, 0])
                exact_t = np.where(np.abs(exact_t.astype(np.float64)) > ulp_scale, exact_t, 0.0)
            dies = _testing.first_dead(tally, grad[:, 0], exact_t, m, lambda v: single(1)(v)[0, 0])
            zero = _testing.first_dead(tally, loss, exact_loss, m, lambda v: single(0)(v)[0])
            for what, at in (("target gradient", dies), ("loss", zero)):
                if at is not None:
                    exact_at = reference(np.array([[at, 0.0]]), np.zeros(1, int))
                    _testing.cliff_line(
                        tally,
                        what,
                        at,
                        exact_at[1][0, 0] if what != "loss" else exact_at[0][0],
                        _capped_cliff(dtype, soft_cap),
                    )
        for case in _testing.random_cases(quick, max_k):
            if kind == "linear-ce" and case[4] == "masked":
                continue  # -inf hidden times the identity's zeros is NaN, not a masked class
            z, labels = _testing.plant_rows(case, dtype, 2, seed=0)
            got = _testing.run_or_fail(tally, run, _testing.describe(case), z, labels)
            if got is None:
                continue
            loss, grad = got
            exact_loss, exact_grad = reference(z, labels, exact=True)
            cond, grad_cond, err, _ = grad_errors(z, labels, grad, exact_grad)
            k = case[0]
            zc = soft_cap * np.tanh(z.astype(np.float64) / soft_cap) if soft_cap else z
            gaps = _testing.finite_gaps(zc)
            is_target = np.arange(k) == labels[:, None]
            conditioning = np.where(
                is_target, _testing.weighted_gap(gaps, is_target)[:, None], gaps
            )
            where = _testing.where_row(case)
            tally.rows += len(z)
            tally.compare(
                "loss",
                "value",
                loss,
                exact_loss,
                _testing.conditioned(value, gaps.max(-1) + cond, k),
                z,
                where,
            )
            grad_bound = _testing.conditioned(grad_base, conditioning + grad_cond, k)
            tally.compare("gradient", "grad", grad, exact_grad, grad_bound, z, where, err)
            if zero_sum:
                tally.sums(grad, grad_bound.max(-1), where)
        nan = _testing.nan_check(tally, run, "ce", dtype)
    return tally.result(
        grad_dies_at=dies,
        value_zero_at=zero,
        zero_at_teacher=None,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )


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


LINEAR_MAX_K = 1000
"""The largest vocabulary of `check_linear_cross_entropy`'s random rows (its weight is the
(K, K) identity)."""


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

    through_identity.__qualname__ = _testing.fn_name(fn)
    check = {"max_k": LINEAR_MAX_K, "kind": "linear-ce", **check}
    return check_cross_entropy(through_identity, dtype, **check)


def _check_normalizer(fn, dtype, kind, max_ulps, quick) -> CheckResult:
    """`check_softmax` and `check_log_softmax`: `kind` picks the oracle."""
    dtype = as_dtype(dtype)
    log = kind == "log_softmax"
    reference = oracle.log_softmax if log else oracle.softmax
    reference_vjp = oracle.log_softmax_vjp if log else oracle.softmax_vjp
    tally = _testing.Tally(kind, dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["autodiff_grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    with jax.enable_x64(dtype == np.float64):
        run = _testing.evaluator(fn, kind)
        out_dtype = _testing.probe(fn, run, kind, dtype)
        m = _testing.margin_sweep(dtype, quick)
        x = np.stack([m, np.zeros_like(m)], -1)
        cotangent = np.broadcast_to(np.array([1, 0], dtype), x.shape)
        dies = zero = None
        got = _testing.run_or_fail(tally, run, "the margin sweep", x, cotangent)
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

            dies = _testing.first_dead(tally, grad[:, 0], exact_grad[:, 0], m, single(1))
            if dies is not None:
                exact_at = reference_vjp(np.array([[dies, 0.0]]), np.array([[1.0, 0.0]]))[0, 0]
                _testing.cliff_line(tally, f"d {kind}[0] / dx0", dies, exact_at)
            if log:
                zero = _testing.first_dead(tally, out[:, 0], exact[:, 0], m, single(0))
                if zero is not None:
                    _testing.cliff_line(
                        tally, f"{kind}[0]", zero, reference(np.array([[zero, 0.0]]))[0, 0]
                    )
        for case in _testing.random_cases(quick):
            x, _ = _testing.plant_rows(case, dtype, 2, seed=1)
            k = case[0]
            cotangent = (np.arange(k) == np.argmax(x, -1)[:, None]).astype(dtype)
            got = _testing.run_or_fail(tally, run, _testing.describe(case), x, cotangent)
            if got is None:
                continue
            gaps = _testing.finite_gaps(x)
            if log:  # log q_k = -gap_k - log1p(S - 1): the sum's conditioning
                is_max = np.arange(k) == np.argmax(x, -1)[:, None]
                gaps = np.broadcast_to(_testing.weighted_gap(gaps, is_max)[:, None], gaps.shape)
            tally.rows += len(x)
            bound = _testing.conditioned(value, gaps, k)
            tally.compare(
                kind, "value", got[0], reference(x, exact=True), bound, x, _testing.where_row(case)
            )
        nan = _testing.nan_check(tally, run, kind, dtype)
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
    tally = _testing.Tally("soft-target", dtype)
    value, grad_base = ULPS["value"][dtype], ULPS["grad"][dtype]
    if max_ulps is not None:
        value = grad_base = float(max_ulps)
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    zero_ok = True
    with jax.enable_x64(dtype == np.float64):
        run = _testing.evaluator(fn, "soft-target")
        out_dtype = _testing.probe(fn, run, "soft-target", dtype)
        for case in _testing.random_cases(quick, max_k=1000):
            teacher = np.repeat(_testing.plant_rows(case, dtype, 1, seed=2)[0], len(_DISTANCES), 0)
            noise = np.random.default_rng(case[0]).standard_normal(teacher.shape)
            scales = np.array(_DISTANCES)[:, None]
            with np.errstate(invalid="ignore"):  # -inf + 0 * noise stays -inf
                student = (teacher.astype(np.float64) + scales * noise).astype(dtype)
            student = np.where(np.isfinite(teacher), student, teacher)
            got = _testing.run_or_fail(tally, run, _testing.describe(case), student, teacher)
            if got is None:
                continue
            loss, grad = got
            exact_loss, exact_grad = oracle.soft_target_cross_entropy_value_and_grad(
                student, teacher, exact=True
            )
            k = case[0]
            gaps = np.maximum(_testing.finite_gaps(student), _testing.finite_gaps(teacher))
            scale_of = np.maximum(oracle.softmax(student), oracle.softmax(teacher))
            diff = np.abs(grad.astype(np.float64) - exact_grad.astype(np.float64))
            # XLA flushes subnormal results to zero: one smallest-normal is the hardware's.
            err = np.maximum(diff - tiny, 0) / oracle.ulp(scale_of, dtype)
            where = _testing.where_row(case, [f"distance {d:g}" for d in _DISTANCES])
            tally.rows += len(student)
            loss_bound = _testing.conditioned(value, gaps.max(-1), k) + np.log2(k)
            tally.compare("loss", "value", loss, exact_loss, loss_bound, student, where)
            grad_bound = _testing.conditioned(grad_base, gaps, k) + 2 * np.log2(k)
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
        nan = _testing.nan_check(tally, run, "soft-target", dtype)
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
    **{kind: functools.partial(check_option_cross_entropy, kind=kind) for kind in OPTIONS},
    "linear-ce": check_linear_cross_entropy,
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
    return _planted_rows(dtype, sizes, batch, _testing.VARIANTS)


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
    return params.map(lambda p: _testing.plant_rows(p[:5], dtype, batch, p[5]))


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
