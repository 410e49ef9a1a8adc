"""The suite's own machinery (conftest.py, tests/conftest.py): the fast_compile marker and
the fast_dtypes tiers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import conftest
from grokbench.runtime import CompileMeter
from tests.tiers import BF16_AND_F32
from tests.tolerances import DTYPES, F16, F64


@jax.jit
def _double(x):
    return x * 2.0


@pytest.mark.fast_compile
def test_fast_compile_turns_most_optimizations_off_for_the_test():
    assert jax.config.values["jax_disable_most_optimizations"]
    assert float(_double(jnp.ones(3, jnp.float32))[0]) == 2.0  # compiled under the flag


def test_a_program_compiled_under_fast_compile_is_not_served_after_it():
    with conftest.fast_compile():  # what the fixture does around a fast_compile test
        assert jax.config.values["jax_disable_most_optimizations"]
        _double(jnp.ones(5, jnp.float32)).block_until_ready()
    assert not jax.config.values["jax_disable_most_optimizations"]
    meter = CompileMeter()
    _double(jnp.ones(5, jnp.float32)).block_until_ready()
    reading = meter.read()
    assert reading["programs"] + reading["cached"] >= 1  # compiled (or loaded) again


def test_fast_compile_tests_run_last_in_their_file(request):
    # conftest.pytest_collection_modifyitems: their teardown empties the registered caches.
    by_file: dict = {}
    for item in request.session.items:
        by_file.setdefault(item.path, []).append(
            item.get_closest_marker("fast_compile") is not None
        )
    assert any(any(flags) for flags in by_file.values())
    assert all(flags == sorted(flags) for flags in by_file.values())


@BF16_AND_F32
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fast_dtypes_marks_the_other_dtypes_slow(request, dtype):
    slow = request.node.get_closest_marker("slow") is not None
    assert slow == (np.dtype(dtype) in (np.dtype(F16), np.dtype(F64)))
