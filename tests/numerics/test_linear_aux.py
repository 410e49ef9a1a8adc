"""`linear_cross_entropy(..., return_aux=True)`, `temperature` and `accumulation_dtype`
(issue 47): every per-token output against mpmath in bf16, fp16, fp32 and fp64, the bf16
margin sweep, the peers' failure modes, gradients, errors.

Error model (fixed before looking at results). The logits reach the chunks exactly: hidden
holds them and weight is the identity (or hidden and weight are small dyadic numbers), so
every dot is exact in any order and accumulation dtype, and the oracle (mpmath at 256 bits,
`numerics.oracle`) sees the same numbers. u is the unit roundoff of the compute dtype
(float32 for bf16 and fp16, the dtype itself for fp32 and fp64); 16-bit results add half
an ulp for their one final rounding.

- **log_prob** is the chunked loss's plain margin form negated: the materialized model of
  tests/numerics/test_per_token.py (`log_prob_bounds`: `ULPS` + log2 K + the conditioning
  of exp, flushed terms forgiven) plus `CHUNK_ULPS` for the chunks' rescaling (one more
  exp and product per term), as tests/numerics/test_linear_cross_entropy.py holds the loss.
- **entropy**: the materialized model (`entropy_bounds`), with each entry counted as having
  an inexact gap where any of the subtractions the chunks form rounds (m_c - z_j, M - m_c,
  M - z_j; c_j = g_j covers them, since (m_c - z_j) + (M - m_c) = g_j), plus the rescaling
  by e^(m_c - M): S_others' terms of every chunk but the max's one more exp and product
  (4 u), T's terms that and the shift term (M - m_c)(1 + r_c) with its subtraction, product
  and sum (7 u), and log2 (chunks) roundings of the sums over chunks. So L = log1p(S_others)
  gains (4 + log2 n_c) u S_others / S, A = T / S gains (7 + log2 n_c + (4 + log2 n_c)
  S_others / S) u A, and a gradient entry p_k (g_k - A) gains that of A times p_k plus
  p_k's (4 + log2 n_c) u S_others / S relative.
- **lse** = M + log S (M an exact logit): an absolute error of u (|lse| (the sum) + LOG_U log
  S (the log) + EXP_U + the e^-g-weighted mean gap + log2 K + 5 + log2 n_c (S's relative
  error: exps, their arguments, the sum, the rescaling)).
- **argmax** and, on exact logits, everything that depends only on exact differences: equal.
"""

import functools
import math
import pathlib
import re

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import numerics
from numerics import oracle, standard, testing
from numerics._check_per_token import EXP_U, LOG_U, entropy_bounds
from numerics._check_per_token import inexact_gaps as _inexact
from numerics._check_tolerances import finite_gaps, weighted_gap
from tests.numerics.test_per_token import (
    _closed_form,
    _ctype,
    _half,
    _hard_rows,
    log_prob_bounds,
    offset_rows,
)
from tests.tiers import FAST_DTYPES
from tests.tolerances import BF16, DTYPES, F32, F64, ULPS

CHUNK_ULPS = 1.5  # as tests/numerics/test_linear_cross_entropy.py

# The fast tier runs bf16 and float32 in test_every_output_against_mpmath_up_to_k_100 (the
# oracle test); the other dtype sweeps keep bf16 there and run their other dtypes in the slow
# tier (-m slow).
BF16_FAST = [BF16] + [pytest.param(d, marks=pytest.mark.slow) for d in DTYPES if d != BF16]
FLOOR = -30000.0  # stands for -inf in hidden (-inf * 0 in the identity's dot would be NaN)


def _u(dtype) -> float:
    return 2.0 ** -(np.finfo(_ctype(dtype)).nmant + 1)


def _chunks(k: int, chunk: int) -> int:
    return -(-k // min(chunk, k))


def _inexact_in_chunks(z, dtype, chunk):
    """Per entry: whether m_c - z_j or M - m_c rounds in the compute dtype."""
    ctype = _ctype(dtype).type
    z = z.astype(np.float64)
    out = np.zeros(z.shape, bool)
    top = z.max(-1)
    for r in range(z.shape[0]):
        for start in range(0, z.shape[1], chunk):
            part = z[r, start : start + chunk]
            m_c = part.max()
            shift_ok = float(ctype(top[r]) - ctype(m_c)) == top[r] - m_c
            diff = (ctype(m_c) - part.astype(ctype)).astype(np.float64)
            out[r, start : start + chunk] = (diff != m_c - part) | (not shift_ok)
    return out


def chunked_entropy_bounds(z, dtype, exact_h, exact_grad, chunk):
    """(value bound per row, gradient bound per entry) of the chunked entropy in ulps: the
    materialized model plus the rescaling (module docstring)."""
    inexact = _inexact(z, dtype) | _inexact_in_chunks(z, dtype, chunk)
    value, grad = entropy_bounds(z, dtype, exact_h, exact_grad, None, inexact)
    u = _u(dtype)
    z64 = z.astype(np.float64)
    g = z64.max(-1, keepdims=True) - z64
    e = np.exp(-g)
    s = e.sum(-1, keepdims=True)
    s_others = s - 1
    a = (g * e).sum(-1, keepdims=True) / s
    n_c = _chunks(z.shape[-1], chunk)
    lg = np.log2(n_c) if n_c > 1 else 0.0
    if n_c == 1:
        return value, grad
    rel_s = (4 + lg) * s_others / s
    d_a = (7 + lg + rel_s) * a
    h = exact_h.astype(np.float64)
    gabs = np.abs(exact_grad.astype(np.float64))
    p = e / s
    with np.errstate(over="ignore"):  # a bound of inf where the exact gradient is 0
        value = value + u * (rel_s + d_a)[:, 0] / oracle.ulp(h, dtype)
        grad = grad + u * (gabs * rel_s + p * d_a) / oracle.ulp(gabs, dtype)
    return value, grad


def lse_bound(z, dtype, exact_lse, chunk):
    """Bound on lse per row in ulps (module docstring)."""
    u = _u(dtype)
    z64 = z.astype(np.float64)
    gaps = finite_gaps(z64)
    s = np.exp(-gaps).sum(-1)
    every = weighted_gap(gaps, np.zeros(z.shape, bool))
    n_c = _chunks(z.shape[-1], chunk)
    lse = np.abs(exact_lse.astype(np.float64))
    err = u * (lse + LOG_U * np.log(s) + EXP_U + every + np.log2(z.shape[-1]) + 5 + np.log2(n_c))
    return err / oracle.ulp(lse, dtype) + _half(dtype)


def _identity_call(z, labels, chunk, **kw):
    """linear_cross_entropy on hidden = z (N, K), weight = the identity: exact logits z.
    Returns (loss, aux, d hidden of sum(log_prob), d hidden of sum(entropy)) as NumPy."""
    return _identity_calls(z, labels, (chunk,), **kw)[0]


def _identity_calls(z, labels, chunks, **kw):
    """`_identity_call` at each chunk size of `chunks`, all in one jitted program (`kw` to
    linear_cross_entropy: reduction "sum" gives the fused path, its loss a scalar)."""
    z = np.asarray(z)
    dtype = z.dtype
    with jax.enable_x64(dtype == np.float64):
        hidden = jnp.asarray(z)
        weight = jnp.eye(z.shape[-1], dtype=dtype)
        t = jnp.asarray(labels, jnp.int32)

        def one(h, chunk):
            def f(h):
                return numerics.linear_cross_entropy(
                    h, weight, t, chunk_size=chunk, return_aux=True, **kw
                )

            (loss, aux), vjp = jax.vjp(f, h)
            zeros = jax.tree.map(jnp.zeros_like, (loss, aux))

            def cot(key):
                c = jax.tree.map(lambda x: x, zeros)
                c[1][key] = jnp.ones_like(aux[key])
                c[1]["argmax"] = np.zeros(aux["argmax"].shape, jax.dtypes.float0)
                return c

            return loss, aux, vjp(cot("log_prob"))[0], vjp(cot("entropy"))[0]

        return jax.device_get(jax.jit(lambda h: [one(h, c) for c in chunks])(hidden))


def _finite(z):
    return np.where(np.isfinite(z.astype(np.float64)), z, np.array(FLOOR, z.dtype))


@functools.cache
def _hard(dtype, max_k=1000):
    z, labels = _hard_rows(dtype, max_k)
    return _finite(z), labels


@functools.cache
def _exact(z_bytes, shape, dtype, labels_bytes):
    z = np.frombuffer(z_bytes, dtype).reshape(shape)
    labels = np.frombuffer(labels_bytes, np.int32)
    lp, lp_grad = oracle.log_prob_value_and_grad(z, labels, exact=True)
    h, h_grad = oracle.entropy_value_and_grad(z, exact=True)
    with mpmath.workprec(oracle.PRECISION_BITS):
        lse = np.array(
            [mpmath.mpf(float(z[r, y])) - lp[r] for r, y in enumerate(labels)], dtype=object
        )
    return lp, lp_grad, h, h_grad, lse


def exact_outputs(z, labels):
    """The oracle's (log_prob, its gradient, H, its gradient, lse), mpmath values; lse as
    z_y - log p_y at the oracle's 256 bits (z_y + log1p(sum_{j != y} e^(z_j - z_y)), the
    cross-entropy oracle's form: `oracle.logsumexp` would also form both its gradients,
    half of the oracle's time here)."""
    z = np.ascontiguousarray(z)
    labels = np.ascontiguousarray(labels, np.int32)
    return _exact(z.tobytes(), z.shape, z.dtype, labels.tobytes())


def check_aux(z, labels, dtype, chunk, out=None, **kw):
    """Hold every output of the identity call (`kw` to it) to its bound; returns them."""
    loss, aux, lp_grad, h_grad = out if out is not None else _identity_call(z, labels, chunk, **kw)
    for key in ("log_prob", "entropy", "lse", "z_loss"):
        assert aux[key].dtype == dtype, key
    assert aux["argmax"].dtype == np.int32
    exact_lp, exact_lp_grad, exact_h, exact_h_grad, exact_lse = exact_outputs(z, labels)
    v, g = log_prob_bounds(z, labels, dtype, exact_lp, exact_lp_grad)
    testing.assert_ulp_close(aux["log_prob"], exact_lp, v + CHUNK_ULPS, dtype, err_msg="log_prob")
    testing.assert_ulp_close(lp_grad, exact_lp_grad, g + CHUNK_ULPS, dtype, err_msg="d log_prob")
    v, g = chunked_entropy_bounds(
        z, dtype, exact_h.astype(np.float64), exact_h_grad.astype(np.float64), chunk
    )
    testing.assert_ulp_close(aux["entropy"], exact_h, v, dtype, err_msg="entropy")
    testing.assert_ulp_close(h_grad, exact_h_grad, g, dtype, err_msg="d entropy")
    bound = lse_bound(z, dtype, exact_lse, chunk)
    testing.assert_ulp_close(aux["lse"], exact_lse, bound, dtype, err_msg="lse")
    np.testing.assert_array_equal(aux["argmax"], np.argmax(z.astype(np.float64), -1))
    if kw.get("reduction", "none") == "none":
        # The loss without options is -log_prob, the same rounded number.
        np.testing.assert_array_equal(
            np.asarray(loss, np.float64), -aux["log_prob"].astype(np.float64)
        )
    else:
        # sum: each row's loss is -log_prob in the compute dtype (within its bound `v`, in
        # ulps of the dtype), N of them summed there ((N - 1) u of the sum of their
        # magnitudes, recursive summation's bound, any order), rounded once to the dtype.
        assert loss.shape == () and loss.dtype == dtype
        exact = np.array([float(x) for x in exact_lp])
        rows = float(np.sum(v * oracle.ulp(np.abs(exact), dtype)))
        bound = rows + (exact.size - 1) * _u(dtype) * np.sum(np.abs(exact))
        bound += float(_half(dtype)) * float(oracle.ulp(abs(exact.sum()), dtype))
        with mpmath.workprec(oracle.PRECISION_BITS):
            err = abs(mpmath.mpf(float(loss)) + mpmath.fsum(exact_lp))
        assert float(err) <= bound, (float(err), bound)
    np.testing.assert_array_equal(aux["z_loss"], np.zeros_like(aux["z_loss"]))
    return loss, aux, lp_grad, h_grad


# -- against mpmath, per entry ---------------------------------------------------------------


# slow: every dtype, K up to 1000 in chunks of 96; fast sibling: ..._up_to_k_100 below (bf16 and
# float32, the two paths: the same call and bounds on every hard case but K = 1000)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_output_against_mpmath(dtype):
    # numerics.testing's hard cases up to K = 1000 (margins to 40, ties, near-ties, a 1e4
    # offset, tiny scales, -inf entries as -30000), chunks of 96: 11 chunks, the last partial.
    z, labels = _hard(np.dtype(dtype))
    check_aux(z, labels, np.dtype(dtype), 96)


@pytest.mark.parametrize("dtype", FAST_DTYPES, ids=str)
def test_every_output_against_mpmath_up_to_k_100(dtype):
    # The hard cases up to K = 100 (all but K = 1000's), chunks of 16: 7 chunks, the last
    # partial.
    z, labels = _hard(np.dtype(dtype), 100)
    check_aux(z, labels, np.dtype(dtype), 16)


# slow: every dtype, K up to 1000 in chunks of 96; fast sibling: ..._up_to_k_100[float32] below
# (the same fused call, blocks and slices, and bounds, on the hard cases to K = 100)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [BF16, F32, F64], ids=str)
def test_every_output_against_mpmath_on_the_fused_path(dtype, monkeypatch):
    _check_fused_path(dtype, monkeypatch, 1000, 96)


# float32 here (the native path); bf16's case is the slow tier's, its fast siblings float32
# here (the outputs from the blocks' statistics) and tests/numerics/test_linear_cross_entropy.py
# ::test_fused_gradients_on_one_layout[bfloat16-plain] (bf16's fused path, native dots)
@pytest.mark.parametrize("dtype", [pytest.param(BF16, marks=pytest.mark.slow), F32], ids=str)
def test_every_output_against_mpmath_on_the_fused_path_up_to_k_100(dtype, monkeypatch):
    _check_fused_path(dtype, monkeypatch, 100, 16)


def _check_fused_path(dtype, monkeypatch, max_k, chunk):
    # reduction "sum" (bf16 where its dots run native, fp32, fp64): the fused path, its rows
    # in blocks of 16 and its statistics 4 rows at a time (2 in float64), so both split the
    # hard rows; the outputs from the block's statistics, d log_prob and d entropy through
    # the backward's recomputation (their cotangents are nonzero). Every output to the same
    # bounds; the summed loss to its rows' bounds plus the sum's roundings (`check_aux`).
    from numerics import _linear

    if not _linear.fused_dtype(dtype):
        pytest.skip("bfloat16 dots converted to float32 here: the recompute path")
    monkeypatch.setattr(_linear, "MIN_BLOCK_ROWS", 16)
    monkeypatch.setattr(_linear, "SLICE_BYTES", 4 * 4 * chunk)
    z, labels = _hard(np.dtype(dtype), max_k)
    assert _linear.block_rows(z.shape[0], z.shape[1], chunk, z.shape[1]) == 16 < z.shape[0]
    check_aux(z, labels, np.dtype(dtype), chunk, reduction="sum")


@pytest.mark.parametrize(("objective", "count"), [("logged", 3), ("policy", 4), ("per_row", 4)])
def test_the_outputs_add_no_matmul_unless_differentiated(objective, count):
    # return_aux with reduction "mean" (float32): the fused path. Outputs only logged (no
    # cotangent): the loss's gradients in the forward pass, 3 dots (logits, d hidden,
    # d weight). A policy-gradient objective through log_prob and entropy: the backward
    # recomputes each chunk, and the compiled program holds no dot of the forward's unread
    # gradients: 4 (forward logits, backward logits, d hidden, d weight), as reduction
    # "none" (the recompute path). Counted in XLA's optimized program (one chunk would let
    # XLA merge the forward's and the backward's logits: 4 chunks).
    t = jnp.array([0, 1, 2, 3])
    reduction = "none" if objective == "per_row" else "mean"

    def f(h, w):
        loss, aux = numerics.linear_cross_entropy(
            h, w, t, reduction=reduction, chunk_size=4, return_aux=True
        )
        if objective == "policy":
            return jnp.mean(loss) - jnp.mean(aux["log_prob"]) - 1e-3 * jnp.mean(aux["entropy"])
        return jnp.mean(loss), aux

    grad = jax.value_and_grad(f, (0, 1), has_aux=objective != "policy")
    args = (jnp.ones((4, 8), jnp.float32), jnp.ones((8, 16), jnp.float32))  # 4 chunks
    text = jax.jit(grad).lower(*args).compile().as_text()
    assert len(re.findall(r"= \S+ dot\(", text)) == count


# slow: every dtype (bf16 too); fast sibling: test_every_output_against_mpmath_up_to_k_100[
# bfloat16] (the same call, chunks with a partial last one, and `check_aux` bounds, on the
# hard rows)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_logits_up_to_640(dtype):
    # marin #8217: bf16 logits forward, float32 backward, 85.8 % softmax error at |z| 640.
    rng = np.random.default_rng(640)
    z = rng.uniform(-640, 640, (6, 64))
    z[:, 0] = 640.0
    z[1, 1] = -640.0
    z[2] = np.sort(z[2])[::-1] * np.linspace(1, 0.999, 64)  # a spread, peaked row
    z[3, :] = 640.0 - rng.uniform(0, 3, 64)  # a flat row at 640
    z = z.astype(dtype)
    labels = rng.integers(0, 64, 6).astype(np.int32)
    check_aux(z, labels, np.dtype(dtype), 24)


# -- every bf16 margin -----------------------------------------------------------------------


@functools.cache
def _sweep(k, chunk):
    m = oracle.representable_values(BF16)
    m = m[np.isfinite(m.astype(np.float64))]
    z = np.zeros((m.size, k), BF16)
    z[:, 0] = m
    labels = np.zeros(m.size, np.int32)
    return m, z, _identity_call(z, labels, chunk), _closed_form(m, k)


# The exhaustive sweep is the slow tier's; its fast siblings are
# test_every_output_against_mpmath_up_to_k_100[bfloat16] (the hard rows: margins to 40 across
# 7 chunks) and tests/numerics/test_per_token.py's sweep of every bf16 margin of the binades
# that matter (the materialized path).
@pytest.mark.slow
@pytest.mark.parametrize(("k", "chunk"), [(2, 1), (32, 8)])
def test_every_bf16_margin(k, chunk):
    # Logits [m, 0, ..., 0] for every finite bf16 m, label 0, in chunks (K = 2: one column
    # each, so every row combines two chunks). The exact values are test_per_token's
    # closed form (checked there against the oracle).
    m, z, (_loss, aux, lp_grad, h_grad), exact = _sweep(k, chunk)
    labels = np.zeros(m.size, np.int32)
    lp_exact = np.zeros(z.shape)
    lp_exact[:, :2] = exact[:, 1:3]
    lp_exact[:, 2:] = exact[:, 2:3]
    h_exact = np.zeros(z.shape)
    h_exact[:, :2] = exact[:, 4:6]
    h_exact[:, 2:] = exact[:, 5:6]
    v, g = log_prob_bounds(z, labels, BF16, exact[:, 0], lp_exact)
    hv, hg = chunked_entropy_bounds(z, BF16, exact[:, 3], h_exact, chunk)
    checks = [
        ("log_prob", aux["log_prob"], exact[:, 0], v + CHUNK_ULPS),
        ("d log_prob[0]", lp_grad[:, 0], exact[:, 1], g[:, 0] + CHUNK_ULPS),
        ("d log_prob[1]", lp_grad[:, 1], exact[:, 2], g[:, 1] + CHUNK_ULPS),
        ("entropy", aux["entropy"], exact[:, 3], hv),
        ("d entropy[0]", h_grad[:, 0], exact[:, 4], hg[:, 0]),
        ("d entropy[1]", h_grad[:, 1], exact[:, 5], hg[:, 1]),
    ]
    for name, got, want, bound in checks:
        testing.assert_ulp_close(got, want, bound, BF16, inputs=m, err_msg=f"K={k} {name}")
    # Where nothing underflows the bound is a fraction of an ulp above the final rounding:
    # the values are within 1 ulp there.
    normal = np.abs(m.astype(np.float64)) < 87
    for name, got, want, _ in checks[::3]:
        assert np.max(oracle.ulp_error(got[normal], want[normal], BF16)) <= 1.0, name
    # Past bf16's cliff (and float32's) the fixed outputs are non-zero to underflow,
    # where the standard formulas are 0 (test_standard_formulas_fail_... names where).
    alive = (m.astype(np.float64) > 0) & (m.astype(np.float64) < 87)
    assert np.all(aux["log_prob"][alive] < 0) and np.all(aux["entropy"][alive] > 0)
    # argmax: 0 where m >= 0 (ties to the first index), 1 below; XLA's CPU kernels treat
    # subnormal inputs as 0, so a subnormal negative m ties with the zeros too.
    mf = m.astype(np.float64)
    tiny = float(np.finfo(np.float32).smallest_normal)
    np.testing.assert_array_equal(aux["argmax"], np.where(mf > -tiny, 0, 1))


# -- the peers' failure modes ---------------------------------------------------------------


# slow: every dtype (bf16 too); fast siblings: tests/numerics/test_linear_cross_entropy.py::
# test_bias_matches_the_materialized_head_with_a_bias (the bias added to each chunk's logits,
# its gradient: bf16 and float32), test_every_output_against_mpmath_up_to_k_100[bfloat16]
# (every output and its gradient through the same chunks, a 1e4 offset among the hard rows)
# and tests/numerics/test_per_token.py's standard formulas failing in bf16 (the standard
# entropy's cancellation)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_common_offset_of_1e4_through_the_bias(dtype):
    # PyTorch #195829: a wrong loss when every logit shares a large offset. The offset is
    # 1e4 as the dtype holds it, added by the bias; the base logits are multiples of
    # ulp(1e4), so z + 1e4 is exact (in the compute dtype too) and both rows are the same
    # distribution: every z_max - z_j and m_c - M is the same exact number, so log_prob,
    # entropy, argmax and the gradients are bit-identical with and without the offset,
    # and lse moves by exactly the offset where it is exact.
    dtype = np.dtype(dtype)
    offset, z0, z1, labels = offset_rows(dtype)  # test_per_token's rows
    with jax.enable_x64(dtype == np.float64):
        weight = jnp.eye(16, dtype=dtype)

        @jax.jit
        def run(h, b):
            def f(h):
                return numerics.linear_cross_entropy(
                    h, weight, labels, bias=b, chunk_size=5, return_aux=True
                )

            (loss, aux), vjp = jax.vjp(f, h)
            cot = (
                jnp.zeros_like(loss),
                {k: jnp.ones_like(v) for k, v in aux.items() if k != "argmax"}
                | {"argmax": np.zeros(aux["argmax"].shape, jax.dtypes.float0)},
            )
            return loss, aux, vjp(cot)[0]

        plain = jax.device_get(run(jnp.asarray(z0), jnp.zeros(16, dtype)))
        shifted = jax.device_get(run(jnp.asarray(z0), jnp.full(16, offset, dtype)))
    for key in ("log_prob", "entropy", "argmax"):
        np.testing.assert_array_equal(plain[1][key], shifted[1][key], err_msg=key)
    np.testing.assert_array_equal(plain[0], shifted[0])  # the loss
    # The gradient of sum(log_prob + entropy + lse): lse's gradient p is shift invariant too.
    np.testing.assert_array_equal(plain[2], shifted[2])
    # Both within the oracle's bounds (the offset rows' exact values are the plain ones'):
    # the plain rows through the identity call.
    check_aux(z0, labels, dtype, 5)
    # The standard entropy (verl's lse - sum p z) on the offset logits, materialized, is
    # off by far more than the bound where the dtype is narrower than float64.
    exact_h = oracle.entropy(z1)
    with jax.enable_x64(dtype == np.float64):
        naive = np.asarray(jax.jit(standard.entropy)(jnp.asarray(z1)))
    bound, _ = entropy_bounds(z1, dtype, exact_h, np.zeros(z1.shape))
    if dtype != np.float64:
        assert np.max(oracle.ulp_error(naive, exact_h, dtype) - bound) > 0


def _exact_case(dtype, n=8, d=16, v=37, seed=0):
    """Dyadic hidden and weight (test_linear_cross_entropy's `_dyadic`): exact logits."""
    rng = np.random.default_rng([n, d, v, seed])

    def dyadic(shape):
        if np.dtype(dtype).itemsize == 2:
            return (rng.integers(-3, 4, shape) / 4).astype(dtype)
        return (rng.integers(-63, 64, shape) / 8).astype(dtype)

    return dyadic((n, d)), dyadic((d, v)), rng.integers(0, v, n).astype(np.int32)


@functools.cache
def _aux_program(**kw):
    """One jitted program per option set (shapes and dtypes share it across tests)."""

    def run(h, w, labels):
        def f(h, w):
            loss, aux = numerics.linear_cross_entropy(h, w, labels, return_aux=True, **kw)
            total = loss + aux["log_prob"] + aux["entropy"] + aux["lse"]
            return jnp.sum(total.astype(_ctype(h.dtype))), (loss, aux)

        (_, (loss, aux)), grads = jax.value_and_grad(f, (0, 1), has_aux=True)(h, w)
        return loss, aux, *grads

    return jax.jit(run)


def _run_aux(hidden, weight, labels, **kw):
    """(loss, aux, d hidden, d weight) of sum(loss + log_prob + entropy + lse) under jit."""
    dtype = np.dtype(hidden.dtype)
    with jax.enable_x64(dtype == np.float64):
        run = _aux_program(**kw)
        return jax.device_get(run(jnp.asarray(hidden), jnp.asarray(weight), jnp.asarray(labels)))


# slow: every dtype (bf16 too), chunks 1, 7, 37 and 64; fast sibling: test_chunk_size_invariance_
# of_two_chunkings (bf16, chunks 1 and 7: full chunks only, and full chunks with a partial
# last one, the same bounds, the tie across chunks)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_chunk_size_invariance(dtype):
    # Chunks 1 (every column its own chunk), 7 (partial), 37 (one chunk) and 64 (capped at V).
    _check_chunk_size_invariance(dtype, (1, 7, 37, 64), ((1, 7), (7, 37), (1, 64)))


def test_chunk_size_invariance_of_two_chunkings():
    _check_chunk_size_invariance(BF16, (1, 7), ((1, 7),))


def _check_chunk_size_invariance(dtype, chunks, pairs):
    # Each chunk size's outputs lie within their oracle bounds (check_aux, the bounds grow
    # with log2 of the number of chunks), so two chunk sizes agree within the sum of both
    # bounds; argmax is exact and so equal.
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(9)
    z = (rng.standard_normal((8, 37)) * 6).astype(dtype)
    z[0, 3] = z[0, 30] = np.max(z[0]) + 1  # a tie across chunks: the first index wins
    labels = rng.integers(0, 37, 8).astype(np.int32)
    # every chunk size in one program
    outs = {
        c: check_aux(z, labels, dtype, c, out)
        for c, out in zip(chunks, _identity_calls(z, labels, chunks), strict=True)
    }
    exact_lp, _, exact_h, _, _ = exact_outputs(z, labels)
    assert outs[1][1]["argmax"][0] == 3
    for a, b in pairs:
        for key, exact, bounds in (
            (
                "log_prob",
                exact_lp,
                lambda c: (
                    log_prob_bounds(z, labels, dtype, exact_lp, np.zeros(z.shape))[0] + CHUNK_ULPS
                ),
            ),
            (
                "entropy",
                exact_h,
                lambda c: chunked_entropy_bounds(
                    z, dtype, exact_h.astype(np.float64), np.zeros(z.shape), c
                )[0],
            ),
        ):
            diff = np.abs(outs[a][1][key].astype(np.float64) - outs[b][1][key].astype(np.float64))
            limit = (bounds(a) + bounds(b)) * oracle.ulp(exact.astype(np.float64), dtype)
            assert np.all(diff <= limit), (key, a, b)
        np.testing.assert_array_equal(outs[a][1]["argmax"], outs[b][1]["argmax"])


# The slow tier's (-m slow), as test_reduction_none_gradients_are_per_row (each row's
# gradients alone and in the batch, bit for bit, on exact logits); the fast siblings: the
# return_aux calls on batches of rows, test_every_output_against_mpmath_up_to_k_100 (every
# row's outputs and gradient rows within their own bounds).
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [BF16, F32], ids=str)
def test_batch_invariance(dtype):
    # A row's outputs and its gradient rows do not depend on the other rows: on exact logits
    # (dyadic hidden and weight) bit for bit, alone, in two batches, at two positions.
    # (float32: the slow tier's; bf16 is the fast sibling.)
    hidden, weight, labels = _exact_case(dtype, n=8, seed=1)
    other, _, other_labels = _exact_case(dtype, n=8, seed=2)
    other[5], other_labels[5] = hidden[2], labels[2]
    a = _run_aux(hidden, weight, labels, chunk_size=8)
    b = _run_aux(other, weight, other_labels, chunk_size=8)
    alone = _run_aux(hidden[2:3], weight, labels[2:3], chunk_size=8)
    for x, y, w in ((a[0], b[0], alone[0]), (a[2], b[2], alone[2])):
        np.testing.assert_array_equal(x[2], y[5])
        np.testing.assert_array_equal(x[2], w[0])
    for key in a[1]:
        np.testing.assert_array_equal(a[1][key][2], b[1][key][5], err_msg=key)
        np.testing.assert_array_equal(a[1][key][2], alone[1][key][0], err_msg=key)


# slow; fast siblings: test_the_rl_example_fast (per-row cotangents into log_prob, -advantage
# / n, with reduction "none": bf16, held to the materialized path's gradients),
# test_every_output_against_mpmath_up_to_k_100 (cotangents into log_prob and entropy) and
# tests/numerics/test_linear_cross_entropy.py::test_a_scalar_of_per_row_losses_keeps_per_row_
# cotangents (per-row cotangents of the losses against the exact gradient)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [BF16, F32], ids=str)
def test_reduction_none_gradients_are_per_row(dtype):
    # Liger #968: wrong gradients with reduction='none'. With a cotangent c per row, row i
    # of d hidden is c_i times the gradient of row i alone, for the loss and for each
    # differentiable aux output: bit for bit on exact logits through the identity weight
    # (d hidden = g rounded once, times the identity: exact), where c_i is a power of two.
    rng = np.random.default_rng(5)
    z = (rng.standard_normal((6, 20)) * 4).astype(dtype)
    labels = rng.integers(0, 20, 6).astype(np.int32)
    c = 2.0 ** rng.integers(-2, 3, 6)
    weight = jnp.eye(20, dtype=dtype)
    f = functools.partial(numerics.linear_cross_entropy, chunk_size=6, return_aux=True)

    def grads(h, t, cot):
        out = {}
        for key in ("loss", "log_prob", "entropy", "lse"):

            def one(h, key=key):
                loss, aux = f(h, weight, t)
                return loss if key == "loss" else aux[key]

            out[key] = jax.vjp(one, h)[1](cot.astype(h.dtype))[0]
        return out

    batch = jax.jit(grads)(jnp.asarray(z), labels, jnp.asarray(c))
    for i in range(6):
        alone = jax.jit(grads)(
            jnp.asarray(z[i : i + 1]), labels[i : i + 1], jnp.asarray(c[i : i + 1])
        )
        for key in batch:
            np.testing.assert_array_equal(batch[key][i], alone[key][0], err_msg=(i, key))
    # and each is c_i times the unit-cotangent gradient (powers of two: exact)
    unit = jax.jit(grads)(jnp.asarray(z), labels, jnp.ones(6))
    for key in batch:
        scaled = np.asarray(unit[key], np.float64) * c[:, None]
        np.testing.assert_array_equal(np.asarray(batch[key], np.float64), scaled, err_msg=key)


# slow; fast siblings: every other call with z_loss left at its default 0.0 (the weight-0 path:
# no z-loss term, z_loss outputs 0) and test_materialized_aux_matches_the_chunked[bfloat16]
# (z_loss=1e-3 with return_aux in bf16: the loss and the z_loss output against the
# materialized ones); d weight of the aux outputs: test_the_rl_example_fast
@pytest.mark.slow
def test_z_loss_weight_zero_adds_nothing():
    # OLMo-core #702: the z-loss added when switched off. Weight 0 gives the loss and the
    # gradients of no z-loss bit for bit and a z_loss output of exact zeros; weight w gives
    # z_loss = w lse^2 and a loss that is the plain loss plus it (two float32 roundings:
    # the sum and the product, then bf16's rounding of each: 1 ulp of the loss).
    hidden, weight, labels = _exact_case(BF16, n=8, seed=3)
    plain = _run_aux(hidden, weight, labels, chunk_size=8)
    zero = _run_aux(hidden, weight, labels, chunk_size=8, z_loss=0.0)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(zero), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.any(np.asarray(zero[1]["z_loss"], np.float64))
    w = 1e-2
    with_z = _run_aux(hidden, weight, labels, chunk_size=8, z_loss=w)
    lse = with_z[1]["lse"].astype(np.float64)
    np.testing.assert_array_equal(with_z[1]["lse"], plain[1]["lse"])
    testing.assert_ulp_close(with_z[1]["z_loss"], w * lse * lse, 1.5, BF16)  # lse's rounding
    want = plain[0].astype(np.float64) + with_z[1]["z_loss"].astype(np.float64)
    testing.assert_ulp_close(with_z[0], want, 1.5, BF16)
    assert np.all(with_z[0].astype(np.float64) > plain[0].astype(np.float64))


# slow (both dtypes); fast siblings: tests/numerics/test_linear_cross_entropy.py::
# test_weight_and_hidden_gradients_against_mpmath[bfloat16] (the chunked bf16 loss under a cap
# c = 5 that bites, with z-loss and smoothing, against mpmath's capped loss, CAP_ULPS c in the
# bound), test_capped_and_tempered_peaked_rows_keep_their_entropy[bfloat16] (return_aux under a
# cap in bf16: entropy, its gradient and argmax against mpmath on the capped logits),
# test_temperature_divides_the_capped_logits (float64, the native path: the loss, log_prob and
# entropy under a cap with return_aux against the oracle, the cap applied first) and
# test_materialized_aux_matches_the_chunked[bfloat16] (the aux outputs against the
# materialized cross_entropy(..., return_aux=True)'s)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [BF16, F64], ids=str)
def test_soft_cap_is_applied(dtype):
    # CCE #48: the soft cap never applied. The loss under a cap c = 2 against mpmath's
    # capped cross-entropy (`oracle.cross_entropy(..., soft_cap=)`), within the option
    # bound of the linear tests (value: ULPS + CHUNK_ULPS + OPTION_ULPS + CAP_ULPS c), and
    # far from the uncapped loss; the aux outputs against the materialized
    # `cross_entropy(..., soft_cap=c, return_aux=True)`: both cap the same float32 logits
    # and round to bf16 once (1 ulp apart at most where each is within its bound of the
    # same float32 values; float64: each within ULPS + CHUNK_ULPS + CAP_ULPS c + log2 K of
    # the exact outputs of the capped logits, so twice that apart).
    dtype = np.dtype(dtype)
    hidden, weight, labels = _exact_case(dtype, n=8, v=37, seed=4)
    with jax.enable_x64(dtype == np.float64):
        loss, aux = jax.jit(
            lambda h, w: numerics.linear_cross_entropy(
                h, w, labels, soft_cap=2.0, chunk_size=8, return_aux=True
            )
        )(hidden, weight)
        logits = jnp.dot(
            jnp.asarray(hidden), jnp.asarray(weight), preferred_element_type=_ctype(dtype)
        )
        _m_loss, m_aux = jax.jit(
            lambda z: numerics.cross_entropy(z, labels, soft_cap=2.0, return_aux=True)
        )(logits.astype(dtype))
        uncapped = jax.jit(lambda h, w: numerics.linear_cross_entropy(h, w, labels))(hidden, weight)
    z64 = hidden.astype(np.float64) @ weight.astype(np.float64)
    exact = oracle.cross_entropy(z64, labels, soft_cap=2.0)
    bound = ULPS["value"][dtype] + CHUNK_ULPS + testing.OPTION_ULPS["value"]
    bound += testing.CAP_ULPS * 2
    testing.assert_ulp_close(loss, exact, bound, dtype, err_msg="capped loss")
    assert np.max(np.abs(np.asarray(uncapped, np.float64) - exact)) > 0.1  # the cap matters here
    assert np.max(np.abs(z64)) > 2  # the cap bites
    each = ULPS["value"][dtype] + CHUNK_ULPS + testing.CAP_ULPS * 2 + np.log2(37)
    tol = 1.0 if dtype.itemsize == 2 else 2 * each
    for key in ("log_prob", "entropy", "lse"):
        testing.assert_ulp_close(
            aux[key], np.asarray(m_aux[key], np.float64), tol, dtype, err_msg=key
        )
    np.testing.assert_array_equal(aux["argmax"], m_aux["argmax"])


# -- gradients ------------------------------------------------------------------------------


# The slow tier's (-m slow); its fast siblings: test_temperature_divides_the_capped_logits
# (cap and temperature in float64 against the oracle), test_capped_and_tempered_peaked_rows_
# keep_their_entropy (the entropy's gradient under both against the oracle's chain rule),
# tests/numerics/test_linear_cross_entropy.py::test_bias_matches_the_materialized_head_with_a_
# bias (a bias, its gradient) and test_the_rl_example_fast (d weight of the aux outputs).
@pytest.mark.slow
def test_policy_gradient_matches_the_materialized_path_and_finite_differences():
    # In float64: the gradient of sum(adv * log_prob) - beta sum(entropy) + lse with
    # respect to hidden and weight against the same loss through the materialized
    # numerics.log_prob / entropy / logsumexp of hidden @ weight, with a bias, a temperature
    # and a cap. Both are within a few ulps of the exact gradient entries' terms: each
    # gradient entry is a dot of D (resp. N) products of the logit gradients, whose size is
    # sum |g| |w| (resp. |h| |g|), so they agree to 64 u of that (generous for 2 x (12 +
    # log2 37) ulps of each side). Central differences of the chunked value: truncation
    # h^2 |f'''| / 6 plus rounding eps |f| / h.
    rng = np.random.default_rng(11)
    n, d, v = 6, 5, 37
    with jax.enable_x64(True):
        h = jnp.asarray(rng.standard_normal((n, d)))
        w = jnp.asarray(rng.standard_normal((d, v)))
        b = jnp.asarray(rng.standard_normal(v))
        t = jnp.asarray(rng.integers(0, v, n))
        adv = jnp.asarray(rng.standard_normal(n))
        beta, temp, cap = 0.3, 0.7, 4.0

        def chunked(h, w):
            _, aux = numerics.linear_cross_entropy(
                h, w, t, bias=b, soft_cap=cap, temperature=temp, chunk_size=8, return_aux=True
            )
            return jnp.sum(adv * aux["log_prob"] - beta * aux["entropy"] + aux["lse"])

        def materialized(h, w):
            z = h @ w + b[None, :]
            z = cap * jnp.tanh(z / cap) / temp
            lp = numerics.log_prob(z, t)
            return jnp.sum(adv * lp - beta * numerics.entropy(z) + jax.nn.logsumexp(z, -1))

        val, (dh, dw) = jax.jit(jax.value_and_grad(chunked, (0, 1)))(h, w)
        val_m, (dh_m, dw_m) = jax.jit(jax.value_and_grad(materialized, (0, 1)))(h, w)
        eps = float(np.finfo(np.float64).eps)
        np.testing.assert_allclose(val, val_m, rtol=64 * eps * 10)
        scale_h = np.abs(np.asarray(w)).sum(1) * 3
        scale_w = np.abs(np.asarray(h)).sum(0)[:, None] * 3
        assert np.all(np.abs(dh - dh_m) <= 64 * eps * scale_h[None, :])
        assert np.all(np.abs(dw - dw_m) <= 64 * eps * scale_w)
        step = 1e-5
        f = jax.jit(chunked)
        for i, j in ((0, 0), (3, 4)):
            e = np.zeros((n, d))
            e[i, j] = step
            fd = (f(h + e, w) - f(h - e, w)) / (2 * step)
            assert abs(fd - dh[i, j]) <= step**2 * 100 + eps * 100 / step
        for i, j in ((1, 2), (4, 36)):
            e = np.zeros((d, v))
            e[i, j] = step
            fd = (f(h, w + e) - f(h, w - e)) / (2 * step)
            assert abs(fd - dw[i, j]) <= step**2 * 100 + eps * 100 / step


def test_temperature_divides_the_capped_logits():
    # temperature T: the outputs are those of c tanh(z / c) / T, the cap first: against the
    # oracle on those logits in float64 (the cap and the division round once each, a
    # perturbation of CAP_ULPS + 1 ulps of |z'| that the outputs turn into at most twice
    # that times their own conditioning; held to 2e-13 relative, generous for K = 37).
    with jax.enable_x64(True):
        hidden, weight, labels = _exact_case(np.float64, n=6, v=37, seed=5)
        loss, aux = jax.jit(  # one program (eager: ~80 small ones)
            lambda h, w: numerics.linear_cross_entropy(
                h, w, labels, soft_cap=3.0, temperature=0.5, chunk_size=8, return_aux=True
            )
        )(hidden, weight)
    z = hidden @ weight
    zt = 3.0 * np.tanh(z / 3.0) / 0.5
    np.testing.assert_allclose(aux["entropy"], oracle.entropy(zt), rtol=2e-13)
    np.testing.assert_allclose(aux["log_prob"], -oracle.cross_entropy(zt, labels), rtol=2e-13)
    np.testing.assert_allclose(loss, oracle.cross_entropy(zt, labels), rtol=2e-13)
    # The other order, c tanh(z / (c T)) T / T..., differs: the cap is applied first.
    other = 3.0 * np.tanh(z / 0.5 / 3.0)
    assert np.max(np.abs(oracle.entropy(other) - aux["entropy"])) > 1e-3


@pytest.mark.parametrize("dtype", [BF16, pytest.param(F32, marks=pytest.mark.slow)], ids=str)
def test_capped_and_tempered_peaked_rows_keep_their_entropy(dtype):
    # Under a cap and a temperature the logits are computed from the dot's output, and XLA
    # recomputes their last multiply inside each consumer, contracted with the subtraction
    # of the max (a fused multiply-add): z_max - z at the maximum came out as -5.96e-8,
    # not 0 (numerics._linear._gaps). For a peaked row, where H ~ (1 + m) e^-m is far below
    # that, such a gap would be the whole answer, and a negative one moved argmax. Here
    # rows [10, 0, -1, ...] (margin ~ 19.7 after the cap 50 and T = 0.5: H ~ 1e-6): H
    # against mpmath on the float64 capped and tempered logits, within 1e-3 relative (the
    # cap's and division's roundings in the compute dtype, a few ulps of |z| ~ 20, move H
    # by about 20 x 4 ulps(20) relative, 1e-4 in float32), and argmax 0.
    k = 40
    z = np.full((4, k), -1.0)
    z[:, 1:5] = 0.0
    z[:, 0] = [10.0, 9.5, 11.0, 10.25]
    z = z.astype(dtype)
    labels = np.array([0, 1, 0, 3], np.int32)
    _loss, aux, _, h_grad = _identity_call(z, labels, 16, soft_cap=50.0, temperature=0.5)
    zt = 50.0 * np.tanh(z.astype(np.float64) / 50.0) / 0.5
    exact_h = oracle.entropy(zt)
    tol = 1e-3 + (2.0**-8 if dtype == BF16 else 0.0)  # + bf16's rounding of the output
    np.testing.assert_allclose(aux["entropy"].astype(np.float64), exact_h, rtol=tol)
    np.testing.assert_array_equal(aux["argmax"], np.zeros(4))
    _, exact_grad = oracle.entropy_value_and_grad(zt)
    # d hidden = dH/dz' * dz'/dz = dH/dz' sech^2(z / 50) / 0.5 per entry
    chain = exact_grad / np.cosh(z.astype(np.float64) / 50.0) ** 2 / 0.5
    got = h_grad.astype(np.float64)
    assert np.all(
        np.abs(got - chain) <= tol * np.abs(chain) + 1e-3 * np.abs(chain).max(-1, keepdims=True)
    )


# slow; fast sibling: test_every_output_against_mpmath_up_to_k_100[float32] (the same call and
# path, chunks with the entropy's shift term scaled, float32)
@pytest.mark.slow
def test_logits_near_the_largest_float_stay_finite():
    # Logits [4e37, 0 x 31] in chunks of 8: the entropy's shift term (M - m_c)(1 + r_c) of
    # a chunk of zeros is 4e37 x 8 = inf in float32, times its scale e^(m_c - M) = 0: NaN,
    # which reached even log_prob's gradient (0 x NaN) before the scale was applied first.
    # Every output and gradient is the exact one here: H = 0, log p = 0, gradients 0.
    z = np.zeros((2, 32), np.float32)
    z[:, 0] = [4.0e37, 3.0e38]
    _, aux, lp_grad, h_grad = _identity_call(z, np.array([0, 5], np.int32), 8)
    assert np.all(aux["entropy"] == 0) and aux["log_prob"][0] == 0
    assert aux["log_prob"][1] == -np.float32(3.0e38)
    assert np.all(np.isfinite(lp_grad)) and np.all(np.isfinite(h_grad))
    assert not np.any(h_grad) and not np.any(lp_grad[0])


# -- accumulation dtype ---------------------------------------------------------------------


# bf16 is the slow tier's (-m slow); float32 (both accumulation dtypes) its fast sibling.
@pytest.mark.parametrize("dtype", [pytest.param(BF16, marks=pytest.mark.slow), F32], ids=str)
def test_accumulation_dtype_buys_its_stated_error(dtype):
    # The docstring's model: a logit z = sum_d h_d w_d over D terms is within (D - 1) u_acc
    # sum |h w| (bf16 products exact in both; fp32's products exact in float64, rounded in
    # float32: D u32); the loss moves by at most 2 max |dz|, the entropy by 2 H max |dz|,
    # on top of their own bounds (ULPS + CHUNK_ULPS, in ulps of the exact values computed
    # from the exact logits). Random hidden and weight with D = 512; rows made confident
    # (the label's column gets a large weight), where a small loss makes the logits'
    # rounding the largest error. float64 accumulation must meet the bound with u_acc =
    # 2^-53; float32 accumulation the bound with 2^-24.
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(13)
    n, d, v = 8, 512, 40
    hidden = (rng.standard_normal((n, d)) / 4).astype(dtype)
    weight = (rng.standard_normal((d, v)) / 4).astype(dtype)
    labels = rng.integers(0, v, n).astype(np.int32)
    h64, w64 = hidden.astype(np.float64), weight.astype(np.float64)
    for r, t in enumerate(labels):  # confident rows: margin about 12
        weight[:, t] = (w64[:, t] + 12 * h64[r] / (h64[r] @ h64[r])).astype(dtype)
    w64 = weight.astype(np.float64)
    z = h64 @ w64  # products exact in float64 for both dtypes, the sum rounded at 2^-53 D
    size = np.abs(h64) @ np.abs(w64)
    exact_loss = oracle.cross_entropy(z, labels, exact=True)
    exact_h = oracle.entropy(z, exact=True)
    results = {}
    with jax.enable_x64(True):
        for acc in (np.float32, np.float64):
            loss, aux = jax.jit(
                lambda h, w, acc=acc: numerics.linear_cross_entropy(
                    h, w, labels, chunk_size=16, return_aux=True, accumulation_dtype=acc
                )
            )(hidden, weight)
            results[acc] = loss
            u_acc = 2.0**-53 if acc == np.float64 else 2.0**-24
            terms = d if (acc == np.float32 and dtype == F32) else d - 1
            dz = terms * u_acc * size.max(-1) + d * 2.0**-53 * size.max(-1)  # + z's own error
            loss_err = 2 * dz / oracle.ulp(np.abs(exact_loss.astype(np.float64)), dtype)
            h_err = (
                2 * exact_h.astype(np.float64) * dz / oracle.ulp(exact_h.astype(np.float64), dtype)
            )
            base = ULPS["value"][dtype] + CHUNK_ULPS + np.log2(v)
            testing.assert_ulp_close(
                loss, exact_loss, base + loss_err, dtype, err_msg=f"loss {acc}"
            )
            hv, _ = chunked_entropy_bounds(
                z.astype(dtype) if dtype != F32 else z.astype(np.float32),
                dtype,
                exact_h.astype(np.float64),
                np.zeros(z.shape),
                16,
            )
            testing.assert_ulp_close(
                aux["entropy"], exact_h, hv + h_err + base, dtype, err_msg=f"H {acc}"
            )
            assert aux["log_prob"].dtype == dtype
    if dtype == F32:
        # float64 accumulation removes the logits' rounding: the loss's error against the
        # exact value is then no larger than float32 accumulation's, row by row.
        e32 = oracle.ulp_error(np.asarray(results[np.float32]), exact_loss, dtype)
        e64 = oracle.ulp_error(np.asarray(results[np.float64]), exact_loss, dtype)
        assert np.max(e64) <= ULPS["value"][dtype] + CHUNK_ULPS + np.log2(v)
        assert np.max(e64) <= np.max(e32)


# slow; fast siblings: every other call with these at their defaults (accumulation_dtype None,
# temperature 1, return_aux False: the branches the explicit values take), in bf16
# test_fused_gradients_on_one_layout[bfloat16-plain] (reduction "sum") in
# tests/numerics/test_linear_cross_entropy.py, and return_aux's loss, -log_prob bit for bit:
# test_every_output_against_mpmath_up_to_k_100[bfloat16]
@pytest.mark.slow
def test_default_accumulation_is_the_unchanged_path():
    # accumulation_dtype None and float32 (for fp32 inputs), temperature 1 and return_aux
    # False take the path that existed before them: bit-identical losses and gradients;
    # return_aux=True's loss is within 1 ulp of it in bf16.
    hidden, weight, labels = _exact_case(BF16, n=8, seed=6)
    f = numerics.linear_cross_entropy

    def run(**kw):
        return jax.jit(
            jax.value_and_grad(lambda h, w: f(h, w, labels, reduction="sum", **kw), (0, 1))
        )(hidden, weight)

    plain = run()
    for kw in ({"accumulation_dtype": None}, {"temperature": 1.0}, {"return_aux": False}):
        for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(run(**kw)), strict=True):
            np.testing.assert_array_equal(a, b)
    per_row = jax.jit(lambda h, w: f(h, w, labels))(hidden, weight)  # eager: ~50 programs
    with_aux = jax.jit(lambda h, w: f(h, w, labels, return_aux=True)[0])(hidden, weight)
    testing.assert_ulp_close(with_aux, np.asarray(per_row, np.float64), 1, BF16)


# -- masks, the materialized path, errors ---------------------------------------------------


# slow; fast siblings: test_the_rl_example_fast (return_aux under a `where` mask, bf16, its
# gradients held to the masked materialized path's) and tests/numerics/
# test_linear_cross_entropy.py::test_batch_shapes_jit_vmap_and_reductions (ignore_index gives
# `where`'s losses and gradients bit for bit, masked positions 0)
@pytest.mark.slow
def test_masked_positions_give_zero_outputs_and_gradients():
    hidden, weight, labels = _exact_case(F32, n=6, seed=7)
    where = np.array([True, False, True, True, False, True])
    t = np.where(where, labels, -100)

    def f(h, **kw):
        loss, aux = numerics.linear_cross_entropy(
            h, weight, kw.pop("t", labels), chunk_size=8, return_aux=True, **kw
        )
        return aux["log_prob"].sum() + aux["entropy"].sum() + aux["lse"].sum(), (loss, aux)

    for kw in ({"where": where}, {"t": t, "ignore_index": -100}):
        # one program per mask (eager, each call was ~60 small ones)
        run = jax.jit(lambda h, kw=kw: jax.value_and_grad(f, has_aux=True)(h, **kw))
        (_, (loss, aux)), dh = run(hidden)
        for key in ("log_prob", "entropy", "lse", "z_loss"):
            assert not np.any(np.asarray(aux[key])[~where]), key
            assert np.all(np.asarray(aux[key])[where] != 0) or key == "z_loss", key
        assert not np.any(np.asarray(dh)[~where]) and np.all(np.any(np.asarray(dh)[where], -1))
        assert not np.any(np.asarray(loss)[~where])


# float32 is the slow tier's (-m slow); its fast siblings: bf16 here and
# test_every_output_against_mpmath_up_to_k_100[float32] (the chunked outputs against the
# oracle).
@pytest.mark.parametrize("dtype", [BF16, pytest.param(F32, marks=pytest.mark.slow)], ids=str)
def test_materialized_aux_matches_the_chunked(dtype):
    # cross_entropy(..., return_aux=True) on the same (exact) logits: both compute in
    # float32 and round once to bf16 (1 ulp apart at most); in fp32 each is within its
    # bound of the exact values (log_prob ULPS + CHUNK_ULPS + log2 K, entropy the models'),
    # held here to the sum, ULPS and log2 K doubled.
    dtype = np.dtype(dtype)
    hidden, weight, labels = _exact_case(dtype, n=8, v=37, seed=8)
    # Each call one program (eager, ~110 small ones).
    loss, aux = jax.jit(
        lambda h, w: numerics.linear_cross_entropy(
            h, w, labels, chunk_size=8, return_aux=True, z_loss=1e-3
        )
    )(hidden, weight)
    logits = (hidden.astype(np.float64) @ weight.astype(np.float64)).astype(dtype)
    m_loss, m_aux = jax.jit(
        lambda z: numerics.cross_entropy(z, labels, return_aux=True, z_loss=1e-3)
    )(logits)
    tol = 1.0 if dtype.itemsize == 2 else 2 * (ULPS["value"][dtype] + CHUNK_ULPS + 8) + 16
    for key in ("log_prob", "entropy", "lse", "z_loss"):
        testing.assert_ulp_close(
            aux[key], np.asarray(m_aux[key], np.float64), tol, dtype, err_msg=key
        )
    np.testing.assert_array_equal(aux["argmax"], m_aux["argmax"])
    testing.assert_ulp_close(loss, np.asarray(m_loss, np.float64), tol, dtype)
    # The same numbers as the per-token functions on the logits.
    np.testing.assert_array_equal(m_aux["log_prob"], jax.jit(numerics.log_prob)(logits, labels))
    np.testing.assert_array_equal(m_aux["entropy"], jax.jit(numerics.entropy)(logits))


def test_bad_input_raises_one_clear_error():
    h, w, t = jnp.ones((2, 3)), jnp.ones((3, 4)), jnp.array([0, 1])
    f = numerics.linear_cross_entropy
    cases = [
        (lambda: f(h, w, t, temperature=0.0), ValueError, "temperature must be a finite"),
        (lambda: f(h, w, t, temperature=-1.0), ValueError, "temperature must be a finite"),
        (lambda: f(h, w, t, temperature=float("inf")), ValueError, "temperature must be"),
        (lambda: f(h, w, t, temperature="hot"), TypeError, "temperature must be a number"),
        (lambda: f(h, w, t, accumulation_dtype=jnp.bfloat16), ValueError, "accumulation_dtype"),
        (lambda: f(h, w, t, accumulation_dtype="float16"), ValueError, "accumulation_dtype"),
        (lambda: f(h, w, t, accumulation_dtype=jnp.int32), ValueError, "accumulation_dtype"),
        (lambda: f(h, w, t, accumulation_dtype="fp99"), ValueError, "accumulation_dtype"),
        (lambda: f(h, w, t, return_aux=1), TypeError, "return_aux must be True or False"),
        (lambda: f(h, w, t, return_aux="yes"), TypeError, "return_aux must be True or False"),
        (lambda: f(h, w, t, return_aux=True, vocab_axis="v"), ValueError, "not supported with"),
        (lambda: f(h, w, t, temperature=2.0, batch_axis="b"), ValueError, "not supported with"),
        (
            lambda: numerics.cross_entropy(h, t, return_aux=True, vocab_axis="v"),
            ValueError,
            "not supported with vocab_axis",
        ),
        (
            lambda: numerics.cross_entropy(h, t, return_aux=None),
            TypeError,
            "return_aux must be True or False",
        ),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
    with jax.enable_x64(False), pytest.raises(ValueError, match="x64"):
        f(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), t, accumulation_dtype="float64")
    with jax.enable_x64(True), pytest.raises(ValueError, match="narrower"):
        f(h.astype(np.float64), w.astype(np.float64), t, accumulation_dtype=np.float32)
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda temp: f(h, w, t, temperature=temp))(1.0)


# -- the RL example of docs/examples.md ------------------------------------------------------


def _docs_example() -> str:
    text = (pathlib.Path(__file__).parents[2] / "docs" / "examples.md").read_text()
    section = text.split("## A policy-gradient loss from per-token log-probabilities")[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


# The slow tier's (its eager reference path compiles ~170 small programs, 11 s of a 2-core
# CPU); its fast sibling, test_the_rl_example_fast, runs the same fused and materialized
# computations with the same bound, the reference under jit.
@pytest.mark.slow
def test_the_rl_example_in_the_docs_runs_and_matches_the_materialized_path():
    # docs/examples.md's code, run as it is written: it asserts itself that the bf16
    # gradients are finite and within the stated bound of the materialized path's.
    scope: dict = {}
    exec(compile(_docs_example(), "docs/examples.md", "exec"), scope)
    assert math.isfinite(float(scope["loss"]))
    assert scope["d_hidden"].dtype == jnp.bfloat16


def test_the_rl_example_fast():
    # docs/examples.md's policy-gradient loss (the slow test above runs the block itself):
    # the same inputs, the same fused bf16 value_and_grad of the REINFORCE / GRPO loss with
    # an entropy bonus from aux["log_prob"] and aux["entropy"] under a response mask, and
    # the same materialized float32 reference, here jitted, held to the block's bound.
    b, t, d, v = 4, 16, 128, 1000

    @jax.jit
    def inputs():
        k_h, k_w, k_a, k_adv = jax.random.split(jax.random.key(0), 4)
        hidden = jax.random.normal(k_h, (b, t, d), jnp.float32).astype(jnp.bfloat16)
        weight = (4 * jax.random.normal(k_w, (d, v), jnp.float32) / d**0.5).astype(jnp.bfloat16)
        actions = jax.random.randint(k_a, (b, t), 0, v)
        advantages = jax.random.normal(k_adv, (b, 1), jnp.float32)
        mask = jnp.arange(t)[None, :] < jnp.array([[16], [12], [9], [14]])
        return hidden, weight, actions, advantages, mask

    hidden, weight, actions, advantages, mask = inputs()
    beta = 1e-3

    def rl_loss(log_prob, entropy):
        n = jnp.sum(mask, dtype=jnp.float32)
        pg = -jnp.sum(advantages * log_prob.astype(jnp.float32)) / n
        return pg - beta * jnp.sum(entropy.astype(jnp.float32)) / n

    def fused(hidden, weight):
        _, aux = numerics.linear_cross_entropy(hidden, weight, actions, where=mask, return_aux=True)
        return rl_loss(aux["log_prob"], aux["entropy"])

    def of_logits(z):
        return rl_loss(numerics.log_prob(z, actions, where=mask), numerics.entropy(z, where=mask))

    @jax.jit
    def reference(hidden, weight):
        h32, w32 = hidden.astype(jnp.float32), weight.astype(jnp.float32)
        z = jnp.einsum("btd,dv->btv", h32, w32, precision="highest")
        g = jax.grad(of_logits)(z)  # the loss's gradient on the logits
        return (
            (jnp.einsum("btv,dv->btd", g, w32), jnp.einsum("btv,dv->btd", abs(g), abs(w32))),
            (jnp.einsum("btd,btv->dv", h32, g), jnp.einsum("btd,btv->dv", abs(h32), abs(g))),
        )

    loss, (d_hidden, d_weight) = jax.jit(jax.value_and_grad(fused, (0, 1)))(hidden, weight)
    refs = jax.device_get(reference(hidden, weight))
    assert math.isfinite(float(loss)) and d_hidden.dtype == jnp.bfloat16
    for got, (ref, scale) in zip(jax.device_get((d_hidden, d_weight)), refs, strict=True):
        assert np.all(np.isfinite(got.astype(np.float32)))
        err = np.abs(got.astype(np.float32) - ref)
        assert np.all(err <= np.float32(2**-7) * (scale + np.abs(ref))), float(np.max(err))
