"""The numerics tests cover float64, so they run with x64 enabled.

`numerics` never relies on default dtypes (every array carries its own), so
enabling x64 here changes no code path, only which inputs can be built.
"""

import jax
import pytest


@pytest.fixture(autouse=True)
def _x64_for_numerics():
    with jax.enable_x64(True):
        yield
