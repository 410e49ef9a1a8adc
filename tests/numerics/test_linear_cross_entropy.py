"""`linear_cross_entropy` (issue 31): chunked against materialized, options, precision, errors.

Bounds (fixed before looking at results):

- Chunked against the materialized fixed `cross_entropy` on the same logits. The logits
  are made exact in any accumulation order (small dyadic hidden and weight entries, or
  hidden = the logits and weight = the identity), so both losses see the same numbers.
  bf16 and fp16: both compute in float32 and round once, so they agree to 1 ulp of the
  dtype (two float32 values a few float32 ulps apart round to neighbouring values at
  most). fp32 and fp64: each is within its oracle bound of the exact value (`ULPS`, plus
  for the chunked sum one more exp and product per term from the rescaling by
  e^(m_c - M), `CHUNK_ULPS`), so they agree to the sum of both.
- Against mpmath, the chunked loss and d/d hidden are held to `ULPS` + `CHUNK_ULPS` on
  the margin sweep (`numerics.testing.check_linear_cross_entropy`, the audit's check),
  and d/d weight = hidden^T g, a sum of N products of exact hidden entries with the
  gradients, to the gradient bound plus log2 N roundings of that sum.
- Across chunk boundaries, d hidden and d weight of both paths against each other and
  each against mpmath, in ulps of the gradient entries' terms (issue 43's ruling; the
  error model is `_across_chunk_boundaries`' docstring).
"""

import functools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import numerics
from numerics import oracle, testing
from numerics.testing import assert_ulp_close
from tests.tolerances import BF16, DTYPES, F16, F32, F64, ULPS

CHUNK_ULPS = 1.5  # one exp (XLA's: within about 1 ulp) and one product per chunk sum
OPTIONS = [
    {},
    {"z_loss": 1e-4},
    {"soft_cap": 30.0},
    {"label_smoothing": 0.1},
    {"z_loss": 1e-2, "soft_cap": 5.0, "label_smoothing": 0.2},
]
OPTION_IDS = ["plain", "z_loss", "soft_cap", "smoothing", "all"]


def _dyadic(rng, shape, dtype):
    """Entries k / 8 with |k| < 64 (16-bit dtypes: k / 4 with |k| <= 3), so that every
    logit, a sum of 16 products, is exact in the dtype itself: hidden @ weight is the same
    in any order and accumulation dtype, and the materialized loss sees the same logits."""
    if np.dtype(dtype).itemsize == 2:
        return (rng.integers(-3, 4, shape) / 4).astype(dtype)
    return (rng.integers(-63, 64, shape) / 8).astype(dtype)


@functools.cache
def _case(dtype, n, d, v, seed):
    rng = np.random.default_rng([n, d, v, seed])
    hidden = _dyadic(rng, (n, d), dtype)
    weight = _dyadic(rng, (d, v), dtype)
    return hidden, weight


def _both(dtype, hidden, weight, labels, chunk, opts, reduction="none", aux=False):
    """((loss, d hidden, d weight) chunked, (loss, d hidden, d weight) materialized);
    `reduction` the chunked loss's ("sum": the fused path, its cotangent 1); `aux`: called
    with `return_aux=True`, its outputs unused (no cotangent)."""
    return _both_many(dtype, [(hidden, weight, labels, chunk)], opts, reduction, aux)[0]


def _both_many(dtype, cases, opts, reduction="none", aux=False):
    """`_both` on each (hidden, weight, labels, chunk) of `cases`, in one jitted program."""

    def one(h, w, labels, chunk):
        def chunked(h, w):
            out = numerics.linear_cross_entropy(
                h, w, labels, chunk_size=chunk, reduction=reduction, return_aux=aux, **opts
            )
            return out[0] if aux else out

        def materialized(h, w):
            logits = jnp.dot(h, w, preferred_element_type=jnp.float64 if dtype == F64 else F32)
            return numerics.cross_entropy(logits.astype(h.dtype), labels, **opts)

        out = []
        for f in (chunked, materialized):
            loss, vjp = jax.vjp(f, h, w)
            out.append((loss, *vjp(jnp.ones_like(loss))))
        return tuple(out)

    # Labels and chunks closed over (concrete, as in a call with a fixed batch).
    statics = [(jnp.asarray(c[2]), c[3]) for c in cases]
    args = [(jnp.asarray(c[0]), jnp.asarray(c[1])) for c in cases]
    return jax.jit(lambda args: [one(*a, *st) for a, st in zip(args, statics, strict=True)])(args)


def _dot_ulps(got, want, size, dtype, forgiven=0.0):
    """|got - want| of a dot product, less `forgiven`, in ulps of `size`, the sum of its
    terms' magnitudes: the gradients of one row sum to zero, so d hidden cancels and only
    this scale is meaningful (as `numerics.testing` measures option gradients in ulps of
    their terms). `want` may be mpmath's exact values (the oracle's `exact=True`), whose
    difference from `got` is then taken at the oracle's precision."""
    got, want = np.asarray(got, np.float64), np.asarray(want)
    if want.dtype == object:
        with mpmath.workprec(oracle.PRECISION_BITS):
            diff = np.vectorize(lambda a, b: float(abs(mpmath.mpf(a) - b)), otypes=[float])
            err = diff(got, want)
    else:
        err = np.abs(got - want.astype(np.float64))
    err = np.maximum(err - forgiven, 0.0)
    return err / oracle.ulp(np.maximum(size, 1e-300), dtype)


# (V, chunk): V not a multiple of the chunk (targets in the first, a middle and the last,
# partial, chunk, its last column included), one chunk, V = 1.
LAYOUTS = [(37, 8), (37, 64), (1, 4)]
# The fast tier's one layout (`test_chunked_matches_materialized_on_one_layout`,
# `test_fused_gradients_on_one_layout`): V not a multiple of the chunk (chunks 16, 16 and a
# partial 5; targets in the first, a middle and the last chunk, its last column included)
# and, on the fused path, blocks of 3 rows with 2 left over. Every case over every layout is
# the slow tier's.
ONE_LAYOUT = [(37, 16)]


def _dtypes(fast):
    """DTYPES, all but `fast` marked slow."""
    return [
        pytest.param(d, marks=() if d in fast else pytest.mark.slow, id=np.dtype(d).name)
        for d in DTYPES
    ]


def _matrix():
    # slow: every case, over every layout; fast siblings: test_chunked_matches_materialized_
    # on_one_layout[bfloat16-plain] and [float64-all] (the 16-bit and the native path; every
    # option in 16 bits: test_weight_and_hidden_gradients_against_mpmath[bfloat16])
    return [
        pytest.param(dtype, opts, marks=pytest.mark.slow, id=f"{np.dtype(dtype).name}-{name}")
        for dtype in DTYPES
        for opts, name in zip(OPTIONS, OPTION_IDS, strict=True)
    ]


def _layout_inputs(dtype, v, chunk, seed=0):
    """(hidden, weight, labels) of one layout (N = 8, D = 16)."""
    hidden, weight = _case(np.dtype(dtype), 8, 16, v, seed)
    labels = np.array([0, 1, chunk - 1, chunk, v // 2, v - 2, v - 1, 3]) % v
    return hidden, weight, labels


# Both paths' outputs of each layout case (`_across_chunk_boundaries`' key), kept so that the
# fused tests' comparisons with the recompute and materialized paths reuse the outputs the
# chunked tests computed of the same case: the same paths on the same inputs (from
# `_both_many`'s program there, `_both`'s where a fused test runs first or alone); each is
# held to its own bound against mpmath, so either serves.
_SHARED: dict = {}


@functools.cache
def _exact_parts(dtype, opts_items, v, chunk, seed):
    """`_across_chunk_boundaries`' oracle side of one layout case, computed once: (the cap's
    ulps and the terms' scale s of `testing.option_conditioning`, the exact gradient g on the
    logits, mpmath's exact d hidden and d weight)."""
    opts = dict(opts_items)
    hidden, weight, labels = _layout_inputs(dtype, v, chunk, seed)
    logits = hidden.astype(np.float64) @ weight.astype(np.float64)  # exact
    _, cap_ulps, s = testing.option_conditioning(logits, labels, **opts)
    g = oracle.cross_entropy_grad(logits, labels, **opts)
    _, exact_dh, exact_dw = oracle.linear_cross_entropy_value_and_grad(
        hidden, weight, labels, exact=True, **opts
    )
    return cap_ulps, s, g, exact_dh, exact_dw


def _across_chunk_boundaries(dtype, opts, v, chunk, seed=0, out=None, fused=False, aux=False):
    """Both paths on one layout (N = 8, D = 16): ((loss, d hidden, d weight) chunked, the
    materialized loss, [(what, ulps, limit)] for each gradient comparison), all NumPy.
    `fused`: also the fused path (reduction "sum", gradients in the forward pass, rows in
    blocks), held to the chunked path's bounds against mpmath, and to `between` against
    the chunked (recompute) path; the loss and gradients returned are then the fused.
    `aux`: the fused path called with `return_aux=True` (its statistics taken with the
    per-token outputs'), the same bounds.

    The error model (issue 43's ruling). An entry g_nj = dL/dz_nj is a sum of up to three
    terms, q_j (1 + 2 w lse) and -alpha / V off the target, -S_others / S, 2 w lse q_t and
    alpha (V - 1) / V at it, times sech^2(z / c) under a cap; each path computes it within
    G ulps of its largest term s_nj (`numerics.testing.option_conditioning`'s scale), not
    of |g_nj|, which is far smaller where the smoothing or z-loss terms cancel. G is 6 for
    the materialized path (`ULPS` grad 3 + `OPTION_ULPS` grad 3) and 7.5 for the chunked
    (+ `CHUNK_ULPS`). The two paths form g from different S, so their entries differ by
    up to 13.5 ulps of s (not nothing: g is not "the same rounded g in both"). The cap's
    rounding of z' and of sech^2 is the same operation on the same logits in both, so it
    cancels in their difference; against mpmath it stays, CAP_ULPS |z'| + 3 |z / c| + 2
    ulps of s per entry (option_conditioning's gradient conditioning). With h and w
    exact, d weight_dj = sum_n h_nd g_nj is then within sum_n |h_nd| G eps s_nj plus
    log2 N roundings of the dot, and d hidden_nd = sum_j g_nj w_dj within
    sum_j G eps s_nj |w_dj| plus log2 V. So each is measured in ulps of
    U = sum_n |h_nd| max(s_nj, |g_nj|) (d hidden: sum_j max(s_nj, |g_nj|) |w_dj|), g the
    exact gradient, and held to 13.5 + log2 k (k = N, resp. V) chunked against
    materialized, and to G + the cap terms (their mean over the dot, weighted as U) +
    log2 k each path against mpmath's exact d hidden and d weight, which fails where both
    paths share a bug. XLA flushes subnormal entries of g to 0 in the compute dtype:
    sum_n |h_nd| (resp. sum_j |w_dj|) times its smallest normal is forgiven.

    bf16 and fp16 compute g in float32 and round it once to the dtype in both paths:
    13.5 float32 ulps of s are far below an ulp of the dtype, so the two g round to the
    same or neighbouring values, 1 ulp of max(s, |g|) (not of |g|: where g cancels, two
    float32 values that far apart can round many ulps of |g| apart), and the products,
    exact in float32, accumulate there and round once: 1 + log2 k ulps of U between the
    paths, the bound as before. Against mpmath those two roundings (1 ulp) fit in the
    same G + cap + log2 k.
    """
    dtype = np.dtype(dtype)
    g_materialized = ULPS["grad"][dtype] + testing.OPTION_ULPS["grad"]
    g_chunked = g_materialized + CHUNK_ULPS
    between = 1 if dtype.itemsize == 2 else g_materialized + g_chunked
    n = 8
    hidden, weight, labels = _layout_inputs(dtype, v, chunk, seed)
    key = (dtype, tuple(sorted(opts.items())), v, chunk, seed)
    with jax.enable_x64(dtype == F64):
        if out is None:
            out = _SHARED.get(key)
        if out is None:
            out = _both(dtype, hidden, weight, jnp.asarray(labels), chunk, opts)
        out = _SHARED[key] = jax.tree.map(np.asarray, out)
        (loss, dh, dw), (loss_m, dh_m, dw_m) = out
        if fused:
            (loss, dh_f, dw_f), _ = jax.tree.map(
                np.asarray,
                _both(dtype, hidden, weight, jnp.asarray(labels), chunk, opts, "sum", aux),
            )
    h64, w64 = hidden.astype(np.float64), weight.astype(np.float64)
    cap_ulps, s, g, exact_dh, exact_dw = _exact_parts(*key)
    m = np.maximum(s, np.abs(g))
    h_abs, w_abs = np.abs(h64), np.abs(w64)
    tiny = float(np.finfo(np.float64 if dtype == F64 else np.float32).smallest_normal)
    products = {  # what: (chunked, materialized, exact, k, the dot product of |g| with h or w)
        "d hidden": (dh, dh_m, exact_dh, v, lambda a: a @ w_abs.T),
        "d weight": (dw, dw_m, exact_dw, n, lambda a: h_abs.T @ a),
    }
    checks = []
    for what, (got, got_m, exact, k, dot) in products.items():
        unit, forgiven = dot(m), tiny * dot(np.ones_like(m))
        cap = dot(cap_ulps * m) / np.maximum(unit, 1e-300)
        pairs = [
            ("chunked - materialized", got, got_m, between),
            ("chunked - mpmath", got, exact, g_chunked + cap),
            ("materialized - mpmath", got_m, exact, g_materialized + cap),
        ]
        if fused:
            got_f = dh_f if what == "d hidden" else dw_f
            pairs += [
                ("fused - chunked", got_f, got, between),
                ("fused - mpmath", got_f, exact, g_chunked + cap),
            ]
        for pair, a, b, limit in pairs:
            ulps = _dot_ulps(a, b, unit, dtype, forgiven)
            checks.append((f"{what} {pair}", ulps, limit + np.log2(max(k, 2))))
    if fused:
        dh, dw = dh_f, dw_f
    return (loss, dh, dw), loss_m, checks


def _assert_within(checks, where):
    """Every (what, ulps, limit) of `_across_chunk_boundaries`' checks within its limit."""
    for what, ulps, limit in checks:
        worst = np.unravel_index(np.argmax(ulps - limit), ulps.shape)
        assert np.all(ulps <= limit), (
            where,
            what,
            float(ulps[worst]),
            float(np.broadcast_to(limit, ulps.shape)[worst]),
        )


def _check_across_chunk_boundaries(dtype, opts, layouts):
    # The gradients' error model: `_across_chunk_boundaries`.
    dtype = np.dtype(dtype)
    value = 2 * ULPS["value"][dtype] + CHUNK_ULPS + 2 * testing.OPTION_ULPS["value"]
    with jax.enable_x64(dtype == F64):  # the layouts in one program
        outs = _both_many(dtype, [(*_layout_inputs(dtype, v, c), c) for v, c in layouts], opts)
    for (v, chunk), out in zip(layouts, outs, strict=True):
        (loss, dh, dw), loss_m, checks = _across_chunk_boundaries(dtype, opts, v, chunk, out=out)
        assert loss.dtype == dh.dtype == dw.dtype == dtype
        where = f"V={v} chunk={chunk}"
        bound = 1 if dtype.itemsize == 2 else value
        assert_ulp_close(loss, loss_m.astype(np.float64), bound, dtype, err_msg=where)
        _assert_within(checks, where)


@pytest.mark.parametrize(("dtype", "opts"), _matrix())
def test_chunked_matches_materialized_across_chunk_boundaries(dtype, opts):
    _check_across_chunk_boundaries(dtype, opts, LAYOUTS)


@pytest.mark.parametrize(
    ("dtype", "opts"),
    [
        pytest.param(BF16, OPTIONS[0], id="bfloat16-plain"),
        pytest.param(F64, OPTIONS[-1], id="float64-all"),
    ],
)
def test_chunked_matches_materialized_on_one_layout(dtype, opts):
    # The fast tier's share of the test above (-m slow): the 16-bit path (computed in
    # float32) and the native one with every option, on ONE_LAYOUT, the same bounds. (Their
    # programs are test_fused_gradients_on_one_layout's recompute and materialized ones.)
    _check_across_chunk_boundaries(dtype, opts, ONE_LAYOUT)


def _check_fused(dtype, opts, aux, layouts, monkeypatch):
    # reduction "sum" (and "mean") of float32 / float64 inputs, and of bfloat16 where its
    # dots run native: the gradients are computed in the forward pass, the rows in blocks of
    # R = N chunk / V (the least block size lowered to 1 so that these small layouts split:
    # V = 37, chunk 8: blocks of 1 row; chunk 16: blocks of 3, 2 rows left over), each
    # block's statistics a row at a time (`SLICE_BYTES` lowered). Held to the chunked path's
    # error model against mpmath and to `between` against the recompute path
    # (`_across_chunk_boundaries`); `aux`: with return_aux=True, its outputs unused.
    from numerics import _linear

    if not _linear.fused_dtype(dtype):
        assert dtype == BF16 and numerics.linear_operand_dtype(dtype) == F32
        pytest.skip("bfloat16 dots converted to float32 here: the recompute path")
    monkeypatch.setattr(_linear, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(_linear, "SLICE_BYTES", 1)
    dtype = np.dtype(dtype)
    value = 2 * ULPS["value"][dtype] + CHUNK_ULPS + 2 * testing.OPTION_ULPS["value"]
    for v, chunk in layouts:
        (total, dh, dw), loss_m, checks = _across_chunk_boundaries(
            dtype, opts, v, chunk, fused=True, aux=aux
        )
        assert total.dtype == dh.dtype == dw.dtype == dtype and total.shape == ()
        where = f"V={v} chunk={chunk}"
        # 8 losses summed (in the compute dtype, rounded once): log2 8 more roundings.
        bound = (1 if dtype.itemsize == 2 else value) + 3
        assert_ulp_close(total, np.asarray(loss_m, np.float64).sum(), bound, dtype, err_msg=where)
        _assert_within(checks, where)


# slow: every case, over every layout. Fast siblings: test_fused_gradients_on_one_layout
# (the fused path at a native width with every option, float64, and bfloat16's without; float32
# shares float64's path) and, for `aux` (the outputs computed, unused), tests/numerics/
# test_linear_aux.py's `test_every_output_against_mpmath_on_the_fused_path_up_to_k_100`
# (float32: return_aux on the fused path, its outputs from the blocks' statistics).
@pytest.mark.parametrize(
    ("dtype", "opts", "aux"),
    [  # float16 takes the recompute path (`numerics._linear.fused_dtype`)
        pytest.param(
            dtype,
            opts,
            aux,
            marks=pytest.mark.slow,
            id=f"{np.dtype(dtype).name}-{name}{'-aux' if aux else ''}",
        )
        for aux in (False, True)
        for dtype in (F32, F64, BF16)
        for opts, name in zip(OPTIONS, OPTION_IDS, strict=True)
    ],
)
def test_fused_gradients_have_the_chunked_error_model(dtype, opts, aux, monkeypatch):
    _check_fused(dtype, opts, aux, [*LAYOUTS, *ONE_LAYOUT], monkeypatch)


@pytest.mark.parametrize(
    ("dtype", "opts"),
    [
        pytest.param(F64, OPTIONS[-1], id="float64-all"),
        pytest.param(BF16, OPTIONS[0], id="bfloat16-plain"),
    ],
)
def test_fused_gradients_on_one_layout(dtype, opts, monkeypatch):
    # The fast tier's share of the test above (-m slow): its former fast cases, float64 with
    # every option and bfloat16 without, on ONE_LAYOUT (blocks of 3 rows, 2 left over), the
    # same bounds. (Its recompute and materialized outputs are those of
    # test_chunked_matches_materialized_on_one_layout's same case: reused, `_SHARED`.)
    _check_fused(dtype, opts, False, ONE_LAYOUT, monkeypatch)


@pytest.mark.parametrize("dtype", _dtypes({BF16}))
def test_weight_and_hidden_gradients_against_mpmath(dtype):
    opts = {"z_loss": 1e-2, "soft_cap": 5.0, "label_smoothing": 0.2}
    n, v = 6, 23
    hidden, weight = _case(np.dtype(dtype), n, 5, v, 1)
    labels = np.array([0, 7, 8, 15, 16, 22])
    with jax.enable_x64(dtype == F64):
        f = functools.partial(numerics.linear_cross_entropy, chunk_size=8, **opts)

        @jax.jit  # one program (the forward pass eager: ~60 small ones)
        def run(h, w):
            per_row, vjp = jax.vjp(lambda h, w: f(h, w, labels), h, w)
            return per_row, *vjp(jnp.ones_like(per_row))

        per_row, dh, dw = run(jnp.asarray(hidden), jnp.asarray(weight))
    exact_loss, exact_dh, exact_dw = oracle.linear_cross_entropy_value_and_grad(
        hidden, weight, labels, exact=True, **opts
    )
    # Under the cap c = 5 the capped logits carry CAP_ULPS |z'| <= 5 CAP_ULPS ulps and the
    # slope 3 |z / c| + 2 (`numerics.testing.OPTION_ULPS`' reasoning).
    logits = hidden.astype(np.float64) @ weight.astype(np.float64)
    cap = testing.CAP_ULPS * 5
    value = ULPS["value"][dtype] + CHUNK_ULPS + testing.OPTION_ULPS["value"] + cap
    assert_ulp_close(per_row, exact_loss, value, dtype, err_msg="per-row loss")
    # Each gradient entry g_ij within G ulps of its terms' scale (<= 1 + 2 w lse + alpha);
    # d hidden = g w^T and d weight = h^T g are dot products of exact entries with them,
    # held to G + log2(terms) ulps of sum |g| |w| (resp. |h| |g|), their conditioning.
    slope = 3 * np.abs(logits / 5).max() + 2
    grad = ULPS["grad"][dtype] + CHUNK_ULPS + testing.OPTION_ULPS["grad"] + cap + slope
    g_scale = 2.0  # |g_j| <= (1 + 2 w lse) q_j + alpha <= 2 here (lse < 10)
    for got, exact, size, k in (
        (dh, exact_dh, g_scale * np.abs(weight.astype(np.float64)).sum(1)[None, :], v),
        (dw, exact_dw, g_scale * np.abs(hidden.astype(np.float64)).sum(0)[:, None], n),
    ):
        err = np.abs(np.asarray(got, np.float64) - exact.astype(np.float64))
        ulps = err / oracle.ulp(np.broadcast_to(size, err.shape), dtype)
        assert ulps.max() <= grad + np.log2(k), (ulps.max(), grad + np.log2(k))


# slow: every dtype. Fast siblings: tests/grokbench/test_audit_cli.py::test_linear_cross_
# entropy_audits_as_linear_ce (this check of linear_cross_entropy, bf16, quick, through the CLI:
# exit 0 is assert_ok) and check_linear_cross_entropy's doctest (the same, fp32).
@pytest.mark.parametrize("dtype", _dtypes(set()))
def test_linear_check_passes_in_every_dtype(dtype):
    # The audit's check: margins around the cliff and to underflow through the identity
    # weight, random rows up to K = 100 (quick).
    testing.check_linear_cross_entropy(numerics.linear_cross_entropy, dtype, quick=True).assert_ok()


def test_precision_policy_accumulates_bf16_in_float32():
    # Column 0 sums 257 ones, column 1 256: a bf16 accumulator (8 significand bits) stops
    # at 256 in both, float32 accumulation keeps logits [257, 256], so the loss of label 1
    # is log1p(e) = 1.31 rather than log 2 = 0.69.
    hidden = jnp.ones((1, 257), BF16)
    weight = jnp.ones((257, 2), BF16).at[0, 1].set(0)
    run = jax.jit(
        lambda h, w: (
            numerics.linear_cross_entropy(h, w, jnp.array([1])),
            numerics.cross_entropy(jnp.dot(h, w, preferred_element_type=F32), jnp.array([1])),
        )
    )
    got, want = run(hidden, weight)
    assert got.dtype == BF16
    np.testing.assert_array_equal(np.asarray(got, F32), np.asarray(want.astype(BF16), F32))
    np.testing.assert_allclose(float(want[0]), np.log1p(np.e), rtol=1e-6)


def _dots(f, *args) -> list[str]:
    """The dot_general equations of f's jaxpr (each spans lines; its precision line
    follows its header)."""
    return str(jax.make_jaxpr(f)(*args)).split("dot_general[")[1:]


@pytest.mark.parametrize(
    ("reduction", "dtype", "count"),
    # "sum" of float32 (and of bfloat16 where its dots run native): the fused path, the
    # forward's logits, d hidden, d weight; "none" (summed by the caller, a per-row
    # cotangent) and float16: forward, backward's recomputation, d hidden, d weight.
    [("sum", F32, 3), ("none", F32, 4), ("sum", BF16, 3), ("sum", F16, 4)],
    ids=["fused", "recompute", "bf16", "f16-recompute"],
)
def test_matmul_precision_is_pinned_highest(reduction, dtype, count):
    from numerics import _linear

    if dtype == BF16 and not _linear.fused_dtype(dtype):
        count = 4  # bfloat16 dots converted to float32 here: the recompute path

    def loss(h, w):
        return jnp.sum(numerics.linear_cross_entropy(h, w, jnp.array([0, 1]), reduction=reduction))

    args = (jnp.ones((2, 3), dtype), jnp.ones((3, 5), dtype))
    dots = _dots(jax.value_and_grad(loss, (0, 1)), *args)
    assert len(dots) == count
    assert all("precision=(Precision.HIGHEST, Precision.HIGHEST)" in d[:200] for d in dots)


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_the_plain_forward_computes_no_gradient(reduction):
    # The fused path's gradients are computed in custom_vjp's forward rule, which runs only
    # under reverse-mode AD: the plain call (jit or not) holds one dot, the logits'.
    def loss(h, w):
        return numerics.linear_cross_entropy(h, w, jnp.array([0, 1]), reduction=reduction)

    args = (jnp.ones((2, 3)), jnp.ones((3, 5)))
    assert len(_dots(loss, *args)) == 1
    assert len(_dots(jax.jit(loss), *args)) == 1
    compiled = jax.jit(loss).lower(*args).as_text()
    assert compiled.count("dot_general") == 1


@pytest.mark.parametrize(
    "rows",
    [
        1,
        2,
        # slow: 3 and 8; fast siblings: 2 (a scan of whole slices and a shorter rest, as 3's
        # two slices of 3 and a rest of 1) and 7 (one slice of the whole block, `n < 2`, as 8's)
        pytest.param(3, marks=pytest.mark.slow),
        7,
        pytest.param(8, marks=pytest.mark.slow),
    ],
)
def test_row_slices_cover_every_row_and_chunk_once(rows, monkeypatch):
    # The fused path takes a block's statistics `rows` rows x C columns at a time
    # (`SLICE_BYTES` = rows C float32 entries), the last slice shorter where rows do not
    # divide R (R 7: slices of 1; 2 + a rest of 1; 3 + 1; one slice at 7 and 8): every statistic's
    # (chunks, R) array must be `_stacked`'s over the whole block. Integer-valued logits, so
    # every max, sum and pick is exact in any order.
    from numerics import _linear

    chunk = 4
    monkeypatch.setattr(_linear, "SLICE_BYTES", 4 * chunk * rows)
    rng = np.random.default_rng(rows)
    z = jnp.asarray(rng.integers(-50, 50, (7, 10)).astype(F32))  # 2 full chunks and 2 columns
    labels = jnp.asarray(rng.integers(0, 10, 7).astype(np.int32))

    def one(z_c, t, start, size):
        local = t - start
        picked = jnp.take_along_axis(z_c, jnp.clip(local, 0, size - 1)[:, None], -1)[:, 0]
        inside = (local >= 0) & (local < size)
        return jnp.max(z_c, -1), jnp.sum(z_c, -1), jnp.where(inside, picked, -jnp.inf)

    got = jax.jit(lambda z, t: _linear._row_sliced(one, z, t, chunk))(z, labels)
    want = _linear._stacked(
        lambda z_c, start, size: one(z_c, labels, start, size), z, chunk, jnp.int32
    )
    for g, w in zip(got, want, strict=True):
        assert g.shape == (3, 7)
        np.testing.assert_array_equal(g, w)


def test_a_scalar_of_per_row_losses_keeps_per_row_cotangents():
    # Only reduction "sum" / "mean" takes the fused path (one cotangent for the loss): a
    # scalar function of reduction "none"'s losses differentiates with a cotangent per row
    # (the recompute path), so per-row weights are never lost.
    n, v = 8, 37
    hidden, weight = _case(np.dtype(F32), n, 16, v, 3)
    labels = np.array([0, 1, 7, 8, 18, 35, 36, 3])
    c = np.array([1.0, -2.0, 0.0, 3.0, 0.5, -0.25, 1.0, 2.0], F32)

    def weighted(h, w):
        per_row = numerics.linear_cross_entropy(h, w, jnp.asarray(labels), chunk_size=8)
        return jnp.sum(jnp.asarray(c) * per_row)

    dh, dw = jax.jit(jax.grad(weighted, (0, 1)))(jnp.asarray(hidden), jnp.asarray(weight))
    h64, w64 = hidden.astype(np.float64), weight.astype(np.float64)
    g = c[:, None].astype(np.float64) * oracle.cross_entropy_grad(h64 @ w64, labels)
    for got, want, size in (
        (dh, g @ w64.T, np.abs(g) @ np.abs(w64).T),
        (dw, h64.T @ g, np.abs(h64).T @ np.abs(g)),
    ):
        err = np.abs(np.asarray(got, np.float64) - want)
        assert np.all(err <= 1e-5 * np.maximum(size, 1e-30)), float(np.max(err / size))


def test_batch_shapes_jit_vmap_and_reductions():
    rng = np.random.default_rng(3)
    hidden = jnp.asarray(rng.standard_normal((2, 3, 4)), F32)  # (B, T, D)
    weight = jnp.asarray(rng.standard_normal((4, 11)), F32)
    labels = jnp.asarray(rng.integers(0, 11, (2, 3)))
    where = jnp.array([[True, True, False], [True, False, False]])
    f = functools.partial(numerics.linear_cross_entropy, chunk_size=4)

    @jax.jit
    def everything(hidden, weight):
        def mean_with(**kw):
            return jax.value_and_grad(
                lambda h, w: f(h, w, kw.pop("t", labels), reduction="mean", **kw), (0, 1)
            )(hidden, weight)

        return {
            "per": f(hidden, weight, labels),
            "want": numerics.cross_entropy(jnp.einsum("btd,dv->btv", hidden, weight), labels),
            "vmapped": jax.vmap(lambda h, t: f(h, weight, t))(hidden, labels),
            "sum": f(hidden, weight, labels, where=where, reduction="sum"),
            "where": mean_with(where=where),
            # Ignored positions: loss 0, gradient 0 (their labels unchecked), as `where`.
            "ignored": mean_with(t=jnp.where(where, labels, -100), ignore_index=-100),
            "none": mean_with(where=jnp.zeros((2, 3), bool)),
        }

    out = everything(hidden, weight)
    per, want = out["per"], out["want"]
    assert per.shape == (2, 3)
    np.testing.assert_allclose(per, want, rtol=1e-6)
    np.testing.assert_allclose(out["vmapped"], per, rtol=1e-6)
    kept = np.asarray(where)
    np.testing.assert_allclose(out["where"][0], np.asarray(want)[kept].mean(), rtol=1e-6)
    np.testing.assert_allclose(out["sum"], np.asarray(want)[kept].sum(), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(out["ignored"]), jax.tree.leaves(out["where"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.all(np.asarray(out["where"][1][0])[~kept] == 0)
    # No kept position: mean 0 and gradient 0.
    loss, (dh, dw) = out["none"]
    assert float(loss) == 0 and not np.asarray(dh).any() and not np.asarray(dw).any()


def test_traced_out_of_range_labels_give_nan():
    hidden, weight = jnp.ones((2, 3)), jnp.ones((3, 4))
    labels = jnp.array([1, 4])
    loss = jax.jit(numerics.linear_cross_entropy)(hidden, weight, labels)
    assert np.isfinite(loss[0]) and np.isnan(loss[1])
    dh = jax.jit(jax.grad(lambda h, t: numerics.linear_cross_entropy(h, weight, t).sum()))(
        hidden, labels
    )
    assert np.all(np.isfinite(dh[0])) and np.all(np.isnan(dh[1]))


def test_concrete_labels_validate_under_jit_past_ignore_index():
    # Labels closed over a jitted function are concrete, but `labels != ignore_index` is
    # traced there: the host check skips ignored positions itself (it had raised on them),
    # still raises for a kept label out of range, and checks nothing under a traced `where`.
    hidden, weight = jnp.ones((3, 2)), jnp.ones((2, 4))
    labels = jnp.array([1, -100, 3])

    def loss(h, where=None):
        return numerics.linear_cross_entropy(h, weight, labels, ignore_index=-100, where=where)

    got = jax.jit(loss)(hidden)
    np.testing.assert_array_equal(got, loss(hidden))
    assert got[1] == 0 and np.all(np.isfinite(got))
    bad = jnp.array([1, 5, 3])
    with pytest.raises(ValueError, match="labels must lie in"):
        jax.jit(lambda h: numerics.linear_cross_entropy(h, weight, bad, ignore_index=-100))(hidden)
    where = jnp.array([True, False, True])
    np.testing.assert_array_equal(jax.jit(loss)(hidden, where), loss(hidden, where))


def test_forward_mode_raises():
    # Reverse mode only (custom_vjp); the docstring says why. (Under jit: raised while
    # tracing, before the ~30 small programs the eager products before it compiled.)
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jit(
            lambda x: jax.jvp(
                lambda h: numerics.linear_cross_entropy(h, jnp.ones((3, 4)), jnp.array([0, 1])),
                (x,),
                (x,),
            )
        )(jnp.ones((2, 3)))


def test_bad_input_raises_one_clear_error():
    h, w, t = jnp.ones((2, 3)), jnp.ones((3, 4)), jnp.array([0, 1])
    f = numerics.linear_cross_entropy
    cases = [
        (lambda: f(h, jnp.ones((4, 4)), t), ValueError, "disagree on D.*embedding.T"),
        (lambda: f(h, w, jnp.array([0, 4])), ValueError, r"\[0, 4\)"),
        (lambda: f(h, w, jnp.array([-1, 0])), ValueError, r"\[0, 4\)"),
        (lambda: f(h, w, t, chunk_size=0), ValueError, "chunk_size must be > 0"),
        (lambda: f(h, w, t, chunk_size=2.0), TypeError, "chunk_size must be an int"),
        (lambda: f(h, w, t, soft_cap=0.0), ValueError, "soft_cap must be"),
        (lambda: f(h, w, t, soft_cap=-1), ValueError, "soft_cap must be"),
        (lambda: f(h, w, t, label_smoothing=1.0), ValueError, r"label_smoothing must lie"),
        (lambda: f(h, w, t, label_smoothing=-0.1), ValueError, r"label_smoothing must lie"),
        (lambda: f(h, w, t, z_loss=-1e-4), ValueError, "z_loss must be"),
        (lambda: f(h.astype(jnp.int32), w, t), TypeError, "hidden must be a floating"),
        (lambda: f(h, w.astype(jnp.int32), t), TypeError, "weight must be a floating"),
        (lambda: f(h, w.astype(BF16), t), TypeError, "same dtype"),
        (lambda: f(h, w, t, reduction="avg"), ValueError, "reduction must be"),
        (lambda: f(h, w, jnp.array([0, 1, 2])), ValueError, "labels of shape"),
        (lambda: f(h, w, t, where=jnp.ones(2)), ValueError, "where must be a boolean"),
        (lambda: f(h, jnp.ones((3,)), t), ValueError, r"weight \(D, V\)"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
    # Padding and ignored positions' labels are not checked.
    assert f(h, w, jnp.array([0, 9]), where=jnp.array([True, False]))[1] == 0
    assert f(h, w, jnp.array([0, -100]), ignore_index=-100)[1] == 0


# slow; fast sibling: test_fused_gradients_on_one_layout[bfloat16-plain] (a bf16 loss reduced
# over the rows, "sum": its loss and gradients of bf16, the sum formed in float32 and rounded
# once, held to the chunked path's bounds) and test_batch_shapes_jit_vmap_and_reductions
# ("mean", float32)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [BF16, F16], ids=str)
def test_sixteen_bit_inputs_keep_their_dtype_and_use_float32_inside(dtype):
    hidden, weight = _case(np.dtype(dtype), 4, 8, 9, 2)
    labels = jnp.array([0, 3, 8, 4])

    def mean(h, w):
        return numerics.linear_cross_entropy(h, w, labels, chunk_size=4, reduction="mean")

    loss, (dh, dw) = jax.jit(jax.value_and_grad(mean, (0, 1)))(
        jnp.asarray(hidden), jnp.asarray(weight)
    )
    assert loss.dtype == dh.dtype == dw.dtype == dtype
    # The mean is reduced in float32 and rounded once.
    per_row = jax.jit(numerics.linear_cross_entropy)(
        jnp.asarray(hidden.astype(F32)), jnp.asarray(weight.astype(F32)), labels
    )
    assert_ulp_close(np.asarray(loss)[None], np.asarray(per_row.mean())[None], 1, dtype)


@pytest.mark.parametrize("dtype", [BF16, F32, pytest.param(F64, marks=pytest.mark.slow)], ids=str)
def test_bias_matches_the_materialized_head_with_a_bias(dtype):
    """hidden @ weight + bias, chunked, against the materialized loss on the same logits
    (dyadic entries: the logits are exact in the dtype), with the bounds of the test above;
    d bias = the column sums of g, to the gradient bound plus log2 N roundings of the sum."""
    dtype = np.dtype(dtype)
    value = 2 * ULPS["value"][dtype] + CHUNK_ULPS
    grad = 2 * ULPS["grad"][dtype] + CHUNK_ULPS
    v, chunk, n = 37, 8, 8
    hidden, weight = _case(dtype, n, 16, v, 1)
    bias = _dyadic(np.random.default_rng(2), (v,), dtype)
    labels_np = np.array([0, 1, chunk - 1, chunk, v // 2, v - 2, v - 1, 3])
    acc = jnp.float64 if dtype == F64 else F32

    def chunked(h, w, b):
        return numerics.linear_cross_entropy(h, w, labels, bias=b, chunk_size=chunk).sum()

    def materialized(h, w, b):
        logits = jnp.dot(h, w, preferred_element_type=acc) + b.astype(acc)[None, :]
        return numerics.cross_entropy(logits.astype(h.dtype), labels).sum()

    with jax.enable_x64(dtype == F64):
        labels = jnp.asarray(labels_np)
        args = (jnp.asarray(hidden), jnp.asarray(weight), jnp.asarray(bias))
        (loss, grads), (loss_m, grads_m) = (
            jax.jit(jax.value_and_grad(f, (0, 1, 2)))(*args) for f in (chunked, materialized)
        )
        g = jax.jit(  # one program (eager: ~80 small ones)
            lambda h, w, b: jax.grad(lambda z: numerics.cross_entropy(z, labels).sum())(
                (jnp.dot(h, w, preferred_element_type=acc) + b.astype(acc)[None, :]).astype(dtype)
            )
        )(*args)
    assert grads[2].dtype == dtype and grads[2].shape == (v,)
    # n losses summed: the sum's roundings on top of each loss's bound.
    bound = (1 if dtype.itemsize == 2 else value) + np.log2(n)
    assert_ulp_close(loss, np.asarray(loss_m, np.float64), bound, dtype)
    size = np.abs(np.asarray(g, np.float64)).sum(0)
    ulps = _dot_ulps(grads[2], grads_m[2], size, dtype)
    assert ulps.max() <= (1 if dtype.itemsize == 2 else grad) + np.log2(n), float(ulps.max())
    for got, want in zip(grads[:2], grads_m[:2], strict=True):  # the bias moves nothing else
        assert np.all(np.isfinite(np.asarray(got, np.float64)))
        assert got.shape == want.shape


def test_bias_errors():
    h, w = jnp.ones((2, 3)), jnp.ones((3, 5))
    t = jnp.array([0, 4])
    with pytest.raises(ValueError, match=r"bias must have shape \(V,\) = \(5,\)"):
        numerics.linear_cross_entropy(h, w, t, bias=jnp.ones(4))
    with pytest.raises(TypeError, match="bias"):
        numerics.linear_cross_entropy(h, w, t, bias=jnp.ones(5, jnp.bfloat16))
    with pytest.raises(TypeError, match="bias"):
        numerics.linear_cross_entropy(h, w, t, bias=jnp.ones(5, jnp.int32))


def _accumulate(products: np.ndarray, dtype) -> float:
    """A left-to-right sum of `products` rounded to `dtype` after every operation."""
    cast = np.dtype(dtype).type
    total = cast(0)
    for p in products:
        total = cast(total + cast(p))
    return float(total)


@pytest.mark.parametrize("dtype", [BF16, F16], ids=lambda d: np.dtype(d).name)
def test_the_native_dot_probe_tells_float32_accumulation_from_16_bit(dtype):
    """The probe's inputs fail a dot that rounds products or sums to 16 bits and pass one
    that accumulates exact products in float32, so the native path is taken only where the
    backend accumulates in float32; the answer is one per process (cached), and
    `linear_operand_dtype` reports it."""
    from numerics import _linear

    for a, b, exact in _linear._probe_inputs(dtype):
        products = (a[0].astype(np.float64) * b[:, 0].astype(np.float64)).astype(np.float64)
        assert _accumulate(products, np.float32) == np.float32(exact)
        assert _accumulate(products, dtype) != exact
    native = numerics.linear_operand_dtype(dtype)
    assert native in (np.dtype(dtype), np.dtype(np.float32))
    assert numerics.linear_operand_dtype(dtype) == native  # cached: the same answer
    assert numerics.linear_operand_dtype(F32) == F32
    assert numerics.linear_operand_dtype(np.float64) == np.float64


def test_the_conversion_fallback_keeps_the_precision_contract(monkeypatch):
    """Where the probe fails, 16-bit operands are converted to float32 first: the same
    float32 accumulation (the 257-ones case of the test above)."""
    from numerics import _linear

    monkeypatch.setattr(_linear, "_native_16bit", lambda backend, name: False)
    assert numerics.linear_operand_dtype(BF16) == F32
    hidden = jnp.ones((1, 257), BF16)
    weight = jnp.ones((257, 2), BF16).at[0, 1].set(0)
    got = jax.jit(lambda h, w: numerics.linear_cross_entropy(h, w, jnp.array([1])))(hidden, weight)
    np.testing.assert_allclose(float(got[0]), np.log1p(np.e), rtol=1e-2)  # bf16 output
