"""The fixed logsumexp against mpmath in every dtype, where one entry dominates, and its edges.

Error model of the value, from which every bound below is computed per row. With M the
largest kept entry, T = sum_k b_k e^(a_k - M) = head + tail (head: the b of the maxima,
e^0 = 1 each; tail: the terms below M), L = log|T| and lse = M + L, in the compute dtype
(float32 for bf16 and fp16, the dtype itself for fp32 and fp64) of unit roundoff u, where
a relative error of r u costs at most r ulps (ulp(x) > u |x|):

- a tail term b_k e^(a_k - M): XLA's exp within 1.5 ulps (measured 0.97 in float32 and 1.45
  in float64, docs/studies/softmax-accuracy.md), 3u; the product by b, u; and |a_k - M| u where the
  difference a_k - M is not exact in the compute dtype (checked per entry here);
- the tail's sum: log2 K roundings of the sum of the terms' magnitudes (the lab's count for
  XLA's reductions, `numerics.testing.general_bound`);
- the head: exact without b (a count) and for a unique max; with b and ties, log2 K
  roundings of the sum of the maxima's |b|;
- hi + lo = head + tail exactly (TwoSum), so T's error reaches L as |dT| / |T|; L = log|hi|
  + lo / hi: XLA's log within 1 ulp (measured 1.00 and 0.50), 2u |L|, and the addition, u |L|;
- lse = M + L: one rounding, u |lse|; bf16 and fp16 then round once more, half an ulp.

So |error| <= u (E_tail + E_head + 3 |L| + |lse|) (+ ulp(lse) / 2 for 16-bit), counted in
ulps of lse: the error is the result's own, as for any value the oracle tests hold. Without
a dominant entry that is a few ulps; where one dominates (M = 0, T = 1 + tiny) it stays a
few ulps of the tiny result itself, which the standard M + log(1 + tiny) loses entirely.
The gradient is the b-weighted softmax b_k e^(a_k - M) / hi: without b the fixed `softmax`
itself (held to its own bounds in test_random_oracle.py), with b the term's error above, a
division (u), dropping lo (u) and T's relative error.
"""

import fractions

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numerics
from numerics import _check_cases, oracle, standard, testing
from numerics._logsumexp import logsumexp_last
from tests.tiers import BF16_AND_F32, FAST_DTYPES
from tests.tolerances import BF16, DTYPES, F16, F32, F64, general_bound

SIXTEEN_BIT = (np.dtype(BF16), np.dtype(F16))
EXP_U, LOG_U = 3.0, 2.0  # XLA's exp (1.5 ulps) and log (1 ulp) as relative errors, in u


def _compute_dtype(dtype):
    return np.dtype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)


def _inexact_gaps(x, top, ctype):
    """|a_k - M| where the compute dtype rounds a_k - M, else 0 (0 for non-finite entries)."""
    out = np.zeros(x.shape)
    for index in np.ndindex(x.shape):
        a, m = float(x[index]), float(top[index[:-1]])
        if np.isfinite(a) and np.isfinite(m):
            rounded = float(ctype.type(a) - ctype.type(m))
            exact = fractions.Fraction(a) - fractions.Fraction(m)
            out[index] = abs(a - m) if fractions.Fraction(rounded) != exact else 0.0
    return out


def _model(x, exact, dtype, b=None, where=None):
    """The error model's pieces per row: (u of the compute dtype, |L| = |lse - M| and the
    relative error of T in units of u, per-entry inexact gaps, rows with a finite result)."""
    ctype = _compute_dtype(dtype)
    x = x.astype(np.float64)
    scale = np.ones(x.shape) if b is None else np.broadcast_to(b, x.shape).astype(np.float64)
    kept = (scale != 0) if where is None else (scale != 0) & np.broadcast_to(where, x.shape)
    live = np.where(kept, x, -np.inf)
    top = np.max(live, -1)
    finite = np.isfinite(top) & np.isfinite(exact)
    shift = np.where(finite, top, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(kept & np.isfinite(live), np.abs(scale) * np.exp(live - shift[:, None]), 0)
    at_max = live == shift[:, None]
    head = np.where(at_max, terms, 0.0).sum(-1)
    tail = np.where(at_max, 0.0, terms)
    gaps = _inexact_gaps(x, shift, ctype)
    log2k = np.log2(max(x.shape[-1], 2))
    log_t = np.where(finite, np.abs(exact - shift), 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        total = np.exp(np.where(finite, exact - shift, 0.0))  # |T|, from the exact result
        e_tail = (EXP_U + (b is not None) + log2k) * tail.sum(-1) + (tail * gaps).sum(-1)
        e_head = (0.0 if b is None else log2k) * head
        e_total = np.where(finite, (e_tail + e_head) / total, 0.0)
    u = 2.0 ** -(np.finfo(ctype).nmant + 1)
    return u, log_t, e_total, gaps, finite


def _in_ulps(dtype, u, error_u, value):
    """An absolute error of `error_u` units u of the compute dtype, in ulps of `dtype` at
    `value`, plus half an ulp for the final rounding of a 16-bit dtype."""
    with np.errstate(invalid="ignore", over="ignore"):
        ulps = u * error_u / oracle.ulp(value, dtype)
    return ulps + (0.5 if np.dtype(dtype) in SIXTEEN_BIT else 0.0)


def value_bound(x, exact, dtype, b=None, where=None):
    """The bound on each row's logsumexp, in ulps of the exact result (rows whose result
    is not finite get 0: they must match exactly)."""
    u, log_t, e_total, _, finite = _model(x, exact, dtype, b, where)
    error = e_total + (LOG_U + 1) * log_t + np.where(finite, np.abs(exact), 0.0)
    return np.where(finite, _in_ulps(dtype, u, error, exact), 0.0)


def gradient_bound(x, exact, exact_grad, dtype, b=None, where=None):
    """The bound on b_k e^(a_k - M) / hi (and on e^(a_k - M) / hi, one product less): the
    term's exp, product and gap, the division, the dropped lo, and T's relative error."""
    u, _, e_total, gaps, finite = _model(x, exact, dtype, b, where)
    relative = EXP_U + 3 + gaps + e_total[:, None]
    bound = _in_ulps(dtype, u, relative * np.abs(exact_grad), exact_grad)
    return np.where(finite[:, None], bound, 0.0)


@jax.jit
def _value_and_grad(x):
    """Per row: the fixed logsumexp and its gradient."""
    return jax.vmap(jax.value_and_grad(numerics.logsumexp))(x)


@jax.jit
def _evaluate(x, b, where):
    """Value, sign and both gradients of the fixed logsumexp over the last axis, with and
    without b; one program per dtype."""

    def plain(x):
        return numerics.logsumexp(x, axis=-1, where=where)

    def scaled(x, b):
        return numerics.logsumexp(x, axis=-1, b=b, where=where, return_sign=True)

    value, grad = plain(x), jax.grad(lambda x: plain(x).sum())(x)
    (value_b, sign_b), grads_b = (
        scaled(x, b),
        jax.grad(lambda x, b: scaled(x, b)[0].sum(), (0, 1))(x, b),
    )
    return value, grad, value_b, sign_b, *grads_b


def _rows(dtype, quick=False):
    """The hard cases of `numerics.testing` (K up to 1000, or up to 100 when `quick`: margins
    to 40, ties and near-ties, -inf entries, 1e4 offsets, tiny scales), two rows each, padded
    with -inf to one K."""
    made = [
        _check_cases.plant_rows(case, dtype, 2, seed=5)[0]
        for case in _check_cases.random_cases(quick=quick, max_k=1000, dtype=dtype)
    ]
    k = max(r.shape[-1] for r in made)
    pad = [np.pad(r, ((0, 0), (0, k - r.shape[-1])), constant_values=-np.inf) for r in made]
    return np.concatenate(pad).astype(dtype)


# quick: every case up to K = 100 (every kind of row, a tenth of the entries), the fast
# tier's; the cases up to K = 1000 are the slow tier's (-m slow).
@BF16_AND_F32
@pytest.mark.parametrize("quick", [True, pytest.param(False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values_and_gradients_against_mpmath(dtype, quick):
    x = _rows(dtype, quick)
    rng = np.random.default_rng(3)
    b = (rng.random(x.shape) * 2 + 0.1).astype(dtype)  # positive scales
    b[:, ::7] = 0  # left out (their entries still have a derivative d/db)
    where = rng.random(x.shape) > 0.05
    where[::5] = True
    with jax.enable_x64(np.dtype(dtype) == np.float64):
        got = jax.device_get(_evaluate(jnp.asarray(x), jnp.asarray(b), jnp.asarray(where)))
    value, grad, value_b, sign_b, grad_x_b, grad_b = got
    for out in got:
        assert out.dtype == dtype

    exact, _, exact_grad, _ = oracle.logsumexp_value_and_grad(x, where=where, exact=True)
    exact64 = exact.astype(np.float64)
    bound = value_bound(x, exact64, dtype, where=where)
    testing.assert_ulp_close(value, exact, bound, dtype, err_msg="value")
    # Without b the gradient is the fixed softmax, held to its own bounds (general_bound,
    # as in test_random_oracle.py: the table plus |a_k - M| and log2 K).
    kept = np.where(where, x.astype(np.float64), -np.inf)
    gaps = np.where(np.isfinite(kept), np.max(kept, -1, keepdims=True) - kept, 0.0)
    grad_bound = general_bound("value", dtype, np.nan_to_num(gaps), x.shape[-1])
    testing.assert_ulp_close(grad, exact_grad, grad_bound, dtype, err_msg="grad")

    exact_b, sign, exact_grad_x, exact_grad_b = oracle.logsumexp_value_and_grad(
        x, b=b, where=where, exact=True
    )
    exact_b64 = exact_b.astype(np.float64)
    bound_b = value_bound(x, exact_b64, dtype, b=b, where=where)
    testing.assert_ulp_close(value_b, exact_b, bound_b, dtype, err_msg="value with b")
    assert np.array_equal(sign_b, sign.astype(np.float64))
    for name, got_grad, want in (("d/dx", grad_x_b, exact_grad_x), ("d/db", grad_b, exact_grad_b)):
        g_bound = gradient_bound(x, exact_b64, want.astype(np.float64), dtype, b=b, where=where)
        testing.assert_ulp_close(got_grad, want, g_bound, dtype, err_msg=f"{name} with b")


# Rows where the tail sits below the max's ulp: M + log(1 + tail) rounds the sum to 1.
DOMINANT = {
    np.dtype(BF16): [0.0, -10.0],
    np.dtype(F16): [0.0, -8.0],  # e^-10 = 4.5e-5 would be below fp16's smallest normal
    np.dtype(F32): [0.0, -20.0],
    np.dtype(F64): [0.0, -40.0],
}


@BF16_AND_F32
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_dominant_entry_keeps_the_tail_that_jax_rounds_away(dtype):
    x = np.array([DOMINANT[np.dtype(dtype)], [0.0, 0.0]], dtype)  # and a tie: log 2
    exact, _, exact_grad, _ = oracle.logsumexp_value_and_grad(x, exact=True)
    with jax.enable_x64(np.dtype(dtype) == np.float64):
        ours = jax.device_get(_value_and_grad(jnp.asarray(x)))
        theirs = np.asarray(jax.jit(jax.nn.logsumexp, static_argnums=1)(x, -1))
        assert np.array_equal(jax.jit(standard.logsumexp, static_argnums=1)(x, -1), theirs)
    top = x.max(-1, keepdims=True)
    naive = top[:, 0] + np.log(np.exp(x - top).sum(-1))  # M + log(sum), in the dtype
    bound = value_bound(x, exact.astype(np.float64), dtype)
    testing.assert_ulp_close(ours[0], exact, bound, dtype, err_msg="value")
    # The standard forms give 0 for the dominated row: all of the result is lost.
    assert theirs[0] == 0 and naive[0] == 0 and ours[0][0] > 0
    # Its gradient is the fixed softmax: the dominated entry's tiny probability, not 0.
    grad_bound = general_bound("value", dtype, np.abs(x.astype(np.float64)), 2)
    testing.assert_ulp_close(ours[1], exact_grad, grad_bound, dtype, err_msg="grad")
    # With b, the max's b = 1 and a tail 3 e^-m: head + tail carried as hi + lo.
    b = np.array([1.0, 3.0], dtype)
    exact_b = oracle.logsumexp(x[:1], b=b, exact=True)
    with jax.enable_x64(np.dtype(dtype) == np.float64):
        ours_b = np.atleast_1d(jax.jit(numerics.logsumexp)(x[0], b=b))
    bound_b = value_bound(x[:1], exact_b.astype(np.float64), dtype, b=b)
    testing.assert_ulp_close(ours_b, exact_b, bound_b, dtype, err_msg="value with b")


def test_the_tangent_rule_beats_autodiff_through_the_formula():
    # Why logsumexp has a custom_jvp: autodiff through M + log1p(S_others) reaches the max
    # entry through M, as 1 - S_others / (1 + S_others), which cancels where no entry
    # dominates (measured: 2070 ulps on flat float32 rows of K = 1000; the rule: 3.6).
    x = (0.01 * np.random.default_rng(0).standard_normal((4, 1000))).astype(F32)
    exact = oracle.softmax(x, exact=True)
    through = jax.jit(jax.grad(lambda x: logsumexp_last.fun(x, None, None)[0].sum()))(x)
    assert np.max(oracle.ulp_error(np.asarray(through), exact, F32)) > 100
    ours = jax.jit(jax.grad(lambda x: numerics.logsumexp(x, axis=-1).sum()))(x)
    bound = general_bound("value", F32, np.max(x, -1, keepdims=True) - x, x.shape[-1])
    testing.assert_ulp_close(ours, exact, bound)


@jax.jit  # test_edge_cases_as_jax_nn's other calls in one program, not one per primitive
def _edge_calls(r0, none, r4, keep, row, b, infs, pair_b, ones, cancel_b, empty, scalar):
    return {
        "masked": numerics.logsumexp(r0, where=none, return_sign=True),
        "only -inf kept": numerics.logsumexp(r4, where=keep),
        "b = 0": numerics.logsumexp(row, b=b),
        "b = 0 jax.nn": jax.nn.logsumexp(row, b=b),
        "inf - inf": numerics.logsumexp(infs, b=pair_b, return_sign=True),
        "cancels": numerics.logsumexp(ones, b=cancel_b, return_sign=True),
        "empty": numerics.logsumexp(empty, axis=-1),
        "0-d": numerics.logsumexp(scalar),
    }


def test_edge_cases_as_jax_nn():
    inf, nan = np.inf, np.nan
    x = np.array(
        [
            [0.0, 0.0, 0.0, -30.0],  # three maxima: log 3 + e^-30 / 3
            [-inf, -inf, -inf, -inf],  # the empty sum: -inf, sign 0
            [1.0, inf, 2.0, inf],  # +inf
            [1.0, nan, 2.0, 0.0],  # NaN
            [-inf, 3.0, -inf, 1.0],  # -inf entries left out
        ]
    )
    ours, theirs = jax.jit(  # one program, not one per primitive
        lambda x: [f(x, axis=-1, return_sign=True) for f in (numerics.logsumexp, jax.nn.logsumexp)]
    )(x)
    exact, sign, _, _ = oracle.logsumexp_value_and_grad(x, exact=True)
    testing.assert_ulp_close(ours[0], exact, value_bound(x, exact.astype(np.float64), F64))
    np.testing.assert_array_equal(ours[1], sign.astype(np.float64))
    for got, want in zip(ours, theirs, strict=True):  # the same infinities, NaN and signs
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.where(finite, 0, got), np.where(finite, 0, want))
    # A row masked out entirely: -inf with sign 0, gradient 0, as in jax.nn; a row of only
    # -inf too, where jax.nn's gradient is NaN.
    none = np.zeros(4, bool)
    keep = np.array([True, False, True, False])  # kept: only -inf; masked out: finite
    row, b = np.array([inf, nan, 1.0, 2.0]), np.array([0.0, 0.0, 1.0, 1.0])
    calls = _edge_calls(
        x[0],
        none,
        x[4],
        keep,
        row,
        b,
        np.array([inf, inf]),
        np.array([1.0, -1.0]),
        np.ones(2),
        np.array([2.0, -2.0]),
        np.zeros((3, 0)),
        np.float64(2.5),
    )
    assert tuple(calls["masked"]) == (-inf, 0.0)
    # The gradients each in one jitted program, not one per primitive.
    assert not np.any(jax.jit(jax.grad(lambda r: numerics.logsumexp(r, where=none)))(x[0]))
    assert not np.any(jax.jit(jax.grad(numerics.logsumexp))(x[1]))
    assert np.all(np.isnan(jax.jit(jax.grad(jax.nn.logsumexp))(x[1])))
    assert calls["only -inf kept"] == -inf
    assert not np.any(jax.jit(jax.grad(lambda r: numerics.logsumexp(r, where=keep)))(x[4]))
    # Entries with b = 0 are left out, +inf and NaN ones too, as in jax.nn.
    kept = row[None, 2:]
    exact_kept = oracle.logsumexp(kept, exact=True)
    bound = value_bound(kept, exact_kept.astype(np.float64), F64)
    testing.assert_ulp_close(np.atleast_1d(calls["b = 0"]), exact_kept, bound)
    assert np.isfinite(calls["b = 0 jax.nn"])
    # +inf entries whose b cancel: inf - inf, NaN with sign NaN, as in jax.nn.
    pair = calls["inf - inf"]
    assert np.isnan(pair[0]) and np.isnan(pair[1])
    # A sum that cancels exactly: log 0 = -inf, sign 0, as in jax.nn.
    assert tuple(calls["cancels"]) == (-inf, 0)
    # Empty reductions, and 0-d input (only axis None or () reduce it).
    assert calls["empty"].tolist() == [-inf] * 3
    assert calls["0-d"] == 2.5


def test_signed_b_with_and_without_return_sign():
    x = np.array([[1.0, 1.0, -3.0], [0.5, 2.0, 0.0], [0.0, -25.0, -40.0]])
    b = np.array([[1.0, -2.0, 0.5], [3.0, -0.25, 1.0], [1.0, -1.0, 1.0]])
    grads = jax.grad(lambda x, b: numerics.logsumexp(x, -1, b, return_sign=True)[0].sum(), (0, 1))
    # Value and gradients in one program, not one per primitive.
    (value, sign), (g_x, g_b) = jax.jit(
        lambda x, b: (numerics.logsumexp(x, -1, b, return_sign=True), grads(x, b))
    )(x, b)
    exact, exact_sign, exact_g_x, exact_g_b = oracle.logsumexp_value_and_grad(x, b=b, exact=True)
    exact64 = exact.astype(np.float64)
    testing.assert_ulp_close(value, exact, value_bound(x, exact64, F64, b=b))
    np.testing.assert_array_equal(sign, exact_sign.astype(np.float64))
    # Derivatives of log|T|: b e^x / T and e^x / T, signed by T.
    for got, want in ((g_x, exact_g_x), (g_b, exact_g_b)):
        bound = gradient_bound(x, exact64, want.astype(np.float64), F64, b=b)
        testing.assert_ulp_close(got, want, bound)
    # Without return_sign a negative sum is NaN, as in jax.nn.
    ours, theirs = jax.jit(  # one program, not one per primitive
        lambda x, b: [f(x, -1, b) for f in (numerics.logsumexp, jax.nn.logsumexp)]
    )(x, b)
    np.testing.assert_array_equal(np.isnan(ours), sign < 0)
    np.testing.assert_array_equal(np.isnan(theirs), sign < 0)


def test_bad_input_raises_clearly():
    with pytest.raises(TypeError, match="floating-point"):
        numerics.logsumexp(jnp.arange(3))
    with pytest.raises(TypeError, match="dtype of a"):
        numerics.logsumexp(jnp.zeros(3, F32), b=jnp.ones(3, BF16))
    with pytest.raises(ValueError, match="broadcast"):
        numerics.logsumexp(jnp.zeros(3), b=jnp.ones(4))
    with pytest.raises(TypeError, match="axis"):
        numerics.logsumexp(jnp.zeros((2, 3)), axis=[0, 1])
    with pytest.raises(ValueError, match="0-d"):
        numerics.logsumexp(jnp.float32(1.0), axis=0)


# -- properties on numerics.testing's hard cases --------------------------------------

PROFILE = settings(derandomize=True, max_examples=40, deadline=None)
SIZES = (2, 7, 31)
# The class counts and dtypes drawn: K = 2 and 31 (the pair and a long row) in bfloat16 and
# float32 (the two paths, tests/tiers.py: 4 programs instead of 12) in the fast tier, every
# size of SIZES in every dtype in the slow tier (-m slow), as test_properties.py's
# SIZE_TIERS. The same property and bounds either way.
SIZE_TIERS = [
    pytest.param((2, 31), FAST_DTYPES, id="few-sizes"),
    pytest.param(SIZES, DTYPES, id="all-sizes", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("sizes", "dtypes"), SIZE_TIERS)
@PROFILE
@given(data=st.data())
def test_between_the_max_and_the_max_plus_log_k_with_a_probability_gradient(sizes, dtypes, data):
    z = data.draw(st.sampled_from(dtypes).flatmap(lambda d: testing.logits(d, sizes=sizes)))
    dtype = z.dtype
    with jax.enable_x64(True):
        value, grad = jax.device_get(_value_and_grad(jnp.asarray(z)))
    value, grad = value.astype(np.float64), grad.astype(np.float64)
    top = z.astype(np.float64).max(-1)
    k = z.shape[-1]
    # M + log1p(S_others), log1p >= 0: never below the max, whatever the rounding.
    assert np.all(value >= top)
    # At most M + log K, but for the final rounding (and float32's inside a 16-bit dtype).
    ceiling = top + np.log(k)
    assert np.all(value <= ceiling + 2 * oracle.ulp(ceiling, dtype))
    # The gradient is a probability vector: each entry in [0, 1], summing to 1 within the
    # rounding of its K entries.
    assert np.all((grad >= 0) & (grad <= 1))
    np.testing.assert_allclose(grad.sum(-1), 1.0, atol=2 * k * float(jnp.finfo(dtype).eps))
