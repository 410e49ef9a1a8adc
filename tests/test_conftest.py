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


class _Item:
    """What conftest.pytest_collection_modifyitems reads of a collected test."""

    def __init__(self, name: str, path: str, *marks: str):
        self.name, self.path, self.marks = name, path, marks

    def get_closest_marker(self, mark: str):
        return mark if mark in self.marks else None


def test_fast_compile_tests_run_last_in_their_file(request):
    # conftest.pytest_collection_modifyitems: their teardown empties the registered caches.
    items = [
        _Item("a1", "a.py", "fast_compile"),
        _Item("a2", "a.py"),
        _Item("a3", "a.py", "fast_compile"),
        _Item("a4", "a.py"),
        _Item("b1", "b.py"),
        _Item("b2", "b.py", "first"),
        _Item("c1", "c.py"),
    ]
    conftest.pytest_collection_modifyitems(items)
    # b.py holds a `first` test, so its file goes first; each file's fast_compile tests last.
    assert [item.name for item in items] == ["b2", "b1", "a2", "a4", "a1", "a3", "c1"]
    # And this session's order (every file's, when the whole suite is collected).
    by_file: dict = {}
    for item in request.session.items:
        by_file.setdefault(item.path, []).append(
            item.get_closest_marker("fast_compile") is not None
        )
    assert all(flags == sorted(flags) for flags in by_file.values())


@BF16_AND_F32
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fast_dtypes_marks_the_other_dtypes_slow(request, dtype):
    slow = request.node.get_closest_marker("slow") is not None
    assert slow == (np.dtype(dtype) in (np.dtype(F16), np.dtype(F64)))
