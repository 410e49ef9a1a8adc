"""The default tier's share of a dtype-parametrized test (CONTRIBUTING.md, "Running the tests").

    @BF16_AND_F32
    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_...(dtype): ...

runs the bfloat16 and float32 cases by default and the float16 and float64 ones with
`-m slow` (tests/conftest.py marks them). The two kept are the two paths every fixed
function has: a 16-bit input computed in float32 inside, and a native one. float16 shares
bfloat16's path with another exponent range; float64 shares float32's with another precision.
A test about float16 or float64 itself (its overflow, its x64 handling) keeps its own cases.
"""

import pytest

from tests.tolerances import BF16, F32

FAST_DTYPES = (BF16, F32)
"""The default tier's dtypes (a family with a designed cover spreads its cases over them)."""

BF16_AND_F32 = pytest.mark.fast_dtypes(*FAST_DTYPES)
