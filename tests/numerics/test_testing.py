"""`numerics.testing`: the checks pass the lab's fixed functions and catch the known bugs.

Each check runs with quick=True here (about a second per dtype); the full sizes run in
`grokbench audit` and the slow CLI test.
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numerics
from numerics import standard, testing
from tests._docs import documented_constants
from tests.tolerances import BF16, DTYPES, F32


def test_every_public_name_is_documented():
    documented = documented_constants(testing)
    for name in testing.__all__:
        obj = getattr(testing, name)
        assert (callable(obj) and obj.__doc__) or name in documented, name


def _no_max_shift(logits, labels):
    # The textbook formula: exp of the raw logits overflows for large ones.
    log_z = jnp.log(jnp.sum(jnp.exp(logits), axis=-1))
    return log_z - jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]


# The slow tier's (-m slow): its fast siblings are check_cross_entropy's doctest
# (numerics/_check_cross_entropy.py: the same call, bf16, assert_ok()) and, for float32,
# tests/grokbench/test_audit_cli.py::test_fixed_cross_entropy_passes (the same call, fp32,
# quick, through the CLI: PASS, no failure, the gradient never 0).
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [BF16, F32], ids=str)
def test_fixed_cross_entropy_passes(dtype):
    result = testing.check_cross_entropy(numerics.cross_entropy, dtype, quick=True)
    result.assert_ok()
    assert result.grad_dies_at is None and result.value_zero_at is None
    assert result.nan_propagates and result.nonfinite_rows == 0
    assert result.output_dtype == dtype.name


# slow; fast sibling: tests/grokbench/test_audit_cli.py::test_optax_names_the_fp32_cliff (the
# same check of optax, fp32, quick: the cliff at 16.635532 and the first FAIL line)
@pytest.mark.slow
def test_optax_collapses_at_the_fp32_cliff():
    fn = optax.softmax_cross_entropy_with_integer_labels
    result = testing.check_cross_entropy(fn, "fp32", quick=True)
    assert not result.ok
    cliff = numerics.precision_cliff(F32)
    # The first fp32 margin at or past the cliff (XLA's f32 exp may move it by an ulp or two).
    assert abs(result.grad_dies_at - cliff) <= 8 * np.spacing(np.float32(cliff))
    assert result.value_zero_at < result.grad_dies_at  # the loss rounds to 0 earlier
    first = result.failures[0]
    assert first.startswith("float32 target gradient: exactly 0 from m=16.6355")
    assert "precision cliff 16.6355" in first
    with pytest.raises(AssertionError, match=r"exactly 0 from m=16\.6355"):
        result.assert_ok()


# slow; fast sibling: tests/grokbench/test_audit_cli.py::test_missing_max_shift_fails_with_
# overflow_not_a_traceback (this check on the same function, fp16: the overflow failure line)
@pytest.mark.slow
def test_missing_max_shift_is_reported_as_overflow():
    result = testing.check_cross_entropy(_no_max_shift, "fp32", quick=True)
    assert result.nonfinite_rows > 0
    overflow = [line for line in result.failures if "overflow" in line]
    assert overflow and "overflowed past log(max float32) = 88.72" in overflow[0]


# slow; fast siblings: check_soft_target_cross_entropy's doctest (numerics/_check_soft_target.py:
# this check of the standard formula in fp32, its zero_at_teacher False, the same programs as
# the second half here) and the fixed soft-target's fp32 cases in tests/numerics/
# test_random_oracle.py (its gradient against mpmath at the teacher's distance 0 and 1e-6)
@pytest.mark.slow
def test_soft_target_zero_at_the_teacher():
    fixed = testing.check_soft_target_cross_entropy(
        numerics.soft_target_cross_entropy, "fp32", quick=True
    )
    fixed.assert_ok()
    assert fixed.zero_at_teacher
    std = testing.check_soft_target_cross_entropy(
        standard.soft_target_cross_entropy, "fp32", quick=True
    )
    assert std.zero_at_teacher is False
    assert any(line.startswith("float32 -inf logits: loss is nan") for line in std.failures)
    assert any("student = teacher" in line for line in std.failures)


# slow; fast siblings: the doctests of numerics/_check_normalizers.py, the same check
# (`_check_normalizer`) on 16-bit and float32 rows: check_log_softmax's (jax.nn.log_softmax's
# collapse found at fp16's cliff), check_softmax's (numerics.softmax passing, fp32) and
# check_sink_softmax's (numerics.softmax passing, bf16)
@pytest.mark.slow
def test_normalizers_collapse_where_jax_nn_does():
    numerics_result = testing.check_log_softmax(numerics.log_softmax, BF16, quick=True)
    numerics_result.assert_ok()
    softmax = testing.check_softmax(jax.nn.softmax, BF16, quick=True)
    assert softmax.grad_dies_at == 5.5625 and softmax.value_zero_at is None


# The slow tier's (-m slow): its fast sibling is check_log_softmax's doctest
# (numerics/_check_normalizers.py), the same check of jax.nn.log_softmax finding its
# collapse at fp16's cliff.
@pytest.mark.slow
def test_log_softmax_collapses_where_jax_nn_does():
    jax_result = testing.check_log_softmax(jax.nn.log_softmax, BF16, quick=True)
    assert jax_result.value_zero_at == jax_result.grad_dies_at == 5.5625


@pytest.mark.fast_compile  # a smoke test: NaN found, errors raised (conftest.py, _fast_compile)
def test_nan_swallowed_and_bad_signatures():
    def nan_to_num(logits, labels):
        return numerics.cross_entropy(jnp.nan_to_num(logits), labels)

    result = testing.check_cross_entropy(nan_to_num, "bf16", quick=True)
    assert not result.nan_propagates and any("NaN" in line for line in result.failures)

    def raises(logits, labels):
        raise RuntimeError("kaboom")

    with pytest.raises(testing.SignatureError, match="raised RuntimeError: kaboom"):
        testing.check_cross_entropy(raises, "fp32")
    with pytest.raises(testing.SignatureError, match=r"returned shape \(\)"):
        testing.check_cross_entropy(lambda z, t: jnp.mean(z), "fp32")
    with pytest.raises(TypeError, match="expected bf16, fp16, fp32 or fp64"):
        testing.check_softmax(jax.nn.softmax, "float8")
    # Every check refuses a function that raises on plain input, before its sweep.
    for check in testing.CHECKS.values():
        with pytest.raises(testing.SignatureError, match="raised RuntimeError: kaboom"):
            check(lambda *a, **k: raises(None, None), "fp32")


def test_assert_ulp_close_says_where_and_by_how_much():
    testing.assert_ulp_close(np.float32([1.0, 2.0]), [1.0, 2.0 + 2.4e-7], 2)
    testing.assert_ulp_close(np.float32([np.nan, -np.inf]), [np.nan, -np.inf], 0)
    with pytest.raises(AssertionError, match=r"worst 4194.30 ulps > 2 at index \(1,\) \(input 7"):
        testing.assert_ulp_close(np.float32([1, 2]), [1, 2.001], 2, inputs=[0, 7])
    with pytest.raises(AssertionError, match="non-finite"):
        testing.assert_ulp_close(np.float32([np.inf]), [1.0], 100)


@settings(derandomize=True, max_examples=20, deadline=None)
@given(st.sampled_from(DTYPES).flatmap(lambda d: testing.student_teacher(d, sizes=(3, 10))))
def test_student_teacher_strategy(pair):
    student, teacher = pair
    assert student.shape == teacher.shape and student.dtype == teacher.dtype
    assert np.isfinite(teacher.astype(np.float64)).all()


@settings(derandomize=True, max_examples=10, deadline=None)
@given(testing.masked_logits("fp32", sizes=(10,)))
def test_masked_strategy_hides_a_larger_logit(case):
    logits, labels, where = case
    assert (~where).sum(-1).tolist() == [3, 3]
    assert where[np.arange(2), labels].all()
    # The masked entries sit above every kept one: ignoring `where` changes the loss.
    kept_max = np.where(where, logits, -np.inf).max(-1)
    assert (np.where(where, -np.inf, logits).max(-1) > kept_max).all()


def test_strategies_without_hypothesis_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install 'grokbench\[testing\]'"):
        testing.logits("fp32")


def test_import_numerics_stays_light():
    check = "import sys, numerics; assert not {'numerics.testing', 'hypothesis'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", check], check=True)
