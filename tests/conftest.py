"""Shared fixtures; the strict JAX settings live in the root conftest.py."""

import jax
import pytest


@pytest.fixture
def x64():
    """Enable float64 for one test without leaking it into the others."""
    with jax.enable_x64(True):
        yield
