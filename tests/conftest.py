"""Shared fixtures; the strict JAX settings live in the root conftest.py."""

import jax
import numpy as np
import pytest


@pytest.fixture
def x64():
    """Enable float64 for one test without leaking it into the others."""
    with jax.enable_x64(True):
        yield


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by `-m "not slow"`
def pytest_collection_modifyitems(items):
    """`@pytest.mark.fast_dtypes(*dtypes)`: a case of the test whose `dtype` parameter is not
    one of `dtypes` is marked slow. The default tier then runs the test in those dtypes only
    (bfloat16 and float32: the 16-bit path, which computes in float32 inside, and the native
    one), and `-m slow` runs the other dtypes, so CI still runs every case (CONTRIBUTING.md,
    "Running the tests")."""
    for item in items:
        marker = item.get_closest_marker("fast_dtypes")
        params = getattr(item, "callspec", None)
        if marker is None or params is None or "dtype" not in params.params:
            continue
        if np.dtype(params.params["dtype"]) not in {np.dtype(d) for d in marker.args}:
            item.add_marker(pytest.mark.slow)
