"""KL, reverse KL and Jensen-Shannon divergences: exactly 0 at the teacher, accurate near it.

The default tests compare one jitted batch per dtype with mpmath under the bounds that
`numerics.testing` derives (`_check_divergence.sensitivity`); the full checks of
`numerics.testing`, per dtype and divergence, run in the slow suite.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import numerics
from numerics import oracle, standard, testing
from numerics._check_divergence import gradient_scale, sensitivity
from numerics._check_tolerances import conditioned_bound, errors_in_ulps_of, finite_gaps
from tests.tiers import BF16_AND_F32
from tests.tolerances import BF16, DTYPES, ULPS

FORMS = {
    "kl": numerics.kl_divergence,
    "reverse_kl": numerics.reverse_kl_divergence,
    "js": numerics.js_divergence,
}
STANDARD = {
    "kl": standard.kl_divergence,
    "reverse_kl": standard.reverse_kl_divergence,
    "js": standard.js_divergence,
}


@jax.jit
def _all(student, teacher):
    """(values, student gradients) of the three divergences, one program per dtype."""
    return {
        name: (fn(student, teacher), jax.grad(lambda s, f=fn: f(s, teacher).sum())(student))
        for name, fn in FORMS.items()
    }


def _batch(dtype):
    """Teacher rows and students at distances 0, 1e-6, 1e-3, 1e-1 and 1, K = 7."""
    rng = np.random.default_rng(11)
    teacher = np.repeat(rng.standard_normal((3, 1, 7)) * [[[1.0]], [[3.0]], [[0.1]]], 5, 1)
    distances = np.array([0.0, 1e-6, 1e-3, 1e-1, 1.0])[None, :, None]
    student = teacher + distances * rng.standard_normal(teacher.shape)
    return student.reshape(-1, 7).astype(dtype), teacher.reshape(-1, 7).astype(dtype)


@BF16_AND_F32
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values_and_gradients_against_mpmath(dtype):
    student, teacher = _batch(dtype)
    with jax.enable_x64(dtype == np.float64):
        got = jax.device_get(_all(student, teacher))
    gaps = np.maximum(finite_gaps(student), finite_gaps(teacher))
    for form, (value, grad) in got.items():
        assert value.dtype == dtype and grad.dtype == dtype
        exact, exact_grad = oracle.divergence_value_and_grad(student, teacher, form, exact=True)
        c, kappa = sensitivity(student, teacher, form, exact)
        bound = conditioned_bound(ULPS["value"][dtype], gaps.max(-1), 7) + np.log2(7) + kappa
        testing.assert_ulp_close(value, exact, bound, err_msg=f"{form} value")
        # Student == teacher: exactly 0, value and gradient, in every dtype.
        assert not np.any(value[::5].astype(np.float64)) and not np.any(grad[::5])
        # Gradients in ulps of the terms they are formed from, as numerics.testing holds them.
        scale = gradient_scale(student, teacher, form, exact)
        err = errors_in_ulps_of(grad, exact_grad, scale, dtype)
        grad_bound = conditioned_bound(ULPS["grad"][dtype], gaps, 7) + 2 * np.log2(7) + c
        assert np.all(err <= grad_bound), (form, float(np.max(err - grad_bound)))


@jax.jit
def _masked(z, where, pad):
    """Per form: value and both gradients at student == teacher, axis 1, T = 4, masked;
    and the values of a padded batch."""
    out = {}
    for form, fn in FORMS.items():
        call = functools.partial(fn, axis=1, temperature=4.0)
        out[form] = (
            jax.value_and_grad(lambda s, t, f=call: f(s, t, where=where).sum(), (0, 1))(z, z),
            call(z + 1, z, where=pad),
        )
    return out


def test_exact_zero_under_temperature_masks_and_axes():
    z = jnp.asarray(np.random.default_rng(0).standard_normal((2, 5, 3)), BF16)
    where = jnp.asarray(np.random.default_rng(1).random((2, 5, 3)) > 0.3)
    pad = where.at[0].set(False)  # a padding row: every entry masked out
    for form, ((value, grads), padded) in jax.device_get(_masked(z, where, pad)).items():
        assert value == 0 and not np.any(grads[0]) and not np.any(grads[1]), form
        # The padding row gives 0 (and gradient 0), never NaN.
        assert padded.shape == (2, 3) and not np.any(padded[0]) and np.all(np.isfinite(padded))


def test_finite_where_a_teacher_probability_is_zero():
    teacher = jnp.array([[0.0, -jnp.inf, 1.0], [0.0, -200.0, 1.0]])  # p = 0; p underflows
    student = jnp.array([[0.5, 0.0, 0.2], [0.5, 0.0, 0.2]])
    got = jax.device_get(_all(student, teacher))
    for form, (value, grad) in got.items():
        exact, exact_grad = oracle.divergence_value_and_grad(student, teacher, form)
        rows = slice(None)
        if form == "reverse_kl":  # KL(q || p) is +inf where p = 0 < q, exactly
            assert np.isinf(value[0]) and np.isinf(exact[0])
            rows = slice(1, None)  # (and its gradient is then undefined)
        np.testing.assert_allclose(value[rows], exact[rows], rtol=1e-6)
        assert np.all(np.isfinite(grad[rows])), form
        np.testing.assert_allclose(grad[rows], exact_grad[rows], rtol=1e-5, atol=1e-7)
    # The peers' Jensen-Shannon formula turns the teacher's -inf logit into 0 * -inf = NaN.
    assert np.isnan(float(jax.jit(standard.js_divergence)(student, teacher)[0]))


def _naive(form):
    """The textbook formula: accurate far from the teacher in float64."""

    def f(s, t):
        log_q, log_p = jax.nn.log_softmax(s), jax.nn.log_softmax(t)
        p, q = jnp.exp(log_p), jnp.exp(log_q)
        if form == "kl":
            return jnp.sum(p * (log_p - log_q))
        if form == "reverse_kl":
            return jnp.sum(q * (log_q - log_p))
        log_m = jnp.log((p + q) / 2)
        return jnp.sum(p * (log_p - log_m) + q * (log_q - log_m)) / 2

    return f


@jax.jit
def _derivatives(s, t):
    """Both gradients of ours and of the naive formulas, and JS's student Hessian (the
    others' second derivatives come from autodiff of their gradients alike)."""
    out = {}
    for form, fn in FORMS.items():
        ours = lambda s, t, f=fn: f(s, t).sum()  # noqa: E731
        for name, f in (("ours", ours), ("naive", _naive(form))):
            hessian = jax.hessian(f)(s, t) if form == "js" else None
            out[form, name] = (*jax.grad(f, (0, 1))(s, t), hessian)
    return out


@pytest.mark.fast_compile  # two paths that must agree (conftest.py, _fast_compile)
def test_teacher_gradient_and_second_derivatives(x64):
    s, t = np.random.default_rng(3).standard_normal((2, 4, 6))
    got = jax.device_get(_derivatives(s, t))
    for form in FORMS:
        for a, b in zip(got[form, "ours"][:2], got[form, "naive"][:2], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got["js", "ours"][2], got["js", "naive"][2], atol=1e-9)


@jax.jit
def _peers(s, t):
    return (
        (
            standard.kl_divergence(s, t),
            optax.kl_divergence(jax.nn.log_softmax(s), jax.nn.softmax(t)),
        ),
        (
            standard.reverse_kl_divergence(s, t),
            optax.losses.kl_divergence_with_log_targets(
                jax.nn.log_softmax(t), jax.nn.log_softmax(s)
            ),
        ),
        (standard.kl_divergence(t, t), standard.js_divergence(t, t)),
        jax.grad(lambda z: standard.kl_divergence(z, t).sum())(t),
    )


def test_standard_reproduces_the_peers_and_their_residual():
    student, teacher = _batch(BF16)
    kl, reverse_kl, at_teacher, grad = jax.device_get(_peers(student, teacher))
    assert np.array_equal(*kl) and np.array_equal(*reverse_kl)
    # At student == teacher the peers' formulas leave a residual, value and gradient.
    assert max(np.abs(v.astype(np.float64)).max() for v in at_teacher) > 0
    assert np.abs(grad.astype(np.float64)).max() > 0


# slow; fast sibling: check_kl_divergence's doctest (numerics/_check_divergence.py: this
# check of numerics.kl_divergence, fp32, quick, the same programs; its `.ok` is True, and a
# value or gradient not exactly 0 at the teacher is a failure, so zero_at_teacher holds too).
@pytest.mark.slow
def test_audit_style_check_passes_ours():
    ours = testing.check_kl_divergence(numerics.kl_divergence, "fp32", quick=True)
    ours.assert_ok()
    assert ours.zero_at_teacher


def test_audit_style_check_fails_the_naive_kl():
    naive = testing.check_kl_divergence(standard.kl_divergence, "fp32", quick=True)
    assert not naive.ok and naive.zero_at_teacher is False
    assert any("student = teacher" in line for line in naive.failures)
    assert any(line.startswith("float32 value:") for line in naive.failures)


def test_bad_input_raises_clearly():
    z = jnp.zeros((2, 3))
    for fn in FORMS.values():
        with pytest.raises(ValueError, match="same shape"):
            fn(z, jnp.zeros((2, 4)))
        with pytest.raises(TypeError, match="same dtype"):
            fn(z, z.astype(BF16))
        with pytest.raises(TypeError, match="floating-point"):
            fn(jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 3), jnp.int32))
        with pytest.raises(ValueError, match="temperature"):
            fn(z, z, temperature=0.0)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["kl", "reverse-kl", "js"])
def test_full_checks_pass(kind, dtype):
    fn = FORMS[kind.replace("-", "_")]
    result = testing.CHECKS[kind](fn, dtype)
    result.assert_ok()
    assert result.zero_at_teacher and result.nan_propagates


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["kl", "reverse-kl", "js"])
def test_full_checks_fail_the_standard_formulas(kind, dtype):
    result = testing.CHECKS[kind](STANDARD[kind.replace("-", "_")], dtype, quick=True)
    assert not result.ok and result.zero_at_teacher is False
