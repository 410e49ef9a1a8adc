"""Deterministic property tests (hypothesis, derandomized): the identities every dtype must keep."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numerics
from tests.tolerances import DTYPES

# Few distinct shapes, so JAX compiles each function a handful of times.
PROFILE = settings(derandomize=True, max_examples=40, deadline=None)
SIZES = (1, 2, 3, 7, 31)


@st.composite
def logits_and_dtype(draw, min_k=1):
    dtype = draw(st.sampled_from(DTYPES))
    k = draw(st.sampled_from([k for k in SIZES if k >= min_k]))
    rows = 2
    scale = draw(st.sampled_from([1e-3, 1.0, 10.0, 60.0]))
    base = draw(hnp.arrays(np.float64, (rows, k), elements=st.floats(-1, 1)))
    return (scale * base).astype(dtype), dtype


def _eps(dtype):
    return float(jnp.finfo(dtype).eps)


@PROFILE
@given(logits_and_dtype())
def test_softmax_rows_sum_to_one_and_log_softmax_is_non_positive(case):
    z, dtype = case
    with jax.enable_x64(True):
        probs = np.asarray(numerics.softmax(jnp.asarray(z)), np.float64)
        logs = np.asarray(numerics.log_softmax(jnp.asarray(z)), np.float64)
    k = z.shape[-1]
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=4 * k * _eps(dtype))
    assert np.all(logs <= 0)


@PROFILE
@given(logits_and_dtype(), st.sampled_from([-7.0, 0.5, 3.0]))
def test_shift_invariance(case, shift):
    z, dtype = case
    shifted = (z.astype(np.float64) + shift).astype(dtype)
    # Shifting re-rounds the logits; compare both against their own float64 result.
    with jax.enable_x64(True):
        a = np.asarray(numerics.softmax(jnp.asarray(z)), np.float64)
        b = np.asarray(numerics.softmax(jnp.asarray(shifted)), np.float64)
    tol = 8 * _eps(dtype) * (1 + np.abs(z.astype(np.float64)).max() + abs(shift))
    np.testing.assert_allclose(a, b, atol=tol)


@PROFILE
@given(logits_and_dtype(min_k=2), st.data())
def test_cross_entropy_non_negative_and_gradients_sum_to_zero(case, data):
    z, dtype = case
    labels = data.draw(hnp.arrays(np.int32, z.shape[:-1], elements=st.integers(0, z.shape[-1] - 1)))
    with jax.enable_x64(True):
        loss, grad = jax.vmap(jax.value_and_grad(numerics.cross_entropy))(
            jnp.asarray(z), jnp.asarray(labels)
        )
    assert np.all(np.asarray(loss, np.float64) >= 0)
    grad = np.asarray(grad, np.float64)
    # Zero within the rounding of the K entries (each below 1 in magnitude).
    np.testing.assert_allclose(grad.sum(-1), 0.0, atol=2 * z.shape[-1] * _eps(dtype))


@PROFILE
@given(logits_and_dtype(min_k=2), st.sampled_from([1.0, 4.0]))
def test_soft_target_gradient_is_exactly_zero_at_the_teacher(case, temperature):
    z, _ = case
    with jax.enable_x64(True):
        x = jnp.asarray(z)
        grad = jax.grad(
            lambda s: numerics.soft_target_cross_entropy(s, x, temperature=temperature).sum()
        )(x)
    assert np.all(np.asarray(grad) == 0), "fixed soft-target CE must be exactly zero"


@PROFILE
@given(logits_and_dtype(min_k=2), st.data())
def test_soft_target_gradient_sums_to_zero(case, data):
    teacher, dtype = case
    noise = data.draw(hnp.arrays(np.float64, teacher.shape, elements=st.floats(-1, 1)))
    student = (teacher.astype(np.float64) + noise).astype(dtype)
    with jax.enable_x64(True):
        grad = jax.grad(
            lambda s: numerics.soft_target_cross_entropy(s, jnp.asarray(teacher)).sum()
        )(jnp.asarray(student))
    np.testing.assert_allclose(
        np.asarray(grad, np.float64).sum(-1), 0.0, atol=4 * teacher.shape[-1] * _eps(dtype)
    )
