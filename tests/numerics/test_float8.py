"""Every finite float8 value m (e4m3fn and e5m2), as logits [m, 0], against mpmath.

float8 is a storage format here: the fixed functions take float8 logits, compute in
float32 and round each result once to float8. Bounds, fixed before measuring: a forward
value is one float32 computation (within a few float32 ulps, plus |m| of conditioning:
under 500 float32 ulps = 2^-11 float8 ulps) rounded once, so within 0.5 + 2^-10 ulps of
float8; gradients formed by reverse mode from a probability already rounded to float8, and
the losses' gradients, within the lab's table `ULPS` (as bf16 and fp16 in
test_exhaustive.py); logsumexp's gradient, the fixed softmax itself, as a value; the
soft-target loss and the divergences within the bounds `numerics.testing` derives for them
(their conditioning on log(q / p)).
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import numerics
from numerics import oracle, standard, testing
from numerics._check_divergence import gradient_scale, sensitivity
from numerics._check_tolerances import conditioned_bound, errors_in_ulps_of, finite_gaps
from tests.tolerances import ULPS

FLOAT8 = testing.FLOAT8_DTYPES
# The sweeps compile one large program per format. numerics branches on float8 as a whole
# (itemsize 1: computed in float32, rounded once), not on the format, so e4m3fn's sweep is
# the fast tier's and e5m2's the slow tier's (-m slow); e5m2's own arithmetic stays fast in
# test_standard_in_float8_is_jax_arithmetic.
SWEPT = [
    pytest.param(d, marks=() if d == ml_dtypes.float8_e4m3fn else pytest.mark.slow) for d in FLOAT8
]
ONE_ROUNDING = 0.5 + 2.0**-10
DIVERGENCES = {
    "kl": numerics.kl_divergence,
    "reverse_kl": numerics.reverse_kl_divergence,
    "js": numerics.js_divergence,
}


@jax.jit
def _everything(x, labels0, labels1):
    """Every fixed function on the rows x = [m, 0]: values and gradients, one program."""
    cot = jnp.zeros_like(x).at[:, 0].set(1)
    zeros = jnp.zeros_like(x)
    out = {}
    for label, labels in (("ce0", labels0), ("ce1", labels1)):
        out[label] = jax.vmap(jax.value_and_grad(numerics.cross_entropy))(x, labels)
    for name, fn in (("log_softmax", numerics.log_softmax), ("softmax", numerics.softmax)):
        y, vjp = jax.vjp(fn, x)
        out[name] = (y, vjp(cot)[0])
    y, vjp = jax.vjp(lambda x: numerics.logsumexp(x, axis=-1), x)
    out["logsumexp"] = (y, vjp(jnp.ones_like(y))[0])
    pairs = {"soft_target": numerics.soft_target_cross_entropy, **DIVERGENCES}
    for name, fn in pairs.items():
        out[name] = (fn(x, zeros), jax.grad(lambda s, f=fn: f(s, zeros).sum())(x))
        # At student == teacher: exactly 0, value (soft-target: its entropy) and gradient.
        out[name + "@teacher"] = (fn(x, x), jax.grad(lambda s, f=fn: f(s, x).sum())(x))
    return out


@functools.cache
def _sweep(dtype):
    m = oracle.representable_values(dtype)
    x = np.stack([m, np.zeros_like(m)], -1)
    n = len(m)
    got = _everything(jnp.asarray(x), jnp.zeros(n, jnp.int32), jnp.ones(n, jnp.int32))
    return m, x, jax.device_get(got)


@pytest.mark.parametrize("dtype", SWEPT, ids=str)
def test_normalizers_and_cross_entropy_on_every_value(dtype):
    m, x, got = _sweep(dtype)
    exact_ce = {
        label: oracle.cross_entropy_value_and_grad(x, np.full(len(m), label)) for label in (0, 1)
    }
    for label in (0, 1):
        loss, grad = got[f"ce{label}"]
        assert loss.dtype == dtype and grad.dtype == dtype
        exact_loss, exact_grad = exact_ce[label]
        testing.assert_ulp_close(loss, exact_loss, ONE_ROUNDING, dtype, inputs=m, err_msg="loss")
        testing.assert_ulp_close(grad, exact_grad, ULPS["grad"][dtype], dtype, err_msg="grad")
    cot = np.zeros_like(x, np.float64)
    cot[:, 0] = 1
    for name, ref, vjp in (
        ("log_softmax", oracle.log_softmax, oracle.log_softmax_vjp),
        ("softmax", oracle.softmax, oracle.softmax_vjp),
    ):
        y, g = got[name]
        assert y.dtype == dtype and g.dtype == dtype
        testing.assert_ulp_close(y, ref(x), ONE_ROUNDING, dtype, err_msg=name)
        testing.assert_ulp_close(g, vjp(x, cot), ULPS["autodiff_grad"][dtype], dtype, err_msg=name)
    # logsumexp: a value, and a gradient that is the fixed softmax, each rounded once.
    y, g = got["logsumexp"]
    assert y.dtype == dtype and g.dtype == dtype
    testing.assert_ulp_close(y, oracle.logsumexp(x), ONE_ROUNDING, dtype, err_msg="logsumexp")
    testing.assert_ulp_close(g, oracle.softmax(x), ONE_ROUNDING, dtype, err_msg="d logsumexp")


@pytest.mark.parametrize("dtype", SWEPT, ids=str)
def test_soft_target_and_divergences_on_every_value(dtype):
    m, x, got = _sweep(dtype)
    zeros = np.zeros_like(x)
    gaps = np.maximum(finite_gaps(x), finite_gaps(zeros))
    loss, grad = got["soft_target"]
    exact_loss, exact_grad = oracle.soft_target_cross_entropy_value_and_grad(x, zeros)
    bound = conditioned_bound(ULPS["value"][dtype], gaps.max(-1), 2) + 1
    testing.assert_ulp_close(loss, exact_loss, bound, dtype, inputs=m, err_msg="soft-target")
    scale = np.maximum(oracle.softmax(x), oracle.softmax(zeros))
    err = errors_in_ulps_of(grad, exact_grad, scale, dtype)
    assert np.all(err <= conditioned_bound(ULPS["grad"][dtype], gaps, 2) + 2)
    for form in DIVERGENCES:
        value, grad = got[form]
        exact, exact_grad = oracle.divergence_value_and_grad(x, zeros, form, exact=True)
        c, kappa = sensitivity(x, zeros, form, exact)
        bound = conditioned_bound(ULPS["value"][dtype], gaps.max(-1), 2) + 1 + kappa
        testing.assert_ulp_close(value, exact, bound, dtype, inputs=m, err_msg=form)
        err = errors_in_ulps_of(grad, exact_grad, gradient_scale(x, zeros, form, exact), dtype)
        assert np.all(err <= conditioned_bound(ULPS["grad"][dtype], gaps, 2) + 2 + c), form


@pytest.mark.parametrize("dtype", SWEPT, ids=str)
def test_exactly_zero_at_the_teacher_for_every_value(dtype):
    _, _, got = _sweep(dtype)
    for name in ("soft_target", *DIVERGENCES):
        value, grad = got[name + "@teacher"]
        assert not np.any(grad.astype(np.float32)), name
        if name != "soft_target":  # its value there is the teacher's entropy
            assert not np.any(value.astype(np.float32)), name


@pytest.mark.parametrize("dtype", SWEPT, ids=str)
def test_fixed_gradient_lasts_until_it_rounds_to_zero(dtype):
    m, _, got = _sweep(dtype)
    positive = m.astype(np.float64) > 0
    grad = got["ce0"][1][positive, 0].astype(np.float64)
    exact = -oracle.cross_entropy_grad(_sweep(dtype)[1][positive], np.zeros(positive.sum()))[:, 0]
    half_tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal) / 2
    # Softmax Collapse would zero these past p ln 2; the fixed gradient keeps every one.
    assert np.all(grad[exact > half_tiny] < 0) and np.all(grad[exact < half_tiny] == 0)


@jax.jit
def _standard_and_fixed(x_e5m2, z_e4m3fn):
    """optax's target gradients on e5m2 rows; standard and fixed CE on one e4m3fn row."""
    labels = jnp.zeros(x_e5m2.shape[0], jnp.int32)
    grad = jax.vmap(jax.grad(standard.cross_entropy))(x_e5m2, labels)
    label = jnp.zeros(1, jnp.int32)
    fixed_grad = jax.grad(lambda z: numerics.cross_entropy(z, label).sum())(z_e4m3fn)
    return (
        grad[:, 0],
        standard.cross_entropy(z_e4m3fn, label),
        numerics.cross_entropy(z_e4m3fn, label),
        fixed_grad[0, 0],
    )


def test_standard_in_float8_is_jax_arithmetic():
    # e5m2: JAX rounds every operation to float8 (computing it in float16), so e^-m is
    # rounded before 1 is added: the target gradient is 0 from the last value below
    # p ln 2 (e^-2 = 0.135 rounds to 2^-3, and 1 + 2^-3 ties to 1).
    m = oracle.representable_values(ml_dtypes.float8_e5m2)
    m = m[(m > 0) & (m.astype(np.float64) < np.log(57344.0))]
    x = jnp.stack([jnp.asarray(m), jnp.zeros(len(m), m.dtype)], -1)
    # e4m3fn has no infinities: jax.nn's max starts from -inf = NaN, so it shifts by 0 and
    # e^m overflows (to NaN) past log(448). The fixed loss there: log1p(e^-6.5) = 0.0015
    # and its target gradient round to the smallest subnormal, 2^-9.
    z = jnp.asarray([[6.5, 0.0]], jnp.float8_e4m3fn)
    target, std, fixed, fixed_grad = jax.device_get(_standard_and_fixed(x, z))
    zero = target.astype(np.float32) == 0
    first = m[np.flatnonzero(~zero)[-1] + 1]
    assert np.all(zero[m >= first]) and float(first) < numerics.precision_cliff(m.dtype)
    assert np.isnan(float(std[0]))
    assert float(fixed[0]) == 2.0**-9 and float(fixed_grad) == -(2.0**-9)


def test_float8_refused_where_its_math_would_be_float8():
    z = jnp.zeros((2, 3), jnp.float8_e4m3fn)
    labels = jnp.zeros(2, jnp.int32)
    for call in (
        lambda: numerics.stablemax_cross_entropy(z, labels),
        lambda: numerics.zero_sum_cross_entropy(z, labels),
        lambda: numerics.clipped_softmax(z, -0.1),
        lambda: numerics.linear_cross_entropy(z, z.T, labels),
        lambda: numerics.collapse_stats(z, labels),
    ):
        with pytest.raises(TypeError, match="does not take float8"):
            call()
    with pytest.raises(TypeError, match="float8_e4m3fn and float8_e5m2 only"):
        numerics.softmax(jnp.zeros(3, jnp.float8_e4m3fnuz))
    with pytest.raises(TypeError, match="only the OCP float8 formats"):
        testing.as_dtype("float8_e5m2fnuz")
