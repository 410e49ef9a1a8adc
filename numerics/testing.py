"""Test anyone's softmax and cross-entropy against the mpmath oracle (as numpy.testing, chex).

Three kinds of tools, for a user's own pytest suite:

- **Checks.** `check_cross_entropy(fn, dtype)`, `check_softmax`, `check_log_softmax`, their
  sink forms `check_sink_softmax` and `check_sink_log_softmax` (fn(x, sink=s)),
  `check_soft_target_cross_entropy` and the divergences' `check_kl_divergence`,
  `check_reverse_kl_divergence` and `check_js_divergence`, and the per-token
  `check_log_prob` and `check_entropy`, call any function with the
  standard signature on the hard cases (margins from -40 to past exponent underflow
  with every ulp around `precision_cliff(dtype)`, K from 2 to 50,000, tiny and huge
  logit scales, ties and near-ties at the max, -inf entries, NaN, student/teacher pairs
  at distance 0) and compare values and gradients with `numerics.oracle`. Each returns
  a `CheckResult`; one line in a test asserts it:
  `check_cross_entropy(my_loss, "bf16").assert_ok()`.
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
from collections.abc import Callable

import numpy as np

from numerics import _check_cross_entropy, _check_tolerances
from numerics._check_cross_entropy import check_cross_entropy as check_cross_entropy
from numerics._check_cross_entropy import check_linear_cross_entropy as check_linear_cross_entropy
from numerics._check_cross_entropy import (
    check_option_cross_entropy as check_option_cross_entropy,
)
from numerics._check_divergence import check_js_divergence as check_js_divergence
from numerics._check_divergence import check_kl_divergence as check_kl_divergence
from numerics._check_divergence import (
    check_reverse_kl_divergence as check_reverse_kl_divergence,
)
from numerics._check_normalizers import check_log_softmax as check_log_softmax
from numerics._check_normalizers import check_sink_log_softmax as check_sink_log_softmax
from numerics._check_normalizers import check_sink_softmax as check_sink_softmax
from numerics._check_normalizers import check_softmax as check_softmax
from numerics._check_per_token import check_entropy as check_entropy
from numerics._check_per_token import check_log_prob as check_log_prob
from numerics._check_soft_target import (
    check_soft_target_cross_entropy as check_soft_target_cross_entropy,
)
from numerics._check_tally import CheckResult as CheckResult
from numerics._check_tally import SignatureError as SignatureError
from numerics._check_tolerances import as_dtype as as_dtype
from numerics._check_tolerances import conditioned_bound, ulp_errors
from numerics._check_tolerances import option_conditioning as option_conditioning
from numerics._strategies import labelled_logits as labelled_logits
from numerics._strategies import logits as logits
from numerics._strategies import masked_logits as masked_logits
from numerics._strategies import student_teacher as student_teacher

__all__ = [
    "CAP_ULPS",
    "CHECKS",
    "DTYPES",
    "FLOAT8_DTYPES",
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
    "check_entropy",
    "check_js_divergence",
    "check_kl_divergence",
    "check_linear_cross_entropy",
    "check_log_prob",
    "check_log_softmax",
    "check_option_cross_entropy",
    "check_reverse_kl_divergence",
    "check_sink_log_softmax",
    "check_sink_softmax",
    "check_soft_target_cross_entropy",
    "check_softmax",
    "general_bound",
    "labelled_logits",
    "logits",
    "masked_logits",
    "option_conditioning",
    "student_teacher",
]

DTYPES = _check_tolerances.DTYPES
"""The float dtypes every check and strategy covers: bfloat16, float16, float32, float64."""

FLOAT8_DTYPES = _check_tolerances.FLOAT8_DTYPES
"""The float8 formats the checks also take ('e4m3fn', 'e5m2'), as storage dtypes: a function
gets float8 logits and returns float8; with 256 values each, the margin sweep is every
finite value. The other 8-bit formats (fnuz, e3m4, e8m0) are refused."""

KINDS = (
    "ce",
    "softmax",
    "log_softmax",
    "soft-target",
    "z-loss",
    "soft-cap",
    "label-smoothing",
    "linear-ce",
    "kl",
    "reverse-kl",
    "js",
    "sink-softmax",
    "sink-log_softmax",
    "log-prob",
    "entropy",
)
"""What a checked function computes: integer-label cross-entropy, softmax, log-softmax,
soft-target (student, teacher) cross-entropy, cross-entropy with a z-loss, with
soft-capped logits or with label smoothing (`OPTIONS`), a fused linear cross-entropy
fn(hidden, weight, labels), the distillation divergences KL(p || q), KL(q || p) and
Jensen-Shannon, fn(student_logits, teacher_logits), the softmax and log-softmax with a
sink logit s per row in the denominator (softmax off by one, attention sinks),
fn(x, sink=s), and the per-token outputs RL trainers take, the label's log-probability
fn(logits, labels) and the softmax's entropy fn(logits)."""

ULPS = _check_tolerances.ULPS
"""Bounds in ulps of each dtype for inputs whose differences z_j - z_max are exact.

Errors are |computed - exact| / ulp(exact), `exact` from `numerics.oracle`. Each output
is a short chain of correctly-rounded-or-nearly operations (XLA's exp/log1p are within
about 1 ulp; 16-bit types evaluate them in f32 and round once), so a few roundings add
up. A computed 0 where the exact value is below the smallest normal counts as exact:
XLA's CPU kernels flush subnormal results to zero."""


OPTIONS = _check_tolerances.OPTIONS
"""The option each kind of `OPTION_KINDS` checks, at the value trainers use: T5X's z-loss
weight 1e-4, Gemma 2's final-logit cap 30, label smoothing 0.1 (Szegedy et al.)."""


OPTION_ULPS = _check_tolerances.OPTION_ULPS
"""Ulps added to `ULPS` when an option (z-loss, soft cap, label smoothing) is checked.

Option gradients are measured in ulps of the largest term they are formed from (as the
soft-target gradient is, in ulps of max(p, q)): the z-loss target gradient -S_others / S
+ 2 w lse q_t and the smoothed q_j - alpha / n cancel near their equilibria, where no
implementation given rounded inputs can do better. Under a cap the capped logits
z' = c tanh(z / c) are themselves rounded, by up to `CAP_ULPS` ulps of z', which e^(z' -
max z') turns into CAP_ULPS |z'| ulps of every value and gradient (|z'| < c), as
`general_bound` adds |z_j - z_max|; the slope sech^2(z / c) adds 3 |z / c| + 2 ulps."""


CAP_ULPS = _check_tolerances.CAP_ULPS
"""Ulps of z' in the capped logit c tanh(z / c): XLA's tanh, measured on this project's CPU
up to 3.9 ulps in float32 and 6.5 in float64 (not correctly rounded), plus the rounding of
z / c (conditioning at most 1) and of the product by c. The slope sech^2(u) = 1 / cosh^2(u)
inherits the rounding of u = z / c times its conditioning 2 |u|, and XLA's cosh (measured
to 3 |u| + 2 in all): the `3 |z / c| + 2` of `OPTION_ULPS`."""

LINEAR_MAX_K = _check_cross_entropy.LINEAR_MAX_K
"""The largest vocabulary of `check_linear_cross_entropy`'s random rows (its weight is the
(K, K) identity)."""


def general_bound(kind: str, dtype, exponent_args, num_classes: int) -> np.ndarray:
    """Per-element bound for general inputs: `ULPS[kind][dtype]` plus conditioning.

    For general inputs z_j - z_max is itself rounded (relative error up to 2^-p), and
    exp turns that into a relative error |z_j - z_max| 2^-p of its result: between
    |z_j - z_max| / 2 and |z_j - z_max| ulps. Any implementation working in the dtype
    inherits it. Sums over K terms add about log2(K) roundings.
    """
    return conditioned_bound(ULPS[kind][np.dtype(dtype)], exponent_args, num_classes)


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
    err, wrong = ulp_errors(actual, expected, dtype)
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


CHECKS: dict[str, Callable[..., CheckResult]] = {
    "ce": check_cross_entropy,
    "softmax": check_softmax,
    "log_softmax": check_log_softmax,
    "soft-target": check_soft_target_cross_entropy,
    **{kind: functools.partial(check_option_cross_entropy, kind=kind) for kind in OPTIONS},
    "linear-ce": check_linear_cross_entropy,
    "kl": check_kl_divergence,
    "reverse-kl": check_reverse_kl_divergence,
    "js": check_js_divergence,
    "sink-softmax": check_sink_softmax,
    "sink-log_softmax": check_sink_log_softmax,
    "log-prob": check_log_prob,
    "entropy": check_entropy,
}
"""The check for each of `KINDS`."""
