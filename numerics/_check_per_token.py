"""The check of a per-token log-probability and entropy (`grokbench audit --kind log-prob`,
`--kind entropy`) and the entropy's error model, shared with tests/numerics/test_per_token.py
(whose docstring derives it: u the compute dtype's unit roundoff, XLA's exp and log1p within
`EXP_U` and `LOG_U` u, every sum's and product's rounding, flushed terms lost whole)."""

from __future__ import annotations

import fractions
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from numerics import _check_calls as calls
from numerics import _check_cases as cases
from numerics import oracle
from numerics._check_cross_entropy import check_cross_entropy
from numerics._check_tally import CheckResult, SignatureError, Tally, fail_zero_from
from numerics._check_tolerances import as_dtype

EXP_U, LOG_U = 3.0, 3.0
"""XLA's exp and `log1p_of_sum` within 1.5 ulps: 3 u relative (docs/studies/softmax-accuracy.md)."""

SIXTEEN_BIT = (np.dtype(jnp.bfloat16), np.dtype(jnp.float16))


def _ctype(dtype):
    return np.dtype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)


def _half(dtype) -> float:
    return 0.5 if np.dtype(dtype) in SIXTEEN_BIT else 0.0


def inexact_gaps(z: np.ndarray, dtype) -> np.ndarray:
    """Per entry: whether z_max - z_j rounds in the compute dtype (exact arithmetic)."""
    ctype = _ctype(dtype).type
    z = z.astype(np.float64)
    finite = np.where(np.isfinite(z), z, -np.inf)
    top = finite.max(-1)
    out = np.zeros(z.shape, bool)
    for index in np.ndindex(z.shape):
        a, m = z[index], top[index[:-1]]
        if np.isfinite(a) and np.isfinite(m):
            rounded = fractions.Fraction(float(ctype(m) - ctype(a)))
            out[index] = rounded != fractions.Fraction(float(m)) - fractions.Fraction(float(a))
    return out


def entropy_bounds(z, dtype, exact_h, exact_grad, where=None, inexact=None):
    """(value bound per row, gradient bound per entry), in ulps of the exact results, from
    the error model of the module docstring. Rows without a finite max get 0 (exact)."""
    ctype = _ctype(dtype)
    u = 2.0 ** -(np.finfo(ctype).nmant + 1)
    tiny = float(np.finfo(ctype).smallest_normal)
    z = z.astype(np.float64)
    kept = np.ones(z.shape, bool) if where is None else np.broadcast_to(where, z.shape)
    live = np.where(kept, z, -np.inf)
    top = live.max(-1, keepdims=True)
    ok = np.isfinite(top)
    with np.errstate(invalid="ignore", over="ignore"):
        g = np.where(kept & np.isfinite(live) & ok, np.where(ok, top, 0.0) - live, np.inf)
        e = np.exp(-g)
        t = np.where(e > 0, g * e, 0.0)
    inexact = np.zeros(z.shape, bool) if inexact is None else inexact
    c = np.where(inexact & np.isfinite(g), g, 0.0)
    at_max = np.zeros(z.shape, bool)
    np.put_along_axis(at_max, np.argmax(live, -1)[..., None], True, -1)
    others = np.where(at_max, 0.0, e)
    s_others = others.sum(-1, keepdims=True)
    s = 1 + s_others
    big_t = t.sum(-1, keepdims=True)
    a = big_t / s
    log2k = np.log2(max(z.shape[-1], 2))
    e_s = ((EXP_U + c) * others).sum(-1, keepdims=True) + (log2k + 1) * s_others
    e_t = ((EXP_U + 1 + c + inexact) * t).sum(-1, keepdims=True) + log2k * big_t
    lost_e = (e > 0) & (e < tiny)
    lost_t = (t > 0) & ((t < tiny) | lost_e)
    f_s = np.where(lost_e & ~at_max, e, 0.0).sum(-1, keepdims=True)
    f_t = np.where(lost_t, t, 0.0).sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel_t = np.where(big_t > 0, e_t / np.where(big_t > 0, big_t, 1.0), 0.0)
    d_l = u * (LOG_U * np.log1p(s_others) + e_s / s) + f_s / s
    d_a = u * a * (rel_t + e_s / s + 2) + (f_t + a * f_s) / s
    h = exact_h.astype(np.float64)[..., None]
    d_h = d_l + d_a + u * np.abs(h)
    value = np.where(ok, d_h / oracle.ulp(h, dtype) + _half(dtype), 0.0)[..., 0]

    grad = np.abs(exact_grad.astype(np.float64))
    p = e / s
    rel_p = u * (EXP_U + c + 2 + e_s / s) + f_s / s
    d_grad = grad * (rel_p + u) + p * (u * c + d_a) + u * grad
    lost = lost_e | ((p > 0) & (p < tiny))
    d_grad = np.where(lost, np.maximum(d_grad, grad), d_grad)
    grad_bound = np.where(ok, d_grad / oracle.ulp(grad, dtype) + _half(dtype), 0.0)
    return value, grad_bound


PER_TOKEN_MAX_K = 1000
"""The largest K of the random rows in the entropy check (its error model is per entry)."""


def check_log_prob(fn: Callable, dtype, **check) -> CheckResult:
    """Check a per-token log-probability `fn(logits, labels) -> log p_label` against mpmath.

    log p_y = -CE exactly (negation rounds nothing), so this is `check_cross_entropy` of
    -fn with its bounds and cases, the failures named for log_prob: where the value is
    exactly 0 though the exact -log1p(e^-m) is a normal number (the standard
    `log_softmax(z)[y]` past the precision cliff), and where the target gradient
    1 - p_y is.

    Example:
      >>> import numerics
      >>> check_log_prob(numerics.log_prob, "bf16", quick=True).ok
      True

    Args:
      fn: called as fn(logits_NxK, labels_N).
      dtype: as `check_cross_entropy`.
      **check: `check_cross_entropy`'s keywords (max_ulps, quick, max_k).

    Returns:
      A `CheckResult` of kind "log-prob".
    """

    def negated(logits, labels):
        return -fn(logits, labels)

    negated.__qualname__ = calls.fn_name(fn)
    return check_cross_entropy(negated, dtype, **{"kind": "log-prob", **check})


def _entropy_runner(fn: Callable) -> Callable:
    def run(x):
        out, vjp = jax.vjp(fn, x)
        return out, vjp(jnp.ones_like(out))[0]

    return jax.jit(run)


def _probe(fn: Callable, run: Callable, dtype) -> np.dtype:
    z = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -1.0]], dtype)
    try:
        out, _ = run(z)
    except Exception as err:  # any failure on plain input means we cannot check it
        message = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        raise SignatureError(
            f"calling {calls.fn_name(fn)}(logits) with {dtype.name} arrays of shape (2, 3) "
            f"raised {message}"
        ) from err
    if out.shape != (2,):
        raise SignatureError(
            f"{calls.fn_name(fn)}(logits) on shape (2, 3) returned shape {out.shape}; an "
            "entropy function must return (2,) (per-row entropies, class axis last)"
        )
    return np.dtype(out.dtype)


def _or_fail(tally: Tally, run: Callable, what: str, z):
    try:
        return tuple(np.asarray(a) for a in run(z))
    except Exception as err:  # a function may reject some hard cases: that is a finding
        first = str(err).splitlines()[0] if str(err) else ""
        tally.fail(f"raises {what}", f"raises {type(err).__name__} on {what}: {first}")
        return None


def check_entropy(
    fn: Callable,
    dtype,
    *,
    max_ulps: float | None = None,
    quick: bool = False,
    max_k: int = PER_TOKEN_MAX_K,
) -> CheckResult:
    """Check a softmax entropy `fn(logits) -> H per row` against mpmath.

    Inputs: logits [m, 0] over `check_cross_entropy`'s margin sweep (every ulp around the
    cliff, a dense grid from -40 to past exponent underflow), and its random rows (K up to
    `max_k`: scales 1e-3 to 10, logits near 1e4, ties, near-ties, -inf classes); a row
    holding NaN. H and its gradient (of the summed H) are held per element to the error
    model of `entropy_bounds` (or `max_ulps`, plus a half ulp for 16-bit outputs); H must
    not be 0 where the exact value is a normal number (the standard lse - sum p z is, past
    the cliff), nor the gradient at the max; the gradients must sum to zero within their
    bounds; NaN must give NaN.

    Example:
      >>> import numerics
      >>> check_entropy(numerics.entropy, "bf16", quick=True).ok
      True

    Args:
      fn: called as fn(logits_NxK) under `jax.jit` and `jax.vjp`.
      dtype: 'bf16', 'fp16', 'fp32', 'fp64', or NumPy's names and dtypes.
      max_ulps: replaces the model's bound.
      quick: fewer margins, K up to 100.
      max_k: the largest K of the random rows.

    Returns:
      A `CheckResult` of kind "entropy".

    Raises:
      SignatureError: `fn` raised on plain input or returned the wrong shape.
    """
    dtype = as_dtype(dtype)
    tally = Tally("entropy", dtype)

    def bounds(z, exact_h, exact_grad, inexact):
        if max_ulps is not None:
            half = _half(dtype)
            return max_ulps + half, np.full(z.shape, max_ulps + half)
        value, grad = entropy_bounds(
            z, dtype, exact_h.astype(np.float64), exact_grad.astype(np.float64), None, inexact
        )
        # The bounds are float64 numbers computed from float64 roundings of the exact
        # values; where the model allows the whole value to be lost (flushed terms) they
        # equal the error of a 0 up to those roundings: 2^-40 relative covers them.
        return value * (1 + 2.0**-40), grad * (1 + 2.0**-40)

    with jax.enable_x64(dtype == np.float64):
        run = _entropy_runner(fn)
        out_dtype = _probe(fn, run, dtype)
        # The margin sweep: z_max - z_j is m - 0 or 0 - m, exact.
        m = cases.margin_sweep(dtype, quick)
        z = np.stack([m, np.zeros_like(m)], -1)
        dies = zero = None
        got = _or_fail(tally, run, "the margin sweep", z)
        if got is not None:
            h, grad = got
            exact_h, exact_grad = oracle.entropy_value_and_grad(z, exact=True)
            value_bound, grad_bound = bounds(z, exact_h, exact_grad, None)

            def name_margin(r, *_):
                return f"m={float(m[r]):.8g} (logits [m, 0])"

            tally.rows += len(m)
            tally.compare("entropy", "value", h, exact_h, value_bound, z, name_margin)
            for j, what in enumerate(("gradient at m", "gradient at 0")):
                tally.compare(
                    what, "grad", grad[:, j], exact_grad[:, j], grad_bound[:, j], z, name_margin
                )
            tally.grad_sums(grad, np.maximum(grad_bound.max(-1), 1.0), name_margin)

            def at_margins(mi):
                return run(np.stack([mi, np.zeros_like(mi)], -1))

            # A 0 is spurious only where the bound does not allow losing the whole value
            # (the model forgives terms flushed below the smallest normal: on [m, 0] H is
            # 0 from m = 87.3, where e^-m is, though the exact (1 + m) e^-m is normal).
            def kept(exact, bound):
                exact = exact.astype(np.float64)
                return np.where(bound * oracle.ulp(exact, dtype) >= np.abs(exact), 0.0, exact)

            found = {
                "entropy": calls.spurious_zeros(
                    dtype, h, kept(exact_h, value_bound), m, lambda v: np.asarray(at_margins(v)[0])
                ),
                "gradient at the max": calls.spurious_zeros(
                    dtype,
                    grad[:, 0],
                    kept(exact_grad[:, 0], grad_bound[:, 0]),
                    m,
                    lambda v: np.asarray(at_margins(v)[1])[:, 0],
                ),
            }
            for what, zeros in found.items():
                if zeros is not None:
                    at = oracle.entropy_value_and_grad(np.array([[zeros.start, 0.0]]))
                    exact_at = at[0][0] if what == "entropy" else at[1][0, 0]
                    fail_zero_from(tally, what, zeros, float(exact_at))
            zero, dies = (None if v is None else v.start for v in found.values())
        for case in cases.random_cases(quick, max_k, dtype):
            z, _ = cases.plant_rows(case, dtype, 2, seed=0)
            got = _or_fail(tally, run, cases.describe_case(case), z)
            if got is None:
                continue
            h, grad = got
            exact_h, exact_grad = oracle.entropy_value_and_grad(z, exact=True)
            value_bound, grad_bound = bounds(z, exact_h, exact_grad, inexact_gaps(z, dtype))
            name_element = cases.case_element_namer(case)
            tally.rows += len(z)
            tally.compare("entropy", "value", h, exact_h, value_bound, z, name_element)
            tally.compare("gradient", "grad", grad, exact_grad, grad_bound, z, name_element)
        nan = True
        got = _or_fail(tally, run, "a row holding NaN", np.array([[np.nan, 0.0, 1.0]], dtype))
        if got is not None and not np.isnan(got[0].astype(np.float64)).any():
            nan = False
            tally.fail("NaN", f"NaN: logits [nan, 0, 1] give the finite {got[0].tolist()}, not NaN")
    return tally.result(
        grad_dies_at=dies,
        value_zero_at=zero,
        zero_at_teacher=None,
        nan_propagates=nan,
        output_dtype=out_dtype.name,
    )
