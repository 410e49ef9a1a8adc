"""The sink softmax, `numerics.softmax(x, sink=s)` and `log_softmax(x, sink=s)`, against mpmath.

A sink is one more logit in each row's denominator whose own entry is dropped, so every
bound here is the plain softmax's bound on the row of K + 1 logits [x, s]
(`numerics.oracle.sink_softmax` is `oracle.softmax` of that row without its last entry):
the fixed function performs the plain fixed softmax's operations on [x, s] (one shift, one
exp and the two sums per entry, log1p or Dekker's division once per row) with one more
rounding, the sink's term added to each row sum after it. The error model is then
`general_bound` (ULPS of the table plus the conditioning |gap| of each rounded shift plus
log2 of the number of terms summed) with the number of terms taken as 2 (K + 1): log2 of
it is the sum's log2(K + 1) roundings plus the one of the sink's addition.

Every function runs under `jax.jit`. The exhaustive sweep over every bf16 / fp16 value of
the margin to the sink is test_sink_exhaustive.py.
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import numerics
from numerics import oracle, standard
from numerics._check_tolerances import finite_gaps, weighted_gap
from numerics.testing import assert_ulp_close
from tests.tolerances import BF16, DTYPES, F32, F64, ULPS, general_bound

# (K, logit scale, planted margin of the row's top entry over the row's others), as
# test_random_oracle.py's softmax cases; K = 50,000 is left to that file.
CASES = [
    (1, 1.0, 0.0),
    (2, 1.0, 0.5),
    (3, 5.0, 30.0),
    (10, 0.1, 12.0),
    (10, 3.0, -4.0),
    (100, 2.0, 17.0),
    (100, 10.0, 40.0),
    (1000, 1.0, 6.0),
]

# The fast tier runs every dtype in test_random_rows_against_the_oracle (the oracle test);
# the other dtype sweeps keep bf16 there and run their other dtypes in the slow tier, those
# fast tests (bf16 here, and the oracle test in each dtype) their siblings.
BF16_FAST = [BF16] + [pytest.param(d, marks=pytest.mark.slow) for d in DTYPES if d != BF16]
FAST_CASES = [(1, 1.0, 0.0), (3, 5.0, 30.0), (10, 3.0, -4.0), (100, 10.0, 40.0)]

# Where each row's sink sits: "zero" is softmax off by one (s = 0); a number g puts the
# sink at (row max) + g: far above the row (the sink holds nearly all the mass), just
# above, tied with the row's max, below, and far below (past every dtype's cliff).
SINKS = ("zero", 30.0, 2.0, 0.0, -2.0, -45.0)


def _rows(dtype, k, scale, margin, seed=0):
    """One planted row per `SINKS` entry: (x (rows, K), sink (rows,)), both of `dtype`."""
    rng = np.random.default_rng([k, int(10 * scale), int(10 * margin) + 1000, seed])
    x = scale * rng.standard_normal((len(SINKS), k))
    top = rng.integers(k, size=len(SINKS))
    for r, t in enumerate(top):
        others = np.delete(x[r], t)
        if len(others):
            x[r, t] = others.max() + np.log(np.sum(np.exp(others - others.max()))) + margin
    sink = np.array([0.0 if g == "zero" else x[r].max() + g for r, g in enumerate(SINKS)])
    return x.astype(dtype), sink.astype(dtype)


@functools.cache
def _outputs(case, dtype):
    """(x, sink, cotangent, {name: (fn(x, sink=sink), d/dx, d/dsink) of sum(c * out)}) on
    the case's rows, both functions in one jitted program (one compile per case and dtype).
    The cotangent picks the row's own top entry (not the sink's): d out[i] / d(x, s)."""
    x, sink = _rows(dtype, *case)
    i = np.argmax(x.astype(np.float64), -1)
    cotangent = (np.arange(x.shape[-1]) == i[:, None]).astype(dtype)

    def run(x, sink, cotangent):
        outs = {}
        for name, (fn, _, _) in FUNCTIONS.items():
            out, vjp = jax.vjp(lambda x, s, fn=fn: fn(x, sink=s), x, sink)
            outs[name] = (out, *vjp(cotangent.astype(out.dtype)))
        return outs

    with jax.enable_x64(dtype == np.float64):
        args = (jnp.asarray(x), jnp.asarray(sink), jnp.asarray(cotangent))
        return x, sink, cotangent, jax.device_get(jax.jit(run)(*args))


def _conditioning(x, sink):
    """Per entry of the row [x, s] (rows, K + 1): the ulps its probability inherits from
    the rounding of its shift (`general_bound`'s |gap|), and for the row's normaliser the
    weighted mean gap of the others (`weighted_gap`); the max of [x, s] (which may be the
    sink) has no shift of its own, so it carries the normaliser's."""
    full = np.concatenate([x.astype(np.float64), sink.astype(np.float64)[:, None]], -1)
    gaps = finite_gaps(full)
    is_max = np.arange(full.shape[-1]) == np.argmax(full, -1)[:, None]
    mean_gap = np.broadcast_to(weighted_gap(gaps, is_max)[:, None], gaps.shape)
    return np.where(is_max, mean_gap, gaps), mean_gap, full.shape[-1]


FUNCTIONS = {
    "softmax": (numerics.softmax, oracle.sink_softmax, oracle.sink_softmax_vjp),
    "log_softmax": (numerics.log_softmax, oracle.sink_log_softmax, oracle.sink_log_softmax_vjp),
}


# Which of `FAST_CASES` each dtype runs in the fast tier: bfloat16 and float32 only, the two
# paths every fixed function has (tests/tiers.py), each case in one of them and each with a
# margin past its own cliff (30 > 5.5, bfloat16's; 40 > 16.6, float32's). float16 and
# float64 run every case in the slow tier.
FAST_PAIRS = {BF16: (0, 1), F32: (2, 3)}


def _random_cases():
    """Every (case, dtype). The fast tier: `FAST_PAIRS` of `FAST_CASES` (K = 1, 3, 10 and
    100, a margin below the others and ones past every dtype's cliff) and the dtypes; the
    rest, K = 1000 (5-11 s each, mostly the oracle) among them, is the slow tier's, those
    fast cases its siblings (the same code, the same bounds)."""
    fast = {(FAST_CASES[c], np.dtype(d)) for d, cs in FAST_PAIRS.items() for c in cs}
    return [
        pytest.param(
            case,
            dtype,
            marks=() if (case, np.dtype(dtype)) in fast else pytest.mark.slow,
            id=f"{'-'.join(map(str, case))}-{np.dtype(dtype).name}",
        )
        for case in CASES
        for dtype in DTYPES
    ]


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize(("case", "dtype"), _random_cases())
def test_random_rows_against_the_oracle(case, dtype, name):
    _, exact_fn, exact_vjp = FUNCTIONS[name]
    x, sink, cotangent, outs = _outputs(case, dtype)
    k = x.shape[-1]
    i = np.argmax(x.astype(np.float64), -1)
    out, grad_x, grad_s = outs[name]
    assert out.dtype == dtype and grad_x.dtype == dtype and grad_s.dtype == dtype
    entry, mean_gap, terms = _conditioning(x, sink)
    # p_k = e^shift_k / (1 + S_others) carries its own shift's rounding; every log p_k =
    # shift_k - log1p(S_others) is dominated by the normaliser's (test_random_oracle.py).
    conditioning = entry[:, :k] if name == "softmax" else mean_gap[:, :k]
    bound = general_bound("value", dtype, conditioning, 2 * terms)
    assert_ulp_close(out, exact_fn(x, sink, exact=True), bound, dtype, err_msg=name)
    want_x, want_s = exact_vjp(x, sink, cotangent, exact=True)
    # d/dx_j of out[i] is a product of p_j and p_i (softmax: -p_i p_j and p_i (1 - p_i),
    # the latter formed as p_i sum_{j != i} p_j); log_softmax: delta_ij - p_j, one
    # probability. Each factor carries its conditioning, added; the tangent rule's own
    # roundings are the table's autodiff_grad. The sink's gradient is the same with j = s:
    # -p_i P_s, or -P_s.
    row_cond = entry[np.arange(len(x)), i][:, None]
    extra = row_cond if name == "softmax" else 0.0
    grad_bound = general_bound("autodiff_grad", dtype, entry + extra, 2 * terms)
    assert_ulp_close(grad_x, want_x, grad_bound[:, :k], dtype, err_msg=f"d {name} / dx")
    assert_ulp_close(grad_s, want_s, grad_bound[:, k], dtype, err_msg=f"d {name} / dsink")
    # Shift invariance: adding c to every logit and to the sink changes nothing, so the
    # gradients over x and the sink sum to 0, up to the table's roundings of each term.
    g = np.concatenate(
        [np.asarray(grad_x, np.float64), np.asarray(grad_s, np.float64)[:, None]], -1
    )
    eps = float(ml_dtypes.finfo(dtype).eps)
    scale = np.abs(g).sum(-1)
    assert np.all(np.abs(g.sum(-1)) <= ULPS["autodiff_grad"][dtype] * eps * scale), g.sum(-1)


def _masked(dtype, rows=8, k=12, seed=3):
    """Random rows with about a quarter of the entries masked out (row 0 entirely)."""
    rng = np.random.default_rng(seed)
    x = (3.0 * rng.standard_normal((rows, k))).astype(dtype)
    where = rng.random((rows, k)) > 0.25
    where[0] = False
    return x, where


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_a_sink_of_minus_inf_is_the_plain_function_bit_for_bit(dtype, name, masked):
    fn = FUNCTIONS[name][0]
    x, where = _masked(dtype)
    where = where if masked else None
    with jax.enable_x64(dtype == np.float64):
        plain = jax.jit(lambda x: fn(x, where=where))(x)
        with_sink = jax.jit(lambda x: fn(x, where=where, sink=-jnp.inf))(x)
        many = jax.jit(lambda x, s: fn(x, where=where, sink=s))(x, np.full(len(x), -np.inf, dtype))
    # e^(-inf - M) = 0 is added to each of the row's two sums: exact, so every rounding
    # after it is the plain function's. (softmax: where every e^(x_k - M) is above
    # 2^(2p + 4) smallest normals, as in these rows; below, the sink path's division
    # scales, `_divide_scaled`, and the plain one is the less accurate.)
    np.testing.assert_array_equal(np.asarray(with_sink), np.asarray(plain))
    np.testing.assert_array_equal(np.asarray(many), np.asarray(plain))


@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_a_sink_of_minus_inf_is_log_softmax_bit_for_bit_on_wide_rows(dtype):
    """log_softmax has no division: bit for bit also where probabilities underflow."""
    x, _ = _masked(dtype)
    wide = (x.astype(np.float64) * 40).astype(dtype)  # gaps in the hundreds
    with jax.enable_x64(dtype == np.float64):
        plain = jax.jit(numerics.log_softmax)(wide)
        with_sink = jax.jit(lambda x: numerics.log_softmax(x, sink=-np.inf))(wide)
    np.testing.assert_array_equal(np.asarray(with_sink), np.asarray(plain))


def test_second_derivative_by_the_sink():
    """d^2 log p_i / ds^2 = -d P_sink / ds = -P_sink (1 - P_sink), through the custom JVPs."""
    x, sink = _rows(F64, 5, 1.0, 1.0, seed=19)
    second = jax.jit(
        jax.vmap(jax.jacfwd(jax.grad(lambda s, x: numerics.log_softmax(x, sink=s)[0])), (0, 0))
    )(sink, x)
    mass = oracle.sink_probability(x, sink, exact=True)
    want = -mass * (1 - mass)
    # Two tangent rules (each within autodiff_grad ulps of its exact derivative) composed:
    # their bounds add, plus the conditioning of P_sink's shift (as the first derivative).
    entry, _, terms = _conditioning(x, sink)
    bound = 2 * general_bound("autodiff_grad", F64, entry[:, -1], 2 * terms)
    assert_ulp_close(second, want, bound, F64, err_msg="d2 log p / ds2")


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_sink_zero_is_a_zero_logit_appended_then_dropped(dtype, name):
    fn = FUNCTIONS[name][0]
    x, _ = _rows(dtype, 10, 3.0, 5.0, seed=7)
    appended = np.concatenate([x, np.zeros((len(x), 1), dtype)], -1)
    with jax.enable_x64(dtype == np.float64):
        ours = jax.jit(lambda x: fn(x, sink=0.0))(x)
        reference = jax.jit(fn)(appended)[:, :-1]
    # Two computations of the same exact value, each within its bound of it: they differ
    # by at most the sum of the two bounds (the row [x, 0] is the same K + 1 logits).
    entry, mean_gap, terms = _conditioning(x, np.zeros(len(x), dtype))
    conditioning = entry[:, :-1] if name == "softmax" else mean_gap[:, :-1]
    bound = general_bound("value", dtype, conditioning, 2 * terms)
    assert_ulp_close(ours, np.asarray(reference, np.float64), 2 * bound, dtype, err_msg=name)
    # Python's 0 is the logit 0, not an integer array (one program each, not op by op).
    with jax.enable_x64(dtype == np.float64):
        np.testing.assert_array_equal(
            np.asarray(jax.jit(lambda x: fn(x, sink=0))(x)), np.asarray(ours)
        )


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_probabilities_and_the_sinks_mass_sum_to_one(dtype):
    x, sink = _rows(dtype, 100, 2.0, 3.0, seed=11)
    with jax.enable_x64(dtype == np.float64):
        p = np.asarray(jax.jit(lambda x, s: numerics.softmax(x, sink=s))(x, sink), np.float64)
    mass = oracle.sink_probability(x, sink)
    # Each p_k is within B ulps of its exact value, and an ulp of p_k is at most eps p_k, so
    # sum_k |error_k| <= B eps sum_k p_k <= B eps; summing in float64 adds nothing at this
    # scale. B is the largest per-entry bound of the value test.
    entry, _, terms = _conditioning(x, sink)
    bound = general_bound("value", dtype, entry[:, :-1], 2 * terms).max(-1)
    eps = float(ml_dtypes.finfo(dtype).eps)
    assert np.all(np.abs(p.sum(-1) + mass - 1) <= bound * eps)
    assert np.all(mass > 0)  # a non-trivial test: the sink takes mass in every row


# slow; fast siblings: test_random_rows_against_the_oracle (d/dx and d/dsink of both functions
# against mpmath's, bfloat16 and float32: the same VJPs) and test_the_sinks_gradient_is_minus_
# its_mass[bfloat16] (d/dsink through jacobians)
@pytest.mark.slow
def test_gradients_against_finite_differences_in_float64():
    x, sink = _rows(F64, 5, 1.0, 1.0, seed=5)
    c = np.random.default_rng(2).standard_normal(x.shape)
    h = 1e-5
    for name, (fn, _, _) in FUNCTIONS.items():

        def loss(x, s, fn=fn):
            return jnp.sum(c * fn(x, sink=s))

        loss = jax.jit(loss)  # one program for the function and its differences, not op by op

        gx, gs = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, sink)
        # Central differences: truncation h^2 / 6 |f'''| with |f'''| below 6 sum |c| for
        # softmax's and log-softmax's third derivatives (each a product of at most three
        # probabilities and a sum of c), and rounding 2 eps |f| / h; together below 1e-8.
        tol = h**2 * np.abs(c).sum() + 4e-16 * np.abs(c).sum() * 50 / h
        for r in range(len(x)):
            step = np.zeros_like(sink)
            step[r] = h
            fd = (loss(x, sink + step) - loss(x, sink - step)) / (2 * h)
            assert abs(float(gs[r]) - float(fd)) <= tol, (name, r, float(gs[r]), float(fd))
            for j in range(x.shape[-1]):
                dx = np.zeros_like(x)
                dx[r, j] = h
                fd = (loss(x + dx, sink) - loss(x - dx, sink)) / (2 * h)
                assert abs(float(gx[r, j]) - float(fd)) <= tol, (name, r, j)


@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_the_sinks_gradient_is_minus_its_mass(dtype):
    """d log p_i / ds = -P_sink for every i, and d p_i / ds = -p_i P_sink."""
    x, sink = _rows(dtype, 4, 2.0, 2.0, seed=13)
    with jax.enable_x64(dtype == np.float64):
        log_jac = jax.jit(jax.vmap(jax.jacobian(lambda x, s: numerics.log_softmax(x, sink=s), 1)))
        jac = jax.jit(jax.vmap(jax.jacobian(lambda x, s: numerics.softmax(x, sink=s), 1)))
        d_log, d_p = log_jac(x, sink), jac(x, sink)
    mass = oracle.sink_probability(x, sink, exact=True)
    p = oracle.sink_softmax(x, sink, exact=True)
    entry, _, terms = _conditioning(x, sink)
    # -P_s carries the sink's conditioning; -p_i P_s both factors' (as the VJP test).
    bound = general_bound("autodiff_grad", dtype, entry[:, -1:], 2 * terms)
    want = np.broadcast_to(-mass[:, None], x.shape)
    assert_ulp_close(d_log, want, bound, dtype, err_msg="d log p / ds")
    bound = general_bound("autodiff_grad", dtype, entry[:, :-1] + entry[:, -1:], 2 * terms)
    assert_ulp_close(d_p, -p * mass[:, None], bound, dtype, err_msg="d p / ds")


# Jitted once for the tests below: one program per call's shapes, not one per operation.
_softmax = jax.jit(numerics.softmax, static_argnames="axis")


def test_per_head_sinks_broadcast_and_sum_their_gradient():
    """Scores (B, H, Q, K) with one learned sink per head, given as (H, 1) or (1, H, 1, 1)."""
    rng = np.random.default_rng(4)
    scores = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    heads = rng.standard_normal(3).astype(np.float32)
    per_row = np.broadcast_to(heads[None, :, None], (2, 3, 4))
    want = _softmax(scores, sink=per_row)
    for given in (heads[:, None], heads[None, :, None, None]):
        np.testing.assert_array_equal(_softmax(scores, sink=given), want)
    # The sink's gradient sums over the rows it is broadcast to (B and Q).
    grad = jax.jit(
        jax.grad(lambda s: jnp.sum(numerics.log_softmax(scores, sink=s[:, None])[..., 0]))
    )
    expected = -np.sum(oracle.sink_probability(scores, per_row), axis=(0, 2))
    np.testing.assert_allclose(grad(heads), expected, rtol=1e-5)
    # A tuple of class axes: the sink is per row of the remaining axes.
    both = _softmax(scores, axis=(2, 3), sink=heads[None, :])
    flat = _softmax(scores.reshape(2, 3, 20), sink=heads[None, :]).reshape(scores.shape)
    np.testing.assert_array_equal(both, flat)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_masked_rows_and_edge_values(name):
    fn, exact_fn, _ = FUNCTIONS[name]
    x, where = _masked(F32)
    sink = np.linspace(-3.0, 3.0, len(x)).astype(np.float32)
    out = jax.jit(lambda x, s: fn(x, where=where, sink=s))(x, sink)
    # Row 0 is masked out entirely: the sink holds all the mass, so every entry is 0 (log:
    # -inf), not the plain function's 0 / 0.
    entry, mean_gap, terms = _conditioning(np.where(where, x, -np.inf), sink)
    conditioning = entry[:, :-1] if name == "softmax" else mean_gap[:, :-1]
    bound = general_bound("value", F32, conditioning, 2 * terms)
    assert_ulp_close(out, exact_fn(x, sink, where=where, exact=True), bound, F32, err_msg=name)
    assert np.all(np.asarray(out[0]) == (0.0 if name == "softmax" else -np.inf))
    grad = jax.jit(jax.grad(lambda s: jnp.sum(jnp.where(where, fn(x, where=where, sink=s), 0.0))))(
        sink
    )
    assert np.all(np.isfinite(grad)) and grad[0] == 0
    # NaN in a row or in its sink makes that row NaN (the max is NaN), the others unharmed.
    x_nan, s_nan = x.copy(), sink.copy()
    x_nan[1, 0], s_nan[2] = np.nan, np.nan
    got = np.asarray(jax.jit(lambda x, s: fn(x, sink=s))(x_nan, s_nan))
    assert np.all(np.isnan(got[1:3])) and not np.isnan(got[3:]).any()
    # A sink of +inf takes all the mass; an entry of +inf shares it with the sink.
    inf = np.array([[np.inf, 0.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(_softmax(inf, sink=np.inf)), [[0.5, 0.0]])
    np.testing.assert_array_equal(np.asarray(_softmax(inf[:, 1:], sink=np.inf)), [[0.0]])


@pytest.mark.parametrize(
    ("sink", "error", "message"),
    [
        (np.zeros(3, np.float32), ValueError, "sink of shape (3,) does not broadcast"),
        (np.zeros((2, 4), np.float32), ValueError, "not size 1 at the class axes"),
        (np.zeros(2, np.int32), TypeError, "sink must be a floating-point array"),
        (True, TypeError, "sink must be a floating-point array"),
        ("0", TypeError, "sink must be an array"),
    ],
)
@pytest.mark.parametrize("fn", [numerics.softmax, numerics.log_softmax, standard.softmax])
def test_bad_sinks_raise_one_clear_error(fn, sink, error, message):
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(error) as info:
        fn(x, sink=sink)
    assert message in str(info.value) and "\n" not in str(info.value)


@functools.cache
def _bf16_standard_rows():
    x, sink = _rows(BF16, 10, 1.0, 2.0, seed=17)
    return x, sink


def test_standard_is_jax_nn_on_the_row_with_the_sink_appended():
    x, sink = _bf16_standard_rows()
    appended = np.concatenate([x, sink[:, None]], -1)
    for ours, plain in (
        (standard.softmax, jax.nn.softmax),
        (standard.log_softmax, jax.nn.log_softmax),
    ):
        np.testing.assert_array_equal(
            np.asarray(jax.jit(lambda x, s, f=ours: f(x, sink=s))(x, sink)),
            np.asarray(jax.jit(plain)(appended)[:, :-1]),
        )


# Row [0, -2, -78.408]: p_2 = 8.6e-35 over hi = 1 + e^-2, whose low half is not 0; the
# shifts x_k - 0 are exact, so the bound is the table's with log2 K roundings of the sum.
TINY_BESIDE_A_SECOND = np.array([[0.0, -2.0, -78.408]], np.float32)


def test_the_sink_path_keeps_tiny_probabilities_beside_a_close_second():
    x = TINY_BESIDE_A_SECOND
    bound = general_bound("value", F32, np.zeros((1, 2)), 2 * 3)
    for row, sink in (([0, 2], 1), ([1, 2], 0)):  # the sink below the max, and the max
        assert_ulp_close(
            jax.jit(lambda x, s: numerics.softmax(x, sink=s))(x[:, row], x[:, sink]),
            oracle.sink_softmax(x[:, row], x[:, sink], exact=True),
            bound,
            F32,
        )


@pytest.mark.xfail(
    strict=True,
    reason="the plain fixed softmax's Dekker division (_softmax._divide) flushes subnormal "
    "partial products for quotients below 2^-100 when 1 + S_others has a nonzero low half "
    "(2,041 ulps here; 40 of 4,001 gaps from -86 to -60 exceed 10 ulps on this CPU); the sink "
    "path uses _divide_scaled, the plain path keeps its golden-pinned program",
)
def test_plain_softmax_keeps_tiny_probabilities_beside_a_close_second():
    x = TINY_BESIDE_A_SECOND
    bound = general_bound("value", F32, np.zeros((1, 3)), 3)
    assert_ulp_close(jax.jit(numerics.softmax)(x), oracle.softmax(x, exact=True), bound, F32)


@pytest.mark.parametrize(
    # The slow tier's, every case. Fast siblings: tests/grokbench/test_audit_sink.py's bf16
    # audits (the same check through the CLI, each kind's: the fixed sink-softmax passing,
    # the standard sink-log_softmax failing), check_sink_softmax's doctest
    # (numerics/_check_normalizers.py: the same check of numerics.softmax, bf16, `.ok`) and
    # test_random_rows_against_the_oracle (both fixed functions against mpmath, bfloat16 and
    # float32).
    ("kind", "dtype"),
    [
        pytest.param(kind, d, marks=pytest.mark.slow, id=f"{np.dtype(d).name}-{kind}")
        for d in DTYPES
        for kind in ("sink-softmax", "sink-log_softmax")
    ],
)
def test_the_public_check_passes_ours_in_every_dtype(dtype, kind):
    """`numerics.testing`'s check (the audit's): margin sweep, random rows, NaN."""
    from numerics import testing

    fn = numerics.log_softmax if "log" in kind else numerics.softmax
    result = testing.CHECKS[kind](fn, dtype, quick=True)
    result.assert_ok()
    assert result.grad_dies_at is None and result.value_zero_at is None
