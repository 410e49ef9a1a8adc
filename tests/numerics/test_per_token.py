"""The per-token log-probability and entropy against mpmath, in bf16, fp16, fp32 and fp64.

Every bound below is computed per element from an error model written here, never tuned. u
is the unit roundoff of the compute dtype (float32 for bf16 and fp16, the dtype itself for
fp32 and fp64); a relative error of r u is at most r ulps of the dtype (ulp(x) > u |x|), and
16-bit results add half an ulp for their one final rounding. Constants, as the lab measured
and states them (docs/studies/softmax-accuracy.md, tests/numerics/test_logsumexp.py): XLA's
exp within 1.5 ulps (EXP_U = 3 u relative), `log1p_of_sum` = log(hi) + lo / hi within 1.5
ulps (LOG_U = 3 u). XLA's CPU kernels flush results below the smallest normal number `tiny`
to 0.

**log_prob** is the fixed cross-entropy's loss and gradient negated (exactly), so it
inherits their model, `numerics.testing.general_bound`: the table (`ULPS['value']` 2 ulps:
a division, a log1p, a final rounding; `ULPS['grad']` 3: an exp, a division, a product)
plus log2 K roundings of the sums plus the conditioning of exp. With g_j = z_max - z_j
rounded (relative error u where the difference is not exact), e^-g_j carries g_j u; a
sum of positive terms carries the e^-g-weighted mean of its terms' errors (`weighted_gap`).
The value log1p(x), x = S_others e^(z_max - z_y), has relative conditioning x / ((1 + x)
log1p(x)) <= 1 in x, and log S - (z_y - z_max) (far below the max) adds two non-negative
terms: so its conditioning is weighted_gap(j != y) + g_y. The gradient q_j = e^-g_j / S:
g_j + weighted_gap(all) (S's error); the target's S_others / S: weighted_gap(j != y) +
weighted_gap(all).

**entropy** H = log1p(S_others) + A, A = T / hi, T = sum_j g_j e^-g_j (numerics/_per_token.py).
With c_j = g_j where z_max - z_j is not exact in the compute dtype (else 0) and i_j = 1 there:

- e_j = exp(-g_j): (EXP_U + c_j) u e_j; t_j = g_j e_j: (EXP_U + 1 + c_j + i_j) u t_j;
- S_others (a sum over K terms, and S - 1 once): E_S = sum_{j != max} (EXP_U + c_j) e_j +
  (log2 K + 1) S_others; T: E_T = sum_j (EXP_U + 1 + c_j + i_j) t_j + log2 K T;
- log1p(S_others): LOG_U L + E_S / S (d log1p(s) / ds = 1 / S);
- A = T / hi: A (E_T / T + E_S / S + 2) (the division, and lo <= u hi dropped);
- H = L + A: one more rounding, u H;
- flushed terms (e_j or t_j below tiny) are lost whole: F_S = their e_j, F_T = their t_j,
  adding F_S / S to L and (F_T + A F_S) / S to A.

Gradient p_k (g_k - A), p_k = e_k / hi: p_k's relative error (EXP_U + c_k + 2 + E_S / S) u +
F_S / S; g_k - A's absolute error u c_k + dA + u |g_k - A| (the subtraction); the product,
u |grad_k|; an entry whose e_k or p_k is flushed is lost whole. Where g_k = A the gradient
crosses 0 and the bound, in ulps of the tiny exact value, is large: the conditioning of the
function (no formula can do better from rounded inputs), not of this one.
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import mpmath
import numpy as np
import pytest

import numerics
from numerics import _check_cases, oracle, standard, testing
from numerics._check_per_token import entropy_bounds
from numerics._check_per_token import inexact_gaps as _inexact
from numerics._check_tolerances import finite_gaps, weighted_gap
from tests.tiers import FAST_DTYPES
from tests.tolerances import BF16, DTYPES, F16, F32, F64, general_bound

SIXTEEN_BIT = (np.dtype(BF16), np.dtype(F16))


def _ctype(dtype):
    return np.dtype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)


def _half(dtype) -> float:
    return 0.5 if np.dtype(dtype) in SIXTEEN_BIT else 0.0


def _weighted_gap(gaps, finite, exclude):
    """Per row, the e^-gap-weighted mean gap over finite entries not in `exclude` (0 for
    none): the conditioning of a sum of e^-gap_j (-inf entries weigh 0)."""
    return weighted_gap(np.where(finite, gaps, 0.0), exclude | ~finite)


def log_prob_bounds(z, labels, dtype, exact, exact_grad):
    """(value bound per row, gradient bound per entry) of log_prob: the cross-entropy's
    model (module docstring), plus the terms e^(z_j - z_max) flushed to 0 (below the
    compute dtype's smallest normal), each lost whole: F = their sum, an absolute error of
    F e^min(z_max - z_y, 1) / S in the value (the loss is log1p(S_others e^(z_max - z_y))
    where z_y - z_max > -1, else log S - (z_y - z_max)), F / S in the target's gradient
    entry, and all of each such entry's own gradient."""
    z64 = z.astype(np.float64)
    gaps = finite_gaps(z64)
    finite = np.isfinite(z64)
    k = z.shape[-1]
    is_t = np.arange(k) == labels[:, None]
    g_t = np.take_along_axis(gaps, labels[:, None], -1)[:, 0]
    others = _weighted_gap(gaps, finite, is_t)
    every = _weighted_gap(gaps, finite, np.zeros_like(is_t))
    value = general_bound("value", dtype, others + g_t, k)
    conditioning = np.where(is_t, others[:, None], gaps) + every[:, None]
    grad = general_bound("grad", dtype, conditioning, k)
    tiny = float(np.finfo(_ctype(dtype)).smallest_normal)
    e = np.where(finite, np.exp(-gaps), 0.0)
    lost = finite & (e < tiny) & (e > 0)
    f = np.where(lost & ~is_t, e, 0.0).sum(-1)
    s = e.sum(-1)
    value_error = f * np.exp(np.minimum(g_t, 1.0)) / s
    exact = np.abs(exact.astype(np.float64))
    value = value + value_error / oracle.ulp(exact, dtype)
    exact_grad = np.abs(exact_grad.astype(np.float64))
    target_error = np.where(is_t, (f / s)[:, None], 0.0)
    grad = grad + target_error / oracle.ulp(exact_grad, dtype)
    grad = np.where(lost, np.maximum(grad, exact_grad / oracle.ulp(exact_grad, dtype)), grad)
    return value, grad


@jax.jit
def _evaluate(z, labels, where):
    """log_prob and entropy of each row and their gradients (per-row sums: rows are
    independent, so each row's gradient is its own)."""

    def lp(z):
        return numerics.log_prob(z, labels)

    def ent(z):
        return numerics.entropy(z, where=where)

    return (
        lp(z),
        jax.grad(lambda z: lp(z).sum())(z),
        ent(z),
        jax.grad(lambda z: ent(z).sum())(z),
    )


def _hard_rows(dtype, max_k=1000):
    """numerics.testing's hard cases up to K = `max_k` (margins to 40, ties and near-ties,
    -inf entries, a 1e4 offset, tiny scales), two rows each, padded to one K with -inf."""
    made = [
        _check_cases.plant_rows(case, dtype, 2, seed=11)
        for case in _check_cases.random_cases(quick=False, max_k=max_k, dtype=dtype)
    ]
    k = max(z.shape[-1] for z, _ in made)
    z = np.concatenate(
        [np.pad(z, ((0, 0), (0, k - z.shape[-1])), constant_values=-np.inf) for z, _ in made]
    )
    return z.astype(dtype), np.concatenate([t for _, t in made]).astype(np.int32)


def _check_rows(z, labels, dtype, where=None, inexact=None):
    """Run both functions on rows z and hold values and gradients to the error models."""
    mask = np.ones(z.shape, bool) if where is None else where
    with jax.enable_x64(np.dtype(dtype) == np.float64):
        out = jax.device_get(_evaluate(jnp.asarray(z), jnp.asarray(labels), jnp.asarray(mask)))
    lp, lp_grad, ent, ent_grad = out
    for o in out:
        assert o.dtype == dtype
    exact_lp, exact_lp_grad = oracle.log_prob_value_and_grad(z, labels, exact=True)
    value_bound, grad_bound = log_prob_bounds(z, labels, dtype, exact_lp, exact_lp_grad)
    testing.assert_ulp_close(lp, exact_lp, value_bound, dtype, err_msg="log_prob")
    testing.assert_ulp_close(lp_grad, exact_lp_grad, grad_bound, dtype, err_msg="log_prob grad")
    exact_h, exact_h_grad = oracle.entropy_value_and_grad(z, where=where, exact=True)
    value_bound, grad_bound = entropy_bounds(
        z, dtype, exact_h.astype(np.float64), exact_h_grad.astype(np.float64), where, inexact
    )
    testing.assert_ulp_close(ent, exact_h, value_bound, dtype, err_msg="entropy")
    testing.assert_ulp_close(ent_grad, exact_h_grad, grad_bound, dtype, err_msg="entropy grad")
    return out


# slow: every dtype, the hard rows up to K = 1000; fast sibling: ..._up_to_k_100 below (bf16
# and float32, the two paths: the same functions, mask and bounds on every hard case but K = 1000)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_entry_against_mpmath(dtype):
    _check_per_entry(dtype, 1000)


@pytest.mark.parametrize("dtype", FAST_DTYPES, ids=str)
def test_per_entry_against_mpmath_up_to_k_100(dtype):
    _check_per_entry(dtype, 100)


def _check_per_entry(dtype, max_k):
    z, labels = _hard_rows(dtype, max_k)
    rng = np.random.default_rng(7)
    where = rng.random(z.shape) > 0.05
    where[::3] = True
    where[-1] = False  # a padding row: entropy 0, gradient 0
    _check_rows(z, labels, dtype, where, _inexact(z, dtype))


# The fast tier runs bf16 and float32 in test_per_entry_against_mpmath_up_to_k_100 (the oracle
# test); the other dtype sweeps keep bf16 there and run their other dtypes in the slow tier.
BF16_FAST = [BF16] + [pytest.param(d, marks=pytest.mark.slow) for d in DTYPES if d != BF16]


# slow: every dtype (bf16 too); fast sibling: test_per_entry_against_mpmath_up_to_k_100[bfloat16]
# (the same functions, dtype path and bounds, `_check_rows`, on the hard rows: margins to 40,
# a 1e4 offset)
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
    _check_rows(z, labels, dtype, inexact=_inexact(z, dtype))


def offset_rows(dtype) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(offset, z0, z1 = z0 + offset, labels) for the common-offset tests (PyTorch #195829).

    The offset is 1e4 as `dtype` holds it; the base logits (6 x 16, one peaked row) are
    multiples of ulp(1e4), so z0 + offset is exact in `dtype` and the two are mathematically
    the same distributions. Labels: each row's argmax but row 1's (3)."""
    dtype = np.dtype(dtype)
    offset = float(np.array(1e4, dtype))
    step = float(oracle.ulp(offset, dtype))
    rng = np.random.default_rng(4)
    base = np.round(rng.standard_normal((6, 16)) * max(3.0, 4 * step) / step) * step
    base[0, 0] += 30 * step  # a peaked row
    z0 = base.astype(dtype)
    z1 = (base + offset).astype(dtype)
    assert np.array_equal(z1.astype(np.float64) - offset, z0.astype(np.float64))
    labels = np.argmax(base, -1).astype(np.int32)
    labels[1] = 3
    return offset, z0, z1, labels


# slow: every dtype (bf16 too); fast siblings: test_per_entry_against_mpmath_up_to_k_100[bfloat16]
# (the same functions and bounds, `_check_rows`, on rows with a 1e4 offset among the hard rows),
# test_standard_formulas_fail_in_bf16_on_the_binades_that_matter (the standard entropy failing
# its bound in bf16)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", BF16_FAST, ids=str)
def test_common_offset_of_1e4_changes_nothing(dtype):
    # PyTorch #195829: a wrong loss when every logit shares a large offset (`offset_rows`).
    dtype = np.dtype(dtype)
    _, z0, z1, labels = offset_rows(dtype)
    plain = _check_rows(z0, labels, dtype)
    shifted = _check_rows(z1, labels, dtype, inexact=_inexact(z1, dtype))
    # The oracle's values are the same for both (the rows differ by a constant), so both
    # results sit within the bound of the same exact numbers; here they are bit-identical
    # too, since every z_max - z_j is exact (Sterbenz) either way.
    for a, b in zip(plain, shifted, strict=True):
        np.testing.assert_array_equal(a, b)
    # The standard entropy subtracts numbers of the size of 1e4: it is off by far more.
    exact_h = oracle.entropy(z1)
    with jax.enable_x64(dtype == np.float64):
        naive = np.asarray(jax.jit(standard.entropy)(jnp.asarray(z1)))
    bound, _ = entropy_bounds(z1, dtype, exact_h, np.zeros(z1.shape))
    if dtype in (*SIXTEEN_BIT, np.dtype(F32)):
        assert np.max(oracle.ulp_error(naive, exact_h, dtype) - bound) > 0


# slow; fast sibling: test_per_entry_against_mpmath_up_to_k_100[bfloat16] (the same program,
# `_evaluate`, on a batch of rows, each within its own bound)
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [BF16, F32], ids=str)
def test_batch_invariance(dtype):
    # A row's results do not depend on the rows next to it: bit for bit, alone, in two
    # different batches, at two positions. (float32: the slow tier's; bf16 its fast sibling.)
    rng = np.random.default_rng(1)
    if dtype == F32:
        # the same rows as when both dtypes ran in one loop: skip bf16's draws
        rng.standard_normal((8, 300)), rng.standard_normal((8, 300))
        rng.integers(0, 300, 8), rng.integers(0, 300, 8)
    batch = (rng.standard_normal((8, 300)) * 4).astype(dtype)
    other = (rng.standard_normal((8, 300)) * 40).astype(dtype)
    other[5] = batch[2]
    labels = rng.integers(0, 300, 8).astype(np.int32)
    other_labels = rng.integers(0, 300, 8).astype(np.int32)
    other_labels[5] = labels[2]
    mask = np.ones((8, 300), bool)
    a = jax.device_get(_evaluate(batch, labels, mask))
    b = jax.device_get(_evaluate(other, other_labels, mask))
    alone = jax.device_get(_evaluate(batch[2:3], labels[2:3], mask[:1]))
    for x, y, w in zip(a, b, alone, strict=True):
        np.testing.assert_array_equal(x[2], y[5])
        np.testing.assert_array_equal(x[2], w[0])


# -- every bf16 margin --------------------------------------------------------------------

V = 32  # the V-class setting: logits [m, 0, ..., 0] (kept small for the fast tier)


# The fast tier's margins: every bf16 m with 2^-10 <= |m| < 128, the binades that matter (as
# tests/numerics/test_options.py's fast sweep: below, log p and H are their m = 0 values to
# within rounding; above 88, e^-m underflows). Every finite bf16 m ("all") is the slow tier's.
SWEEPS = {
    "all": lambda m: np.ones(m.shape, bool),
    "binades": lambda m: (np.abs(m) >= 2.0**-10) & (np.abs(m) < 128),
}


def _sweep_logits(k, sweep="all"):
    m = oracle.representable_values(BF16)
    m = m[SWEEPS[sweep](m.astype(np.float64))]
    z = np.zeros((m.size, k), BF16)
    z[:, 0] = m
    return m, z


def _closed_form(m: np.ndarray, k: int):
    """Exact (log p_0, d log p_0 / dz, H, dH / dz) for logits [m, 0 x (k - 1)], entries 0
    and 1 of each gradient: the oracle's formulas with the k - 1 equal entries summed as
    one term of multiplicity k - 1 (checked against the oracle on a sample)."""
    n = k - 1
    out = np.empty((m.size, 6))
    with mpmath.workprec(oracle.PRECISION_BITS):
        for r, v in enumerate(m.astype(np.float64)):
            x = mpmath.mpf(float(v))
            s = n * mpmath.exp(-x)  # sum_{j != 0} e^(z_j - z_0)
            log_p = -mpmath.log1p(s)
            g0, g1 = s / (1 + s), -mpmath.exp(-x) / (1 + s)  # onehot - p
            if x >= 0:  # the max is entry 0; the others sit at gap x
                e1 = mpmath.exp(-x)
                s_others, big_t = n * e1, n * x * e1
                p0, p1, gap0, gap1 = 1 / (1 + s_others), e1 / (1 + s_others), 0, x
            else:  # the max is 0 (n ties); entry 0 sits at gap -x
                e0 = mpmath.exp(x)
                s_others, big_t = (n - 1) + e0, -x * e0
                p0, p1, gap0, gap1 = e0 / (1 + s_others), 1 / (1 + s_others), -x, 0
            a = big_t / (1 + s_others)
            h = mpmath.log1p(s_others) + a
            out[r] = [log_p, g0, g1, h, p0 * (gap0 - a), p1 * (gap1 - a)]
    return out


@functools.cache
def _sweep(k, sweep="all"):
    """(m, z, fixed outputs, exact) on every bf16 m of `SWEEPS[sweep]`: label 0."""
    m, z = _sweep_logits(k, sweep)
    labels = np.zeros(m.size, np.int32)
    fixed = jax.device_get(_evaluate(jnp.asarray(z), jnp.asarray(labels), jnp.ones(z.shape, bool)))
    exact = _closed_form(m, k)
    # The closed form is the oracle's arithmetic: both agree to float64's last bit on a
    # sample across the range (both signs, the cliffs, underflow).
    sample = np.linspace(0, m.size - 1, 61).astype(int)
    lp, lp_grad = oracle.log_prob_value_and_grad(z[sample], labels[sample])
    h, h_grad = oracle.entropy_value_and_grad(z[sample])
    check = np.column_stack([lp, lp_grad[:, :2], h, h_grad[:, :2]])
    np.testing.assert_allclose(exact[sample], check, rtol=1e-15, atol=0)
    return m, z, fixed, exact


# slow: every finite bf16 margin; fast sibling: test_every_bf16_margin_of_the_binades_that_
# matter (the same functions, K = 2, and bounds on every margin of the binades around the cliffs)
@pytest.mark.slow
@pytest.mark.parametrize("k", [2, V])
def test_every_bf16_margin(k):
    _check_every_margin(k, "all")


def test_every_bf16_margin_of_the_binades_that_matter():
    _check_every_margin(2, "binades")


def _check_every_margin(k, sweep):
    m, z, (lp, lp_grad, h, h_grad), exact = _sweep(k, sweep)
    labels = np.zeros(m.size, np.int32)
    lp_grad_exact = np.zeros(z.shape)
    lp_grad_exact[:, :2] = exact[:, 1:3]
    lp_grad_exact[:, 2:] = exact[:, 2:3]
    lp_bound, lp_grad_bound = log_prob_bounds(z, labels, BF16, exact[:, 0], lp_grad_exact)
    h_exact, h_grad_exact = exact[:, 3], np.zeros(z.shape)
    h_grad_exact[:, :2] = exact[:, 4:6]
    h_grad_exact[:, 2:] = exact[:, 5:6]
    # No inexact gaps: z_max - z_j is m - 0 or 0 - m, exact.
    h_bound, h_grad_bound = entropy_bounds(z, BF16, h_exact, h_grad_exact)
    checks = [
        ("log_prob", lp, exact[:, 0], lp_bound),
        ("log_prob grad[0]", lp_grad[:, 0], exact[:, 1], lp_grad_bound[:, 0]),
        ("log_prob grad[1]", lp_grad[:, 1], exact[:, 2], lp_grad_bound[:, 1]),
        ("entropy", h, h_exact, h_bound),
        ("entropy grad[0]", h_grad[:, 0], exact[:, 4], h_grad_bound[:, 0]),
        ("entropy grad[1]", h_grad[:, 1], exact[:, 5], h_grad_bound[:, 1]),
    ]
    for name, got, want, bound in checks:
        testing.assert_ulp_close(got, want, bound, BF16, inputs=m, err_msg=f"K={k} {name}")
    # The equal entries 1..K-1 get the same gradient.
    assert np.array_equal(lp_grad[:, 1:], np.broadcast_to(lp_grad[:, 1:2], lp_grad[:, 1:].shape))
    assert np.array_equal(h_grad[:, 1:], np.broadcast_to(h_grad[:, 1:2], h_grad[:, 1:].shape))
    # Where nothing underflows (every e^-g normal in float32) the model's bound is a few
    # tenths of an ulp above the final rounding: the results are within 1 ulp there.
    normal = np.abs(m.astype(np.float64)) < 87
    for name, got, want, _ in checks[::3]:
        assert np.max(oracle.ulp_error(got[normal], want[normal], BF16)) <= 1.0, name


def _first_zero_run(m, values):
    """The first m > 0 from which `values` stay exactly 0."""
    positive = m.astype(np.float64) > 0
    nonzero = np.flatnonzero(positive & (values != 0))
    return float(m[nonzero[-1] + 1])


def _first_at_or_past(dtype, value):
    m = oracle.representable_values(dtype).astype(np.float64)
    return float(m[m >= value][0])


# slow: on every finite bf16 margin; fast sibling: ..._on_the_binades_that_matter below (every
# margin from 2^-10 to 128, which holds both cliffs, the zero runs and the failing margins)
@pytest.mark.slow
def test_standard_formulas_fail_in_bf16_where_the_fixed_ones_hold():
    _check_standard_formulas_fail("all")


def test_standard_formulas_fail_in_bf16_on_the_binades_that_matter():
    _check_standard_formulas_fail("binades")


def _check_standard_formulas_fail(sweep):
    m, z, (lp, _, h, _), exact = _sweep(2, sweep)
    labels = jnp.zeros(m.size, jnp.int32)
    naive_lp = np.asarray(jax.jit(standard.log_prob)(jnp.asarray(z), labels), np.float64)
    naive_h_jit = np.asarray(jax.jit(standard.entropy)(jnp.asarray(z)), np.float64)
    naive_h = np.asarray(standard.entropy(jnp.asarray(z)), np.float64)
    # jax.nn.log_softmax is one XLA computation; XLA's CPU backend keeps a bf16 fusion's
    # intermediates in float32, so 1 + e^-m rounds to 1 at float32's cliff: the standard
    # log-probability is exactly 0 from m = 16.75 (bf16's first value past 24 ln 2 =
    # 16.64); a backend that rounds each operation to bf16 gives 0 from bf16's own cliff,
    # m = 5.5625 (the standard entropy op by op, below, shows it).
    bf16_cliff = _first_at_or_past(BF16, numerics.precision_cliff(BF16))
    f32_cliff = _first_at_or_past(BF16, numerics.precision_cliff(F32))
    assert (bf16_cliff, f32_cliff) == (5.5625, 16.75)
    assert _first_zero_run(m, naive_lp) in (bf16_cliff, f32_cliff)
    # Its gradient's target entry 1 - p_y goes with it.
    naive_grad = jax.jit(jax.vmap(jax.grad(standard.log_prob)))(jnp.asarray(z), labels)
    target = np.asarray(naive_grad[:, 0], np.float64)
    assert _first_zero_run(m, target) == _first_zero_run(m, naive_lp)
    assert _first_zero_run(m, naive_h_jit) in (bf16_cliff, f32_cliff)
    assert _first_zero_run(m, naive_h) == bf16_cliff  # eager: each operation in bf16
    # The fixed ones are non-zero up to underflow and within their bounds (above).
    alive = (m.astype(np.float64) > 0) & (m.astype(np.float64) < 87)
    assert np.all(lp[alive] < 0) and np.all(h[alive] > 0)
    # Both standard forms fail the fixed ones' bounds on every margin from their zero on
    # (to underflow, m < 87); the entropy op by op fails before it is 0 too: lse and
    # sum p z, both of the size of m, cancel to H (measured: 92 % of the margins in
    # (1, 5.5) off by up to 126 ulps).
    mf = m.astype(np.float64)
    h_bound, _ = entropy_bounds(z, BF16, exact[:, 3], np.zeros(z.shape))
    lp_bound, _ = log_prob_bounds(z, np.zeros(m.size, np.int64), BF16, exact[:, 0], exact[:, 1:3])
    for name, naive, want, bound, zero_from in (
        ("log_prob", naive_lp, exact[:, 0], lp_bound, f32_cliff),
        ("entropy under jit", naive_h_jit, exact[:, 3], h_bound, f32_cliff),
        ("entropy op by op", naive_h, exact[:, 3], h_bound, bf16_cliff),
    ):
        failing = oracle.ulp_error(naive, want, BF16) > bound
        past = (mf >= zero_from) & (mf < 87)
        assert np.all(failing[past]), name
    assert np.mean(failing[(mf > 1) & (mf < 5.5)]) > 0.5
    assert not np.any(oracle.ulp_error(h, exact[:, 3], BF16) > h_bound)
    assert not np.any(oracle.ulp_error(lp, exact[:, 0], BF16) > lp_bound)


# -- gradients ------------------------------------------------------------------------------


def test_oracle_gradients_match_finite_differences():
    # The oracle's gradient formulas (onehot - p; p_k (g_k - A)) against central
    # differences of -sum p log p at 256 bits (1e-77 relative), step 1e-20: truncation
    # about h^2 |f(3)| ~ 1e-40, rounding 1e-77 / 1e-20 = 1e-57; both far below 1e-30.
    z = np.array([[2.0, -1.5, 0.25, 7.0, -30.0]])
    labels = np.array([2])
    with mpmath.workprec(oracle.PRECISION_BITS):
        h = mpmath.mpf("1e-20")
        _, lp_grad = oracle.log_prob_value_and_grad(z, labels, exact=True)
        _, h_grad = oracle.entropy_value_and_grad(z, exact=True)
        for k in range(z.shape[-1]):

            def shifted(delta, k=k):
                row = [mpmath.mpf(float(v)) for v in z[0]]
                row[k] += delta
                top = max(row)
                e = [mpmath.exp(v - top) for v in row]
                total = mpmath.fsum(e)
                log_p = [v - top - mpmath.log(total) for v in row]
                ent = -mpmath.fsum(mpmath.exp(lp) * lp for lp in log_p)
                return log_p[int(labels[0])], ent

            up, down = shifted(h), shifted(-h)
            assert abs((up[0] - down[0]) / (2 * h) - lp_grad[0, k]) < mpmath.mpf("1e-30")
            assert abs((up[1] - down[1]) / (2 * h) - h_grad[0, k]) < mpmath.mpf("1e-30")


def test_float64_gradients_match_finite_differences_and_forward_mode():
    z = np.array([[2.0, -1.5, 0.25, 7.0, -30.0], [0.1, 0.2, 0.3, 0.4, 0.5]])
    labels = np.array([2, 4])
    # Each derivative one program (op by op they were ~200 small ones).
    grads = jax.jit(jax.grad(lambda z: numerics.entropy(z).sum()))(z)
    fwd = jax.jit(jax.jacfwd(lambda z: numerics.entropy(z).sum()))(z)
    np.testing.assert_allclose(fwd, grads, rtol=1e-15, atol=0)
    lp_grads = jax.jit(jax.grad(lambda z: numerics.log_prob(z, labels).sum()))(z)
    # Central differences in float64, step h: truncation h^2 |f(3)| / 6 (|f(3)| < 2 for
    # both on these rows) plus rounding 2 eps |f| / (2 h), |f| < 40 (log p of -37).
    step = 1e-5
    eps = float(np.finfo(np.float64).eps)
    atol = step**2 / 3 + eps * 40 / step
    for k in range(z.shape[-1]):
        d = np.zeros_like(z)
        d[:, k] = step
        for fn, got in (
            (jax.jit(numerics.entropy), grads),
            (jax.jit(lambda z: numerics.log_prob(z, labels)), lp_grads),
        ):
            fd = (np.asarray(fn(z + d)) - np.asarray(fn(z - d))) / (2 * step)
            np.testing.assert_allclose(got[:, k], fd, rtol=0, atol=atol)
    # Second order: the Hessian of H is symmetric, and its rows sum to 0 (H is shift
    # invariant).
    hess = jax.jit(jax.hessian(lambda r: numerics.entropy(r)))(z[1])
    np.testing.assert_allclose(hess, hess.T, atol=1e-15)
    np.testing.assert_allclose(hess.sum(-1), 0, atol=1e-15)


# -- masks, edges, contract -----------------------------------------------------------------


# The entropy and log_prob jitted once for the test below: one program per call's shapes
# (op by op, the test compiled ~300 small ones). log_prob stays eager where its concrete
# labels' check is the point: a padding row's out-of-range label is not checked.
_entropy = jax.jit(numerics.entropy, static_argnames="axis")
_log_prob = jax.jit(numerics.log_prob, static_argnames="axis")


def test_masks_and_edge_cases():
    inf, nan = np.inf, np.nan
    z = np.array([[1.0, 2.0, 3.0, 4.0]])
    keep = np.array([[True, False, True, True]])
    # An entry mask leaves entries out of the normaliser: the same as -inf there.
    dropped = np.where(keep, z, -inf)
    assert _entropy(z, where=keep) == _entropy(dropped)
    assert _log_prob(z, np.array([2]), where=keep) == _log_prob(dropped, np.array([2]))
    grad = jax.jit(jax.grad(lambda r: _entropy(r, where=keep).sum()))(z)
    assert grad[0, 1] == 0 and abs(float(grad.sum())) < 1e-7
    # A row mask (the labels' rank): padding rows give 0 and gradient 0, whatever the label.
    rows = np.array([[1.0, 2.0], [3.0, 5.0]])
    pad = np.array([True, False])
    assert _entropy(rows, where=pad)[1] == 0
    assert numerics.log_prob(rows, [0, 7], where=pad)[1] == 0
    assert not np.any(jax.jit(jax.grad(lambda r: _entropy(r, where=pad).sum()))(rows)[1])
    assert not np.any(
        jax.jit(jax.grad(lambda r: numerics.log_prob(r, [0, 1], where=pad).sum()))(rows)[1]
    )
    # K = 1; -inf entries; n +inf entries; NaN; a row of only -inf.
    assert _entropy(np.array([5.0])) == 0 and _log_prob(np.array([5.0]), np.array(0)) == 0
    np.testing.assert_allclose(_entropy(np.array([0.0, 0.0, -inf])), np.log(2), rtol=1e-15)
    np.testing.assert_allclose(_entropy(np.array([inf, 1.0, inf])), np.log(2), rtol=1e-15)
    assert np.isnan(_entropy(np.array([1.0, nan]))) and np.isnan(
        _log_prob(np.array([1.0, nan]), np.array(0))
    )
    assert np.isnan(_entropy(np.array([-inf, -inf])))
    # Class axes: a tuple of axes is normalised over together, as log_softmax.
    x = np.random.default_rng(0).standard_normal((3, 4, 5))
    flat = x.transpose(0, 2, 1).reshape(3, 20)
    np.testing.assert_array_equal(_entropy(x, axis=(2, 1)), _entropy(flat))
    np.testing.assert_array_equal(
        _log_prob(x, np.array([0, 7, 19]), axis=(2, 1)), _log_prob(flat, np.array([0, 7, 19]))
    )
    swapped = _entropy(np.swapaxes(x, 1, 2))
    np.testing.assert_array_equal(_entropy(x, axis=1), swapped)


def test_bad_input_raises_clearly():
    with pytest.raises(TypeError, match="floating-point"):
        numerics.entropy(jnp.arange(3))
    with pytest.raises(TypeError, match="integer"):
        numerics.log_prob(jnp.zeros(3), 0.5)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        numerics.log_prob(jnp.zeros((2, 3)), jnp.array([0, 3]))
    with pytest.raises(ValueError, match="do not match"):
        numerics.log_prob(jnp.zeros((2, 3)), jnp.array([0, 1, 2]))
    with pytest.raises(ValueError, match="rank"):
        numerics.entropy(jnp.zeros((2, 3, 4)), where=jnp.ones(4, bool))
    with pytest.raises(TypeError, match="float8"):
        numerics.entropy(jnp.zeros(3, ml_dtypes.float8_e4m3fn))
    with pytest.raises(TypeError, match="x64"):
        with jax.enable_x64(False):
            numerics.entropy(np.zeros(3))
    # Under jit, an out-of-range label gives NaN, as cross_entropy.
    assert np.isnan(jax.jit(numerics.log_prob)(jnp.zeros(3), jnp.array(5)))


def test_standard_twins_are_the_trainers_formulas():
    # Every function below is jitted (one program each; op by op, ~120 small ones).
    z = (np.random.default_rng(2).standard_normal((4, 50)) * 3).astype(F32)
    y = np.array([0, 10, 20, 49])
    log_softmax = np.asarray(jax.jit(jax.nn.log_softmax)(z))
    gathered = np.take_along_axis(log_softmax, y[:, None], -1)[:, 0]
    standard_lp = jax.jit(standard.log_prob)(z, y)
    np.testing.assert_array_equal(standard_lp, gathered)
    verl = jax.jit(
        lambda z: jax.nn.logsumexp(z, axis=-1) - jnp.sum(jax.nn.softmax(z, axis=-1) * z, axis=-1)
    )(z)
    standard_h = jax.jit(standard.entropy)(z)
    np.testing.assert_array_equal(standard_h, verl)
    # On ordinary rows both agree with the fixed ones to float32 rounding.
    np.testing.assert_allclose(standard_lp, jax.jit(numerics.log_prob)(z, y), rtol=1e-5)
    np.testing.assert_allclose(standard_h, jax.jit(numerics.entropy)(z), rtol=1e-4)
    assert jax.jit(numerics.log_prob)(z.astype(F16), y).dtype == F16
    assert jax.jit(numerics.entropy)(z.astype(F64)).dtype == F64
