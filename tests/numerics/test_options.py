"""z-loss, soft-capping and label smoothing on the materialized `cross_entropy` (issue 31).

Logits [m, 0] with the target first, against mpmath: every bf16 margin with
2^-10 <= |m| < 128 (all the values the dtype has there; below, the loss is log 2 to
within rounding, above 88 e^-m underflows) and, under `-m slow`, every finite bf16 and
fp16 margin below 128 in magnitude; every ulp within 256 of each option's cliff in all
four dtypes. Bounds are `numerics.testing`'s for the options (`OPTION_ULPS`, gradients in
ulps of the terms they are formed from, `CAP_ULPS` |z'| under a cap), fixed there from
the error analysis. The standard versions must collapse where the peers' do.
"""

import functools
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import numerics
from numerics import oracle, standard, testing
from numerics.testing import assert_ulp_close
from tests.tolerances import BF16, DTYPES, F16, F32, F64, ULPS

KINDS = list(testing.OPTIONS)


def _cliff(dtype, options) -> float:
    """The margin m of logits [m, 0] where the option's standard form collapses: the
    dtype's cliff, or under a cap c the m whose capped margin reaches it."""
    cliff = numerics.precision_cliff(dtype)
    cap = options.get("soft_cap")
    if cap is None:
        return cliff
    if cliff < cap:
        return cap * math.atanh(cliff / cap)
    # float64 with c = 30: the capped margin never reaches 36.7. The standard's gradient
    # still dies where tanh(m / c) rounds to 1 and autodiff's 1 - tanh^2 to 0:
    # 1 - tanh(u) = 2 e^(-2u) < 2^-(p + 1), u = (p + 2) ln 2 / 2.
    p = ml_dtypes.finfo(dtype).nmant + 1
    return cap * (p + 2) * math.log(2) / 2


def _sixteen_bit_margins(dtype, smallest):
    values = oracle.representable_values(dtype).astype(np.float64)
    keep = (np.abs(values) >= smallest) & (np.abs(values) < 128)
    return values[keep].astype(dtype)


@functools.cache
def _margins(dtype, kind, sweep):
    dtype = np.dtype(dtype)
    if sweep == "window":
        return oracle.ulp_window(_cliff(dtype, testing.OPTIONS[kind]), dtype, 256)
    return _sixteen_bit_margins(dtype, 2.0**-10 if sweep == "binades" else 0.0)


@functools.cache
def _exact(dtype, kind, sweep):
    m = _margins(dtype, kind, sweep)
    z = np.stack([m, np.zeros_like(m)], -1)
    labels = np.zeros(len(m), np.int64)
    loss, grad = oracle.cross_entropy_value_and_grad(z, labels, exact=True, **testing.OPTIONS[kind])
    return z, labels, loss, grad


def _run(fn, z, labels):
    return jax.jit(jax.vmap(jax.value_and_grad(fn)))(jnp.asarray(z), jnp.asarray(labels, jnp.int32))


def _check(dtype, kind, sweep):
    dtype = np.dtype(dtype)
    options = testing.OPTIONS[kind]
    with jax.enable_x64(dtype == F64):
        z, labels, exact_loss, exact_grad = _exact(dtype, kind, sweep)
        loss, grad = _run(functools.partial(numerics.cross_entropy, **options), z, labels)
    assert loss.dtype == dtype and grad.dtype == dtype
    value_cond, grad_cond, scale = testing.option_conditioning(z, labels, **options)
    m = z[:, 0]
    value = ULPS["value"][dtype] + testing.OPTION_ULPS["value"] + value_cond
    assert_ulp_close(loss, exact_loss, value, dtype, inputs=m, err_msg=f"{kind} loss")
    bound = ULPS["grad"][dtype] + testing.OPTION_ULPS["grad"] + grad_cond
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    diff = np.abs(np.asarray(grad, np.float64) - exact_grad.astype(np.float64))
    ulps = np.maximum(diff - tiny, 0) / oracle.ulp(np.maximum(scale, tiny), dtype)
    worst = np.unravel_index(int(np.argmax(ulps - bound)), ulps.shape)
    assert np.all(ulps <= bound), (kind, float(m[worst[0]]), worst[1], ulps[worst], bound[worst])
    return m, grad, exact_grad, scale, bound


@pytest.mark.parametrize("kind", KINDS)
def test_every_bf16_margin_of_the_binades_that_matter(kind):
    _check(BF16, kind, "binades")


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [BF16, F16], ids=str)
def test_every_sixteen_bit_margin(dtype, kind):
    _check(dtype, kind, "all")


@pytest.mark.parametrize(
    ("dtype", "kind"),
    [
        # A diagonal in the fast tier: every dtype with one option (dtype index modulo 3),
        # every option in one or two dtypes; the other pairs in the slow tier.
        pytest.param(dtype, kind, marks=() if d % len(KINDS) == k else pytest.mark.slow)
        for d, dtype in enumerate(DTYPES)
        for k, kind in enumerate(KINDS)
    ],
    ids=str,
)
def test_every_ulp_around_the_cliff(dtype, kind):
    _, grad, exact_grad, scale, bound = _check(dtype, kind, "window")
    # Past the cliff the fixed target gradient is never 0 where a 0 would exceed the bound.
    big = np.abs(exact_grad[:, 0].astype(np.float64)) > bound[:, 0] * oracle.ulp(scale[:, 0], dtype)
    assert np.all(np.asarray(grad[:, 0], np.float64)[big] != 0)


@pytest.mark.parametrize(
    ("dtype", "kind"),
    [
        # A checkerboard in the fast tier: every option once, each dtype; the other pairs
        # in the slow tier.
        pytest.param(dtype, kind, marks=() if (d + k) % 2 == 0 else pytest.mark.slow)
        for d, dtype in enumerate([BF16, F32])
        for k, kind in enumerate(KINDS)
    ],
    ids=str,
)
def test_standard_forms_fail_the_same_bounds_at_the_cliff(dtype, kind):
    # The peers' forms on the same window: (1 + 2 w lse) q_t - 1 with q_t (and, in bf16,
    # the factor) rounded to 1; the capped logits rounded in the dtype and q_t - 1 again;
    # smoothing's q_t - (1 - alpha + alpha / K) with q_t rounded to 1. The target gradient
    # leaves the bound that the fixed form meets (test_every_ulp_around_the_cliff).
    options = testing.OPTIONS[kind]
    z, labels, _, exact_grad = _exact(np.dtype(dtype), kind, "window")
    _, grad = _run(functools.partial(standard.cross_entropy, **options), z, labels)
    _, grad_cond, scale = testing.option_conditioning(z, labels, **options)
    bound = ULPS["grad"][dtype] + testing.OPTION_ULPS["grad"] + grad_cond[:, 0]
    diff = np.abs(np.asarray(grad[:, 0], np.float64) - exact_grad[:, 0].astype(np.float64))
    assert np.any(diff / oracle.ulp(scale[:, 0], dtype) > bound)


def test_fixed_options_keep_dtype_masks_and_padding():
    z = jnp.asarray([[0.3, -1.2, 2.0, 0.5], [1.5, 0.25, -0.75, 1.0]], F32)
    t = jnp.array([2, 0])
    opts = {"z_loss": 1e-2, "soft_cap": 2.0, "label_smoothing": 0.1}
    where = jnp.array([[True, False, True, True], [False] * 4])

    @jax.jit
    def run(z):
        loss = lambda z: numerics.cross_entropy(z, t, where=where, **opts)  # noqa: E731
        sub = lambda z: numerics.cross_entropy(z[0, jnp.array([0, 2, 3])], 1, **opts)  # noqa: E731
        return loss(z), jax.grad(lambda z: loss(z).sum())(z), sub(z), jax.grad(sub)(z)

    loss, grad, sub_loss, sub_grad = run(z)
    # An entry mask is the loss on the kept classes (n = 3); a padding row gives 0, 0.
    np.testing.assert_allclose(loss[0], sub_loss, rtol=1e-6)
    np.testing.assert_allclose(grad[0], sub_grad[0], rtol=1e-5, atol=1e-7)
    assert loss[1] == 0 and not np.asarray(grad[1]).any()
    for dtype in (BF16, F16):  # the trace's dtype (`jax.eval_shape`: nothing compiled)
        out = jax.eval_shape(lambda z: numerics.cross_entropy(z, t, **opts), z.astype(dtype))
        assert out.dtype == dtype


def test_options_reject_bad_values():
    z, t = jnp.zeros((2, 3)), jnp.array([0, 1])
    for kw, match in (
        ({"soft_cap": 0.0}, "soft_cap"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"z_loss": -1.0}, "z_loss"),
    ):
        for fn in (numerics.cross_entropy, standard.cross_entropy):
            with pytest.raises(ValueError, match=match):
                fn(z, t, **kw)
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda w: numerics.cross_entropy(z, t, z_loss=w))(1e-4)


def test_standard_options_match_the_peers_formulas():
    # optax has no z-loss or cap: the formulas trainers write (T5X, Gemma 2), and optax's
    # smooth_labels for label smoothing, bit for bit.
    import optax

    z = (3 * jax.random.normal(jax.random.key(5), (4, 6))).astype(BF16)
    t = jnp.array([0, 5, 2, 3])

    def theirs_of(z):
        lse = jax.nn.logsumexp(z, axis=-1)
        return [
            optax.softmax_cross_entropy_with_integer_labels(z, t)
            + jnp.asarray(1e-4, BF16) * lse**2,
            optax.softmax_cross_entropy_with_integer_labels(
                jnp.asarray(30.0, BF16) * jnp.tanh(z / jnp.asarray(30.0, BF16)), t
            ),
            optax.softmax_cross_entropy(
                z, optax.smooth_labels(jax.nn.one_hot(t, 6, dtype=BF16), jnp.asarray(0.1, BF16))
            ),
        ]

    def ours_of(z):
        return [
            standard.cross_entropy(z, t, z_loss=1e-4),
            standard.cross_entropy(z, t, soft_cap=30.0),
            standard.cross_entropy(z, t, label_smoothing=0.1),
        ]

    # Each side in one program of its own (op by op, ~40 small ones), as
    # test_contract.py's test_standard_is_jax_nn_and_optax_bit_for_bit.
    pairs = zip(jax.jit(ours_of)(z), jax.jit(theirs_of)(z), strict=True)
    for ours, theirs in pairs:
        np.testing.assert_array_equal(np.asarray(ours, F32), np.asarray(theirs, F32))
