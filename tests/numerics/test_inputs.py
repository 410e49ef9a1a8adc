"""Inputs as users pass them: float64 without x64, plain Python lists, and no mpmath at import.

The other numerics tests run with x64 on (conftest.py); these switch it off where they
need JAX's default, and check that it really is off.
"""

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numerics
from numerics import standard

ROOT = pathlib.Path(__file__).resolve().parents[2]

# (name, function of (logits, labels_or_teacher)) for every public array function.
CALLS = [
    ("cross_entropy", lambda z, y, t: numerics.cross_entropy(z, y)),
    ("standard.cross_entropy", lambda z, y, t: standard.cross_entropy(z, y)),
    ("stablemax_cross_entropy", lambda z, y, t: numerics.stablemax_cross_entropy(z, y)),
    ("zero_sum_cross_entropy", lambda z, y, t: numerics.zero_sum_cross_entropy(z, y)),
    ("logit_margin", lambda z, y, t: numerics.logit_margin(z, y)),
    ("log_softmax", lambda z, y, t: numerics.log_softmax(z)),
    ("softmax", lambda z, y, t: numerics.softmax(z)),
    ("standard.log_softmax", lambda z, y, t: standard.log_softmax(z)),
    ("standard.softmax", lambda z, y, t: standard.softmax(z)),
    ("zero_sum_gradient", lambda z, y, t: numerics.zero_sum_gradient(z)),
    ("clipped_softmax", lambda z, y, t: numerics.clipped_softmax(z, gamma=-0.1)),
    ("soft_target", lambda z, y, t: numerics.soft_target_cross_entropy(z, t)),
    ("standard.soft_target", lambda z, y, t: standard.soft_target_cross_entropy(z, t)),
]
IDS = [name for name, _ in CALLS]
LOGITS, LABELS, TEACHER = [[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]], [0, 2], [[3.0, 2.0, 1.0], [0, 1, 0]]


@pytest.fixture
def x64_off():
    with jax.enable_x64(False):
        # The numerics conftest turns x64 on; make sure this test really runs without it.
        assert jax.dtypes.canonicalize_dtype(np.float64) == np.float32
        assert jnp.asarray(1.0).dtype == jnp.float32
        yield


@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=IDS)
def test_float64_without_x64_raises_instead_of_computing_in_float32(call, x64_off):
    z = np.asarray(LOGITS, np.float64)
    with pytest.raises(TypeError, match=r"x64 mode is off.*enable x64"):
        call(z, np.asarray(LABELS), np.asarray(TEACHER, np.float64))


@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=IDS)
def test_float32_and_python_lists_work_without_x64(call, x64_off):
    out = call(LOGITS, LABELS, TEACHER)  # lists take JAX's default dtype: float32 here
    ref = call(jnp.asarray(LOGITS), jnp.asarray(LABELS), jnp.asarray(TEACHER, jnp.float32))
    assert out.dtype == ref.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))


@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=IDS)
def test_python_lists_are_array_likes_with_x64(call):
    out = call(LOGITS, LABELS, TEACHER)  # float64 under x64, as jnp.asarray makes them
    ref = call(np.asarray(LOGITS), np.asarray(LABELS), np.asarray(TEACHER, np.float64))
    assert out.dtype == ref.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))


# slow; fast siblings: test_python_lists_are_array_likes_with_x64[cross_entropy] and
# test_float32_and_python_lists_work_without_x64[cross_entropy] (Python lists as logits and
# labels, the same conversion, against the arrays' result)
@pytest.mark.slow
def test_the_reported_call_works():
    """issue 18: `cross_entropy([1., 2., 3.], 0)` raised numpy's 'Field elements must be ...'."""
    np.testing.assert_allclose(
        float(numerics.cross_entropy([1.0, 2.0, 3.0], 0)),
        float(numerics.cross_entropy(jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray(0))),
    )


@pytest.mark.parametrize(
    "logits, match",
    [("abc", "logits must be an array; got str"), ([[1.0], [2.0, 3.0]], "logits must be an array")],
    ids=["string", "ragged"],
)
def test_non_arrays_raise_our_type_error(logits, match):
    with pytest.raises(TypeError, match=match):
        numerics.cross_entropy(logits, 0)


def test_training_imports_do_not_load_mpmath():
    code = (
        "import sys\n"
        "import grokbench.engine, grokbench.distill, grokbench.experiment, numerics, tasks\n"
        "assert 'mpmath' not in sys.modules, 'mpmath loaded by a training import'\n"
        "numerics.oracle.precision_cliff(24)\n"
        "assert 'mpmath' in sys.modules\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
