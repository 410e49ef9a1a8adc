"""Fused distillation from hidden states (issue 48, item 2): `linear_kl_divergence`,
`linear_js_divergence` and `linear_topk_kl_divergence`.

Error model (fixed before looking at results; each test names the part it uses):

- The logits are made exact (small dyadic hidden and weight entries; T a power of two),
  so the chunked functions and the materialized `kl_divergence` / `js_divergence` on
  hidden @ weight see the same numbers.
- The materialized divergence is within its oracle bound of the exact value
  (tests/numerics/test_divergence.py): B = `ULPS` value + |gap| + 2 log2 V + kappa ulps,
  kappa = sum_k moves_k c_k / value (`numerics._check_divergence.sensitivity`: c_k the
  ulps s_k = log(q_k / p_k) can carry, moves_k how far the value moves per unit of s_k).
- The chunked one differs from it only by the rescaling of each chunk's sums by
  alpha = e^(m_c - M) (one exp and one product, `CHUNK_ULPS` = 1.5, as for
  `linear_cross_entropy`): p_k and q_k carry 1.5 ulps more (the value: 1.5 ulps of itself),
  and the gap sum G, whose terms each carry 1.5 ulps more, moves log(S_S / S_T) by
  1.5 ulps of the terms' absolute sum A = sum |q_k S_S / S_T - p_k| (c_k: + 1.5 A, kappa:
  + 1.5 A sum moves / value). So chunked and materialized agree to 2 B + 1.5 (1 + A sum
  moves / value) ulps in fp32 and fp64.
- bf16 and fp16 compute in float32 and round once: the float32 errors above (tens of
  float32 ulps on these inputs) are 2^-13 of a bf16 ulp and 2^-10 of an fp16 one, so the two
  paths round to the same or neighbouring values: 1 ulp of the dtype.
- Gradients: each entry of d/d(student logits) within G_k = `ULPS` grad + |gap_k| +
  2 log2 V + c_k ulps of its terms' scale (`gradient_scale`), the chunked one
  + 1.5 (1 + A); d hidden = g W^T and d weight = h^T g are dot products of exact entries
  with them, so each is within max G + log2 (terms) ulps of U = sum |w| scale (resp.
  sum |h| scale). Chunked against materialized: the sum of both; 16-bit: g rounds once to
  the dtype in both paths, 1 ulp of the scale, and the products accumulate in float32 and
  round once: 1 + log2 (terms) ulps of U.
"""

import functools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import numerics
from numerics import oracle
from numerics._check_divergence import gradient_scale, sensitivity
from numerics._check_tolerances import finite_gaps
from numerics._linear_divergence import student_topk_log_probs
from numerics.testing import assert_ulp_close
from tests.tiers import BF16_AND_F32
from tests.tolerances import BF16, DTYPES, F32, F64, ULPS

CHUNK_ULPS = 1.5  # one exp and one product per chunk statistic (`linear_cross_entropy`'s)
FORMS = {
    "kl": (numerics.linear_kl_divergence, numerics.kl_divergence),
    "js": (numerics.linear_js_divergence, numerics.js_divergence),
}
V = 40
CHUNKS = ("8", "7", "64")  # divides V, does not (a partial last chunk), one chunk (capped at V)
N, D_S, D_T = 6, 16, 8
T = 2.0  # a power of two: dividing the exact logits by it is exact in every dtype


def _dyadic(rng, shape, dtype):
    """Entries k / 64 with |k| < 64 (16-bit: k / 4, |k| <= 3): every logit, a sum of at
    most 16 products (at most 19 significant bits; 16-bit: multiples of 1/16 below 9), is
    exact in the dtype, in any order and accumulation dtype; logits of order 1."""
    if np.dtype(dtype).itemsize == 2:
        return (rng.integers(-3, 4, shape) / 4).astype(dtype)
    return (rng.integers(-63, 64, shape) / 64).astype(dtype)


@functools.cache
def _heads(dtype, seed=0):
    rng = np.random.default_rng([seed, np.dtype(dtype).itemsize])
    return (
        _dyadic(rng, (N, D_S), dtype),
        _dyadic(rng, (D_S, V), dtype),
        _dyadic(rng, (N, D_T), dtype),
        _dyadic(rng, (D_T, V), dtype),
    )


def _acc(dtype):
    return jnp.float64 if np.dtype(dtype) == F64 else jnp.float32


@functools.cache
def _program(dtype, chunks=CHUNKS):
    """One jitted program per dtype: per form, (value, d h_S, d W_S) chunked at each of
    `chunks` and materialized (the divergence on hidden @ weight rounded to the dtype)."""
    acc = _acc(dtype)

    def run(h_s, w_s, h_t, w_t):
        z_t = jnp.dot(h_t, w_t, preferred_element_type=acc).astype(h_t.dtype)
        out = {}
        for form, (fused, materialized) in FORMS.items():

            def mat(h, w, f=materialized):
                z = jnp.dot(h, w, preferred_element_type=acc).astype(h.dtype)
                return f(z, z_t, temperature=T)

            paths = {"materialized": mat}
            for c in chunks:
                paths[c] = lambda h, w, c=c, f=fused: f(
                    h, w, h_t, w_t, temperature=T, chunk_size=int(c)
                )
            for name, f in paths.items():
                value, vjp = jax.vjp(f, h_s, w_s)
                out[form, name] = (value, *vjp(jnp.ones_like(value)))
        return out

    return jax.jit(run)


@functools.cache
def _run(dtype, chunks=CHUNKS):
    with jax.enable_x64(np.dtype(dtype) == F64):
        return jax.device_get(_program(dtype, chunks)(*map(jnp.asarray, _heads(dtype))))


def _model(dtype, form):
    """Per row: the materialized bound B and the chunked extra (ulps of the value), and
    per entry of the logits' gradient the materialized and chunked bounds (ulps of its
    scale) with the scale itself, from the exact logits (error model, module docstring)."""
    h_s, w_s, h_t, w_t = (x.astype(np.float64) for x in _heads(dtype))
    student, teacher = (h_s @ w_s) / T, (h_t @ w_t) / T  # exact
    # The oracle divides the raw logits by T itself: its gradient is d / d(h W).
    exact, exact_g = oracle.divergence_value_and_grad(
        h_s @ w_s, h_t @ w_t, form, temperature=T, exact=True
    )
    c, kappa = sensitivity(student, teacher, form, exact)
    gaps = np.maximum(finite_gaps(student), finite_gaps(teacher))
    value_bound = ULPS["value"][dtype] + gaps.max(-1) + 2 * np.log2(V) + kappa
    p, q = (np.exp(z - z.max(-1, keepdims=True)) for z in (teacher, student))
    ratio = q.sum(-1, keepdims=True) / p.sum(-1, keepdims=True)
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    absolute = np.sum(np.abs(q * ratio - p), -1)
    moves = np.abs(q - p) if form == "kl" else np.abs((p + q) / 2 - p) + np.abs((p + q) / 2 - q)
    value = np.asarray(exact, np.float64)
    chunk_extra = CHUNK_ULPS * (1 + absolute * moves.sum(-1) / value)
    grad_bound = ULPS["grad"][dtype] + gaps + 2 * np.log2(V) + c
    grad_extra = CHUNK_ULPS * (1 + absolute)[:, None]
    scale = gradient_scale(student, teacher, form, exact) / T
    return exact, exact_g, value_bound, chunk_extra, grad_bound, grad_extra, scale


def _dot_ulps(got, want, unit, dtype):
    """|got - want| (want float64 or mpmath's exact values) in ulps of `unit`, one
    smallest normal per term forgiven (XLA flushes subnormal gradients to zero)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want)
    if want.dtype == object:
        with mpmath.workprec(oracle.PRECISION_BITS):
            err = np.vectorize(lambda a, b: float(abs(mpmath.mpf(a) - b)), otypes=[float])(
                got, want
            )
    else:
        err = np.abs(got - want.astype(np.float64))
    return err / oracle.ulp(np.maximum(unit, 1e-300), dtype)


def _note(worst, key, ulps, bound):
    """Keep, per key, the (ulps, bound) pair that uses most of its bound."""
    ratio = np.asarray(ulps) / np.broadcast_to(bound, np.shape(ulps))
    i = np.unravel_index(np.argmax(ratio), ratio.shape)
    pair = (
        round(float(np.asarray(ulps)[i]), 2),
        round(float(np.broadcast_to(bound, ratio.shape)[i]), 1),
    )
    if key not in worst or pair[0] / pair[1] > worst[key][0] / worst[key][1]:
        worst[key] = pair


def _chunk_cases():
    """Chunk 7 (a partial last chunk) in bf16 and float32 in the fast tier, float16's and
    float64's in the slow one (@BF16_AND_F32: their paths are bfloat16's and float32's); the
    chunks 8 (divides V) and 64 (one chunk, capped at V) in the slow tier (-m slow), bf16's
    with chunk 7 again ("all"). Their fast siblings: chunk 7 here (the scan over the full
    chunks, as at 8 and 64, and the static step for the rest) and
    test_exact_zero_at_the_teacher_once_per_form (kl at chunk_size = V: one full
    chunk and no rest, the path of 64 capped at V and of 8, which divides V)."""
    for d in DTYPES:
        if d == BF16:
            # slow: every chunk in bf16; fast sibling: bfloat16-7 below and the exact zero's
            # one-chunk calls (docstring)
            yield pytest.param(d, CHUNKS, id=f"{np.dtype(d).name}-all", marks=pytest.mark.slow)
            yield pytest.param(d, ("7",), id=f"{np.dtype(d).name}-7")
        else:
            yield pytest.param(d, ("7",), id=f"{np.dtype(d).name}-7")
            yield pytest.param(
                d, ("8", "64"), id=f"{np.dtype(d).name}-8-64", marks=pytest.mark.slow
            )


@BF16_AND_F32
@pytest.mark.parametrize(("dtype", "chunks"), list(_chunk_cases()))
def test_chunked_matches_materialized(dtype, chunks):
    dtype = np.dtype(dtype)
    got = _run(dtype, chunks)
    h_s, w_s, _, _ = (x.astype(np.float64) for x in _heads(dtype))
    sixteen = dtype.itemsize == 2
    worst = {}
    for form in FORMS:
        _, _, value_bound, chunk_extra, grad_bound, grad_extra, scale = _model(dtype, form)
        value_m, dh_m, dw_m = got[form, "materialized"]
        units = {
            "d hidden": (np.abs(w_s) @ scale.T).T,  # sum_j |w_dj| scale_nj
            "d weight": np.abs(h_s).T @ scale,  # sum_n |h_nd| scale_nj
        }
        for c in chunks:
            value, dh, dw = got[form, c]
            assert value.dtype == dh.dtype == dw.dtype == dtype
            bound = 1.0 if sixteen else 2 * value_bound + chunk_extra
            assert_ulp_close(value, value_m.astype(np.float64), bound, dtype, err_msg=f"{form} {c}")
            err = oracle.ulp_error(value, value_m.astype(np.float64), dtype)
            _note(worst, (form, "value"), err, bound)
            g_bound = 1.0 if sixteen else (2 * grad_bound + grad_extra).max()
            for what, a, b, k in (("d hidden", dh, dh_m, V), ("d weight", dw, dw_m, N)):
                ulps = _dot_ulps(a, b, units[what], dtype)
                limit = g_bound + np.log2(k)
                assert ulps.max() <= limit, (form, c, what, float(ulps.max()), float(limit))
                _note(worst, (form, what), ulps, limit)
    print(dtype, worst)  # the worst (ulps, bound) per form and quantity, shown with -s


# slow: float64; fast sibling: test_against_mpmath[float32] (the same native path and bounds)
@pytest.mark.parametrize("dtype", [F32, pytest.param(F64, marks=pytest.mark.slow)], ids=str)
def test_against_mpmath(dtype):
    """Chunked (chunk 7: five full chunks and a partial one) against the oracle's exact
    values on the same exact logits: B + the chunk extra for the value, and G + extra +
    log2 (terms) ulps of U for d hidden and d weight against mpmath's exact products."""
    dtype = np.dtype(dtype)
    got = _run(dtype, ("7",))  # test_chunked_matches_materialized's fast program
    h_s, w_s, _, _ = (x.astype(np.float64) for x in _heads(dtype))
    for form in FORMS:
        exact, exact_g, value_bound, chunk_extra, grad_bound, grad_extra, scale = _model(
            dtype, form
        )
        value, dh, dw = got[form, "7"]
        assert_ulp_close(value, exact, value_bound + chunk_extra, err_msg=f"{form} value")
        with mpmath.workprec(oracle.PRECISION_BITS):
            exact_dh = np.dot(exact_g, w_s.astype(object).T)
            exact_dw = np.dot(h_s.astype(object).T, exact_g)
        limit = (grad_bound + grad_extra).max()
        for what, a, b, unit, k in (
            ("d hidden", dh, exact_dh, (np.abs(w_s) @ scale.T).T, V),
            ("d weight", dw, exact_dw, np.abs(h_s).T @ scale, N),
        ):
            ulps = _dot_ulps(a, b, unit, dtype)
            assert ulps.max() <= limit + np.log2(k), (form, what, float(ulps.max()))


ZERO_VARIANTS = ("T=3 sum", "T=1 none", "T=3 where mean")
ALL_ZERO_PATHS = tuple((form, variant) for form in FORMS for variant in ZERO_VARIANTS)
# The fast tier's: each form once (`test_exact_zero_at_the_teacher_once_per_form`), the mask,
# "mean", T = 3 and T = 1 in one chunk among them, and the top-k form ("sum"); every pair in
# every dtype is the slow tier's.
ONCE_ZERO_PATHS = (("kl", "T=1 none"), ("js", "T=3 where mean"))


@functools.cache
def _zero_program(paths=ALL_ZERO_PATHS):
    """Value and gradients at student == teacher: per (form, variant) of `paths`, at T = 3
    (not a power of two) over chunks of 7 (a partial last one), at T = 1 in one chunk per
    row reduced "none", and masked with "mean"; and the top-k form on `flat`, a head whose
    logits are all equal (`rows` @ `flat`), with the student's own log-probabilities as
    stored ones."""

    def run(h, w, where, rows, flat):
        out = {}
        for form, variant in paths:
            fused = FORMS[form][0]
            f3 = functools.partial(fused, temperature=3.0, chunk_size=7)
            f1 = functools.partial(fused, chunk_size=V)
            if variant == "T=3 sum":
                out[form, variant] = jax.value_and_grad(
                    lambda h, w, f=f3: f(h, w, h, w, reduction="sum"), (0, 1)
                )(h, w)
            elif variant == "T=1 none":
                out[form, variant] = jax.vjp(lambda h, w, f=f1: f(h, w, h, w), h, w)[1](
                    jnp.ones(h.shape[:-1], h.dtype)
                )
            else:
                out[form, variant] = jax.value_and_grad(
                    lambda h, w, f=f3: f(h, w, h, w, where=where, reduction="mean"), (0, 1)
                )(h, w)
        idx = jnp.broadcast_to(jnp.arange(0, V, 9, dtype=jnp.int32), (rows.shape[0], 5))
        own = student_topk_log_probs(rows, flat, idx, jnp.asarray(3.0, _acc(h.dtype)), 7)[0]
        out["topk", "T=3 sum"] = jax.value_and_grad(
            lambda h, w: numerics.linear_topk_kl_divergence(
                h, w, own, idx, temperature=3.0, chunk_size=7, reduction="sum"
            ),
            (0, 1),
        )(rows, flat)
        return out

    return jax.jit(run)


# The slow tier's, every dtype (one compile of the seven-path program per dtype: 4 s each);
# fast siblings: test_exact_zero_at_the_teacher_once_per_form (bf16: each form, the mask,
# T = 1 and 3, and the top-k form with "sum", the same assertions), test_where_and_reductions
# ("sum" and "mean" of the kl form) and test_chunked_matches_materialized in each dtype.
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_exact_zero_at_the_teacher(dtype):
    _check_exact_zero(dtype, ALL_ZERO_PATHS)


def test_exact_zero_at_the_teacher_once_per_form():
    _check_exact_zero(BF16, ONCE_ZERO_PATHS)


def _check_exact_zero(dtype, paths):
    # General (not dyadic) entries: the logits round; student == teacher still gives
    # exactly 0, value and gradients, at T = 1 and T = 3, with a mask. The top-k form is
    # exactly 0 where the stored log-probabilities are bit for bit the student's own, which
    # two compiled programs reproduce only where the sums are exact in any order (two
    # reductions of the same rounded terms may be fused and ordered differently): here a
    # head with V equal columns, so S = V and log q = -log V whatever the order.
    rng = np.random.default_rng(5)
    h = rng.standard_normal((2, 3, D_S)).astype(dtype)
    w = (rng.standard_normal((D_S, V)) * 2).astype(dtype)
    # Dyadic rows and V equal dyadic columns: the logits are exact, so equal in any order.
    rows, flat = _dyadic(rng, (N, D_S), dtype), np.repeat(_dyadic(rng, (D_S, 1), dtype), V, 1)
    where = np.array([[True, False, True], [True, True, True]])
    with jax.enable_x64(np.dtype(dtype) == F64):
        args = map(jnp.asarray, (h, w, where, rows, flat))
        got = jax.device_get(_zero_program(paths)(*args))
    assert len(got) == len(paths) + 1
    for key, out in got.items():
        for leaf in jax.tree.leaves(out):
            assert leaf.dtype == dtype and not np.any(leaf.astype(np.float64)), key


@functools.cache
def _mask_program():
    def run(h_s, w_s, h_t, w_t, where):
        f = functools.partial(numerics.linear_kl_divergence, chunk_size=7, temperature=T)

        def grads(reduction, mask):
            return jax.value_and_grad(
                lambda h, w: f(h, w, h_t, w_t, where=mask, reduction=reduction), (0, 1)
            )(h_s, w_s)

        return {
            "none": f(h_s, w_s, h_t, w_t),
            "masked": f(h_s, w_s, h_t, w_t, where=where),
            "sum": grads("sum", where),
            "mean": grads("mean", where),
            "empty": grads("mean", jnp.zeros_like(where)),
            "js": numerics.linear_js_divergence(
                h_s, w_s, h_t, w_t, where=where, reduction="sum", chunk_size=7
            ),
            "js none": numerics.linear_js_divergence(h_s, w_s, h_t, w_t, chunk_size=7),
        }

    return jax.jit(run)


def test_where_and_reductions():
    h_s, w_s, h_t, w_t = _heads(F32)
    # A (2, 3) batch: the rows of hidden reshaped, where masking three of them.
    h_s, h_t = h_s.reshape(2, 3, D_S), h_t.reshape(2, 3, D_T)
    where = np.array([[True, False, True], [False, True, False]])
    got = jax.device_get(_mask_program()(h_s, w_s, h_t, w_t, where))
    per = got["none"]
    assert per.shape == (2, 3)
    np.testing.assert_array_equal(got["masked"], np.where(where, per, 0))
    (total, (dh, dw)), (mean, (dh_m, _)) = got["sum"], got["mean"]
    np.testing.assert_allclose(total, per[where].sum(), rtol=1e-6)
    np.testing.assert_allclose(mean, per[where].mean(), rtol=1e-6)
    # d hidden sums terms that cancel: compared in units of its largest entry (float32).
    np.testing.assert_allclose(dh_m, dh / where.sum(), atol=1e-6 * np.abs(dh).max() / 3)
    assert not np.any(dh[~where]) and np.any(dh[where]) and dw.shape == (D_S, V)
    empty, (dh_e, dw_e) = got["empty"]
    assert empty == 0 and not np.any(dh_e) and not np.any(dw_e)
    np.testing.assert_allclose(got["js"], got["js none"][where].sum(), rtol=1e-6)


def test_teacher_gets_no_gradient():
    h_s, w_s, h_t, w_t = _heads(F32)
    grads = jax.jit(
        jax.grad(
            lambda *a: numerics.linear_kl_divergence(*a, chunk_size=7, reduction="sum"),
            (2, 3),
        )
    )(h_s, w_s, h_t, w_t)
    assert not any(np.any(g) for g in grads)


# slow; fast siblings: test_exact_zero_at_the_teacher_once_per_form (student and
# teacher of one hidden size: every call through `_both_logits`' stacked product, both forms,
# its values and gradients exact) and test_forward_mode_raises below (the jvp part)
@pytest.mark.slow
def test_equal_hidden_sizes_take_the_stacked_product():
    # D_S == D_T goes through one batched product (`_both_logits`): the teacher padded with
    # zero columns of hidden and zero rows of weight has the same exact logits, so both
    # routes agree with each other (to float32 rounding of the values and gradients).
    h_s, w_s, h_t, w_t = _heads(F32)
    h_pad = np.concatenate([h_t, np.zeros((N, D_S - D_T), F32)], 1)
    w_pad = np.concatenate([w_t, np.zeros((D_S - D_T, V), F32)], 0)

    @jax.jit
    def both(h_s, w_s):
        return [
            jax.value_and_grad(
                lambda h, w, t=t: numerics.linear_js_divergence(
                    h, w, *t, chunk_size=7, reduction="sum"
                ),
                (0, 1),
            )(h_s, w_s)
            for t in ((h_t, w_t), (h_pad, w_pad))
        ]

    (value, grads), (value_pad, grads_pad) = jax.device_get(both(h_s, w_s))
    np.testing.assert_allclose(value_pad, value, rtol=1e-6)
    for a, b in zip(grads_pad, grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(b).max())
    # Reverse mode only (custom_vjp), as `linear_cross_entropy`.
    # (Under jit: the error is raised while tracing, before the ~25 small programs that the
    # eager products before it compiled.)
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jit(
            lambda h: jax.jvp(lambda h: numerics.linear_kl_divergence(h, w_s, h_t, w_t), (h,), (h,))
        )(h_s)


def test_forward_mode_raises():
    # Reverse mode only (custom_vjp), as `linear_cross_entropy` (the test above's last part:
    # raised while tracing, nothing compiled).
    h_s, w_s, h_t, w_t = _heads(F32)
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jit(
            lambda h: jax.jvp(lambda h: numerics.linear_kl_divergence(h, w_s, h_t, w_t), (h,), (h,))
        )(h_s)


def test_bad_input_raises_one_clear_error():
    h, w = jnp.ones((2, 3)), jnp.ones((3, 5))
    ht, wt = jnp.ones((2, 4)), jnp.ones((4, 5))
    f = numerics.linear_kl_divergence
    lp, idx = jnp.full((2, 2), -2.0), jnp.array([[0, 1], [2, 3]])
    g = numerics.linear_topk_kl_divergence
    cases = [
        (lambda: f(h, jnp.ones((4, 5)), ht, wt), ValueError, "disagree on D"),
        (lambda: f(h, w, ht, jnp.ones((4, 6))), ValueError, "share the vocabulary"),
        (lambda: f(h, w, jnp.ones((3, 4)), wt), ValueError, "batch shape"),
        (lambda: f(h, w, ht.astype(BF16), wt.astype(BF16)), TypeError, "same dtype"),
        (lambda: f(h, w.astype(BF16), ht, wt), TypeError, "same dtype"),
        (lambda: f(h.astype(jnp.int32), w, ht, wt), TypeError, "floating"),
        (lambda: f(h, w, ht, wt, chunk_size=0), ValueError, "chunk_size must be > 0"),
        (lambda: f(h, w, ht, wt, chunk_size=2.0), TypeError, "chunk_size must be an int"),
        (lambda: f(h, w, ht, wt, reduction="avg"), ValueError, "reduction must be"),
        (lambda: f(h, w, ht, wt, temperature=0.0), ValueError, "temperature must be > 0"),
        (lambda: f(h, w, ht, wt, where=jnp.ones(2)), ValueError, "where must be a boolean"),
        (lambda: f(h, jnp.ones((3,)), ht, wt), ValueError, r"\(D, V\)"),
        (lambda: f(h, jnp.ones((3, 0)), ht, jnp.ones((4, 0))), ValueError, "no column"),
        (lambda: g(h, w, lp, jnp.array([[0, 5], [1, 2]])), ValueError, r"\[0, 5\)"),
        (lambda: g(h, w, lp, jnp.array([[1, 1], [1, 2]])), ValueError, "distinct"),
        (lambda: g(h, w, lp[:, :1], idx), ValueError, r"\(\.\.\., k\)"),
        (lambda: g(h, w, jnp.full((2, 6), -2.0), jnp.zeros((2, 6), int)), ValueError, "k = 6"),
        (lambda: g(h, w, lp.astype(BF16), idx), TypeError, "compute dtype"),
        (lambda: g(h, w, lp, idx.astype(jnp.float32)), TypeError, "integer"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()


# --- The top-k form ----------------------------------------------------------------------

K = 5
T_TOPK = 1.5  # divides the student's logits only (not exact: the reference does the same)


@functools.cache
def _topk_case(dtype):
    """Student heads (exact logits) and a teacher's top-k log-probabilities in float32
    (the compute dtype) at distinct indices, from a different head: some rows' teacher
    puts its mass where the student does not."""
    rng = np.random.default_rng(7)
    h, w = _dyadic(rng, (N, D_S), dtype), _dyadic(rng, (D_S, V), dtype)
    teacher = rng.standard_normal((N, V)) * np.array([[1.0], [3.0], [0.3], [1.0], [2.0], [5.0]])
    log_p = teacher - np.log(np.exp(teacher).sum(-1, keepdims=True))
    idx = np.argsort(-log_p, -1)[:, :K]
    return h, w, np.take_along_axis(log_p, idx, -1).astype(np.float32), idx


def _topk_reference(h, w, lp, idx, temperature=T_TOPK):
    """The k + 1-bin KL and its gradient with respect to the logits, numpy float64."""
    t = np.float64(np.float32(temperature))
    z = (h.astype(np.float64) @ w.astype(np.float64)) / t
    log_q = z - z.max(-1, keepdims=True)
    log_q -= np.log(np.exp(log_q).sum(-1, keepdims=True))
    q = np.exp(log_q)
    lp = lp.astype(np.float64)
    p = np.exp(lp)
    q_top = np.take_along_axis(q, idx, -1)
    tail_mask = np.ones(q.shape, bool)
    np.put_along_axis(tail_mask, idx, False, -1)
    p_tail, q_tail = 1 - p.sum(-1), np.where(tail_mask, q, 0).sum(-1)
    value = np.sum(p * (lp - np.log(q_top)), -1) + p_tail * np.log(p_tail / q_tail)
    g = np.where(tail_mask, q * (1 - p_tail / q_tail)[:, None], 0.0)
    np.put_along_axis(g, idx, q_top - p, -1)
    # |x_b - w_b| and the ulps (of 1) each bin's log-ratio carries: log q_i from
    # (z_i - M) - log S, S a rescaled chunked sum; the tail's from the others'.
    c = np.abs(z - z.max(-1, keepdims=True)) + np.log(np.exp(log_q).sum(-1, keepdims=True))
    c_top = np.take_along_axis(c, idx, -1) + np.log2(z.shape[-1]) + CHUNK_ULPS + 2
    moves = np.abs(q_top - p)
    c_tail = (moves * c_top).sum(-1) / p_tail + 2
    kappa = ((moves * c_top).sum(-1) + np.abs(q_tail - p_tail) * c_tail) / value
    # A logit's gradient: q_i - p_i from s_i (c_top ulps of max(p_i, q_i)); on the tail
    # q_j (1 - e^-t), t carrying c_tail ulps of 1, which move it by c_tail P / Q ulps of q_j.
    grad_c = max(c_top.max(), (c_tail * p_tail / q_tail).max())
    scale = np.maximum(np.abs(g), q) / t
    return value, g / t, kappa, grad_c, scale


# fp32 and fp64 are the slow tier's (-m slow); the fast siblings are bf16 here (the 16-bit
# path), test_topk_edges and test_teacher_topk_feeds_the_top_k_kl (float32).
#
# bf16's chunks 8 and 64 are the slow tier's as well; their fast siblings are bf16 at chunk
# 7 (full chunks and a partial one), test_teacher_topk_feeds_the_top_k_kl (the top-k KL at
# chunk 8, which divides V: full chunks and no rest, the branch of 64 capped at V).
@pytest.mark.parametrize(
    ("dtype", "chunks"),
    [
        pytest.param(BF16, ("7",), id="bfloat16-7"),
        pytest.param(BF16, ("8", "64"), id="bfloat16-8-64", marks=pytest.mark.slow),
        pytest.param(F32, CHUNKS, id="float32-all", marks=pytest.mark.slow),
        pytest.param(F64, CHUNKS, id="float64-all", marks=pytest.mark.slow),
    ],
)
def test_topk_against_numpy(dtype, chunks):
    """The value against the k + 1-bin KL in numpy float64: fp32 and fp64 within
    `ULPS` value + log2 (k + 1) + kappa ulps, kappa = sum_b |x_b - w_b| c_b / value (the
    ulps of 1 each bin's log-ratio carries, weighted by how far the value moves with it,
    `_topk_reference`); bf16 computes in float32 and rounds once: 1 ulp. Gradients: each
    logit's within G = `ULPS` grad + c ulps of max(|g|, q) (c: `_topk_reference`'s
    grad_c), d hidden and d weight within G + log2 (terms) ulps of the dot of those scales
    with |w| (resp. |h|); bf16: 2 + log2 (terms)."""
    dtype = np.dtype(dtype)
    h, w, lp, idx = _topk_case(dtype)
    value_ref, g, kappa, grad_c, scale = _topk_reference(h, w, lp, idx)
    if dtype == F64:
        lp = lp.astype(np.float64)  # the compute dtype, as allowed
    with jax.enable_x64(dtype == F64):
        got = jax.device_get(jax.jit(functools.partial(_topk_only, chunks=chunks))(h, w, lp, idx))
    h64, w64 = h.astype(np.float64), w.astype(np.float64)
    sixteen = dtype.itemsize == 2
    worst = {}
    for c, (value, dh, dw) in got.items():
        assert value.dtype == dh.dtype == dtype
        bound = 1.0 if sixteen else ULPS["value"][dtype] + np.log2(K + 1) + kappa
        assert_ulp_close(value, value_ref, bound, dtype, err_msg=f"chunk {c}")
        _note(worst, "value", oracle.ulp_error(value, value_ref, dtype), bound)
        # 16-bit: g in float32 rounds once (1 ulp of its scale), the product once more.
        g_bound = 2.0 if sixteen else ULPS["grad"][dtype] + grad_c
        for what, a, b, unit, k in (
            ("d hidden", dh, g @ w64.T, scale @ np.abs(w64).T, V),
            ("d weight", dw, h64.T @ g, np.abs(h64).T @ scale, N),
        ):
            ulps = _dot_ulps(a, b, unit, dtype)
            assert ulps.max() <= g_bound + np.log2(k), (c, what, float(ulps.max()))
            _note(worst, what, ulps, g_bound + np.log2(k))
    print(dtype, "top-k", worst)


def _topk_only(h, w, lp, idx, chunks=CHUNKS):
    out = {}
    for c in chunks:
        f = functools.partial(
            numerics.linear_topk_kl_divergence, temperature=T_TOPK, chunk_size=int(c)
        )
        value, vjp = jax.vjp(lambda h, w, f=f: f(h, w, lp, idx), h, w)
        out[c] = (value, *vjp(jnp.ones_like(value)))
    return out


def _kl_bins(p, log_p, log_q):
    """sum_b p_b (log p_b - log q_b) in float64, over bins with p_b > 0."""
    return np.sum(np.where(p > 0, p * (log_p - log_q), 0.0), -1)


def test_topk_edges():
    """k = V (no tail bin: the full KL of the stored distribution), a student tail that
    underflows in float32 (kept finite in log space), and where / reductions."""
    f = jax.jit(numerics.linear_topk_kl_divergence, static_argnames=("reduction", "chunk_size"))
    rng = np.random.default_rng(9)
    # k = V = 6, indices in shuffled order.
    z = rng.standard_normal((3, 6)).astype(F32)
    log_p = (lambda t: t - np.log(np.exp(t).sum(-1, keepdims=True)))(rng.standard_normal((3, 6)))
    idx = np.stack([rng.permutation(6) for _ in range(3)])
    lp = np.take_along_axis(log_p, idx, -1).astype(F32)
    got = f(z, np.eye(6, dtype=F32), lp, idx, chunk_size=4)
    log_q = z - np.log(np.exp(z.astype(np.float64)).sum(-1, keepdims=True))
    want = _kl_bins(np.exp(lp.astype(np.float64)), lp, np.take_along_axis(log_q, idx, -1))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # The student's tail e^-200 underflows in float32; its log-mass does not:
    # KL = 2 (0.4 log(0.4 / 0.5)) + 0.2 (log 0.2 - log(2 e^-200 / (2 + 2 e^-200))).
    z = np.array([[0.0, 0.0, -200.0, -200.0]], F32)
    lp = np.log(np.array([[0.4, 0.4]])).astype(F32)
    got = f(z, np.eye(4, dtype=F32), lp, np.array([[0, 1]]), chunk_size=3)
    want = 0.8 * np.log(0.8) + 0.2 * (np.log(0.2) + 200)
    np.testing.assert_allclose(got, [want], rtol=1e-5)
    # where and reductions: masked rows give 0, "mean" over the kept ones.
    h, w, lp, idx = _topk_case(F32)
    where = np.array([True, False, True, True, False, True])
    g = functools.partial(numerics.linear_topk_kl_divergence, chunk_size=7)

    @jax.jit  # the four calls in one program
    def four(h, w, lp, idx, where):
        return (
            g(h, w, lp, idx),
            g(h, w, lp, idx, where=where),
            g(h, w, lp, idx, where=where, reduction="mean"),
            jax.grad(lambda h: g(h, w, lp, idx, where=where, reduction="sum"))(h),
        )

    per, masked, mean, dh = jax.device_get(four(h, w, lp, idx, where))
    # A kept row sees the same inputs and formulas in the masked call, but the compiler may
    # fuse the two calls differently and group their float32 sums in another order, so the
    # two need not agree bit for bit (at --xla_cpu_max_isa=SSE4_2 row 2 differs by 1 ulp).
    # Each is within test_topk_against_numpy's bound B of the float64 k + 1-bin KL (T = 1,
    # exact); the masked rows are exactly 0 (a select).
    ref, _, kappa, _, _ = _topk_reference(h, w, lp, idx, temperature=1.0)
    bound = ULPS["value"][F32] + np.log2(K + 1) + kappa
    assert_ulp_close(per, ref, bound, F32, err_msg="unmasked")
    assert_ulp_close(masked[where], ref[where], bound[where], F32, err_msg="masked, kept rows")
    assert not np.any(masked[~where])
    # "mean": its kept rows within B_i ulps of ref_i each, their float32 sum regrouped
    # (n - 1 roundings of at most u of the partial sums) and one division (u of the mean).
    u = np.finfo(F32).eps / 2
    n_kept = int(where.sum())
    slack = np.sum(bound[where] * oracle.ulp(ref[where], F32)) + n_kept * u * ref[where].sum()
    np.testing.assert_allclose(mean, ref[where].mean(), rtol=0, atol=slack / n_kept)
    assert not np.any(np.asarray(dh)[~where]) and np.all(np.any(np.asarray(dh)[where], -1))


def test_topk_rejects_logprobs_that_are_not_log_probabilities():
    """Concrete teacher top-k log-probabilities: an entry > 0 or NaN, and a row whose tail
    mass 1 - sum exp(logprob) is below 0 by more than rounding (log of the sum > sqrt(eps)),
    raise one ValueError each; rounding-sized excesses, masked rows and -inf entries pass,
    and NumPy arrays closed over by a traced function are checked too."""
    h, w = jnp.ones((2, 3), F32), jnp.ones((3, 5), F32)
    idx = np.array([[0, 1], [2, 3]])
    g = numerics.linear_topk_kl_divergence
    positive = np.array([[-1.0, 0.25], [-1.0, -2.0]], F32)
    with pytest.raises(ValueError, match=r"must be log-probabilities, <= 0 and not NaN; got 0\.25"):
        g(h, w, positive, idx)
    with pytest.raises(ValueError, match="not NaN; got nan"):
        g(h, w, np.array([[-1.0, np.nan], [-1.0, -2.0]], F32), idx)
    # Probabilities 0.7 + 0.6: a tail mass of -0.3 (logits passed as log-probabilities
    # usually look like this, or worse).
    heavy = np.log(np.array([[0.5, 0.25], [0.7, 0.6]])).astype(F32)
    with pytest.raises(ValueError, match=r"tail mass .* \[0, 1\]; row 1 .* has -0\.3"):
        g(h, w, heavy, idx)
    with pytest.raises(ValueError, match="tail mass"):  # bf16 hidden, bf16 log-probabilities
        g(h.astype(BF16), w.astype(BF16), jnp.asarray(heavy, BF16), idx)
    # Under jit, a NumPy array the function closes over is still concrete: checked.
    with pytest.raises(ValueError, match="tail mass"):
        jax.jit(lambda h: g(h, w, heavy, idx))(h)
    # Accepted: a sum above 1 by rounding (clamped to P_tail = 0), -inf entries (p = 0),
    # the whole mass in the top k, and a bad row that `where` masks out.
    fine = [
        np.array([[np.log(0.5), np.log(0.5) + 1e-6], [-np.inf, -1.0]], F32),
        np.log(np.array([[0.5, 0.5], [0.9, 0.1]])).astype(F32),
    ]
    # (One program for the three: the log-probabilities are closed over, concrete, so
    # they are checked as in an eager call; op by op the three compiled ~60 small ones.)
    *fine_out, got = jax.jit(
        lambda h: (
            [g(h, w, lp, idx) for lp in fine] + [g(h, w, heavy, idx, where=np.array([True, False]))]
        )
    )(h)
    for out in fine_out:
        assert np.all(np.isfinite(np.asarray(out)))
    assert np.isfinite(np.asarray(got)).all() and float(got[1]) == 0.0
    # Traced log-probabilities cannot be checked: no error, as before.
    jax.jit(lambda lp: g(h, w, lp, idx))(positive)


# --- a teacher's top k from its hidden states -----------------------------------------------
#
# Error model: with exact logits (`_dyadic`, T = 2) both paths form log p = (z - M) / T - log S
# from the same z and M; they differ only in S, the chunked one's sum of per-chunk rescaled
# sums against one sum over V: each within recursive summation's (V - 1) u of the exact S,
# the rescaling 1.5 ulps more (CHUNK_ULPS), so |d log S| <= (2 V + 1.5) u, and the final
# subtraction rounds once more in each: 2 u |log p|. 16-bit inputs: both in float32.


# float16 and float64 in the slow tier (@BF16_AND_F32); fast siblings: the bfloat16 and float32
# cases (the 16-bit path computed in float32, and the native one)
@BF16_AND_F32
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    # chunk 7 (a partial last chunk) in the fast tier; 8 and 64 in the slow one
    "chunk",
    [pytest.param(int(c), marks=() if c == "7" else pytest.mark.slow) for c in CHUNKS],
)
def test_teacher_topk_matches_the_materialized_log_softmax(dtype, chunk):
    rng = np.random.default_rng(11)
    h = _dyadic(rng, (2, 3, D_T), dtype)
    w = _dyadic(rng, (D_T, V), dtype)
    ctype = np.float64 if np.dtype(dtype) == np.float64 else np.float32

    @jax.jit  # both paths in one program (op by op: ~7 small ones per dtype)
    def both(h, w):
        z = jnp.dot(h, w, preferred_element_type=ctype)
        ref = jax.nn.log_softmax(z / T, axis=-1)
        ref_lp, ref_idx = jax.lax.top_k(ref, K)  # ties: the lower index first in both
        return numerics.linear_topk_log_probs(h, w, K, temperature=T, chunk_size=chunk), (
            ref_lp,
            ref_idx,
        )

    (lp, idx), (ref_lp, ref_idx) = both(h, w)
    assert lp.shape == idx.shape == (2, 3, K) and lp.dtype == ctype and idx.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(idx), np.asarray(ref_idx))
    u = np.finfo(ctype).eps / 2
    bound = (2 * V + 1.5) * u + 2 * u * np.abs(np.asarray(ref_lp))
    assert np.all(np.abs(np.asarray(lp) - np.asarray(ref_lp)) <= bound)


def test_teacher_topk_feeds_the_top_k_kl():
    """A teacher given as hidden states and a head: its top k from `linear_topk_log_probs`
    into `linear_topk_kl_divergence`, both heads chunked; a student that is the teacher is
    at the teacher's log-probabilities up to the two programs' rounding, so its KL is
    non-negative and of that rounding's order, and a different student's is larger."""
    rng = np.random.default_rng(12)
    h, w = _dyadic(rng, (N, D_T), F32), _dyadic(rng, (D_T, V), F32)
    # Each call one program (op by op, the test compiled ~70 small ones).
    top_k = jax.jit(numerics.linear_topk_log_probs, static_argnames=("k", "chunk_size"))
    kl = jax.jit(numerics.linear_topk_kl_divergence, static_argnames="chunk_size")
    lp, idx = top_k(h, w, K, chunk_size=7)
    same = kl(h, w, lp, idx, chunk_size=8)
    assert np.all(np.asarray(same) >= 0) and float(jnp.max(same)) < 1e-10
    other = kl(h, _dyadic(rng, (D_T, V), F32), lp, idx, chunk_size=8)
    assert float(jnp.min(other)) > 1e-4
    grads = jax.jit(jax.grad(lambda w_t: jnp.sum(numerics.linear_topk_log_probs(h, w_t, K)[0])))(w)
    assert not np.any(np.asarray(grads))  # the teacher is a constant


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"k": 0}, ValueError, "k must be"),
        ({"k": V + 1}, ValueError, "k must be"),
        ({"k": 2.0}, ValueError, "k must be"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"weight": np.ones((D_T + 1, V), np.float32)}, ValueError, "disagree on D"),
        ({"weight": np.ones((D_T, V), np.float64)}, TypeError, "must have the same dtype"),
    ],
)
def test_teacher_topk_bad_input_is_one_clear_error(kwargs, error, match):
    args = {"hidden": np.ones((2, D_T), np.float32), "weight": np.ones((D_T, V), np.float32)}
    args |= {"k": K, **kwargs}
    with pytest.raises(error, match=match):
        numerics.linear_topk_log_probs(**args)
