"""Deterministic property tests (hypothesis, derandomized): the identities every dtype must keep."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numerics
from numerics import testing
from tests.tiers import FAST_DTYPES
from tests.tolerances import DTYPES

# Few distinct shapes, so JAX compiles each function a handful of times.
PROFILE = settings(derandomize=True, max_examples=40, deadline=None)
SIZES = (1, 2, 3, 7, 31)
# The class counts and dtypes each test draws from: in the fast tier K = 1 and 31 (the single
# class and a long row; the cross-entropy test, which draws K >= 2, K = 31) in bfloat16 and
# float32 (the two paths every fixed function has, tests/tiers.py: 4 programs a function
# instead of 20), every size of SIZES in every dtype in the slow tier (-m slow), a domain that
# holds the fast tier's. The same properties and bounds either way.
SIZE_TIERS = [
    pytest.param((1, 31), FAST_DTYPES, id="few-sizes"),
    pytest.param(SIZES, DTYPES, id="all-sizes", marks=pytest.mark.slow),
]

# Jitted once per shape and dtype: run eagerly, every example compiled each op anew.
_softmax = jax.jit(numerics.softmax)
_log_softmax = jax.jit(numerics.log_softmax)
_ce_value_and_grad = jax.jit(jax.vmap(jax.value_and_grad(numerics.cross_entropy)))


@functools.partial(jax.jit, static_argnames="temperature")
def _soft_target_grad(student, teacher, temperature=1.0):
    def loss(s):
        return numerics.soft_target_cross_entropy(s, teacher, temperature=temperature).sum()

    return jax.grad(loss)(student)


@st.composite
def logits_and_dtype(draw, min_k=1, sizes=SIZES, dtypes=DTYPES):
    dtype = draw(st.sampled_from(dtypes))
    k = draw(st.sampled_from([k for k in sizes if k >= min_k]))
    rows = 2
    scale = draw(st.sampled_from([1e-3, 1.0, 10.0, 60.0]))
    base = draw(hnp.arrays(np.float64, (rows, k), elements=st.floats(-1, 1)))
    return (scale * base).astype(dtype), dtype


def _eps(dtype):
    return float(jnp.finfo(dtype).eps)


@pytest.mark.parametrize(("sizes", "dtypes"), SIZE_TIERS)
@PROFILE
@given(data=st.data())
def test_softmax_rows_sum_to_one_and_log_softmax_is_non_positive(sizes, dtypes, data):
    z, dtype = data.draw(logits_and_dtype(sizes=sizes, dtypes=dtypes))
    with jax.enable_x64(True):
        probs = np.asarray(_softmax(jnp.asarray(z)), np.float64)
        logs = np.asarray(_log_softmax(jnp.asarray(z)), np.float64)
    k = z.shape[-1]
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=4 * k * _eps(dtype))
    assert np.all(logs <= 0)


@pytest.mark.parametrize(("sizes", "dtypes"), SIZE_TIERS)
@PROFILE
@given(data=st.data())
def test_shift_invariance(sizes, dtypes, data):
    z, dtype = data.draw(logits_and_dtype(sizes=sizes, dtypes=dtypes))
    shift = data.draw(st.sampled_from([-7.0, 0.5, 3.0]))
    shifted = (z.astype(np.float64) + shift).astype(dtype)
    # Shifting re-rounds the logits; compare both against their own float64 result.
    with jax.enable_x64(True):
        a = np.asarray(_softmax(jnp.asarray(z)), np.float64)
        b = np.asarray(_softmax(jnp.asarray(shifted)), np.float64)
    tol = 8 * _eps(dtype) * (1 + np.abs(z.astype(np.float64)).max() + abs(shift))
    np.testing.assert_allclose(a, b, atol=tol)


@pytest.mark.parametrize(("sizes", "dtypes"), SIZE_TIERS)
@PROFILE
@given(data=st.data())
def test_cross_entropy_non_negative_and_gradients_sum_to_zero(sizes, dtypes, data):
    # numerics.testing's hard cases: margins to past underflow, ties, 1e4 offsets, -inf.
    dtype = data.draw(st.sampled_from(dtypes))
    z, labels = data.draw(testing.labelled_logits(dtype, sizes=sizes[1:]))
    dtype = z.dtype
    with jax.enable_x64(True):
        loss, grad = _ce_value_and_grad(jnp.asarray(z), jnp.asarray(labels))
    assert np.all(np.asarray(loss, np.float64) >= 0)
    grad = np.asarray(grad, np.float64)
    # Zero within the rounding of the K entries (each below 1 in magnitude).
    np.testing.assert_allclose(grad.sum(-1), 0.0, atol=2 * z.shape[-1] * _eps(dtype))


@pytest.mark.parametrize(("sizes", "dtypes"), SIZE_TIERS)
@PROFILE
@given(data=st.data())
def test_soft_target_gradient_is_exactly_zero_at_the_teacher(sizes, dtypes, data):
    z, _ = data.draw(logits_and_dtype(min_k=2, sizes=sizes, dtypes=dtypes))
    temperature = data.draw(st.sampled_from([1.0, 4.0]))
    with jax.enable_x64(True):
        x = jnp.asarray(z)
        grad = _soft_target_grad(x, x, temperature=temperature)
    assert np.all(np.asarray(grad) == 0), "fixed soft-target CE must be exactly zero"


@pytest.mark.parametrize(("sizes", "dtypes"), SIZE_TIERS)
@PROFILE
@given(data=st.data())
def test_soft_target_gradient_sums_to_zero(sizes, dtypes, data):
    teacher, dtype = data.draw(logits_and_dtype(min_k=2, sizes=sizes, dtypes=dtypes))
    noise = data.draw(hnp.arrays(np.float64, teacher.shape, elements=st.floats(-1, 1)))
    student = (teacher.astype(np.float64) + noise).astype(dtype)
    with jax.enable_x64(True):
        grad = _soft_target_grad(jnp.asarray(student), jnp.asarray(teacher))
    np.testing.assert_allclose(
        np.asarray(grad, np.float64).sum(-1), 0.0, atol=4 * teacher.shape[-1] * _eps(dtype)
    )
