"""One tolerance table, keyed by dtype, in ulps of that dtype (docs/style.md 9).

Errors are |computed - exact| / ulp(exact), with `exact` from `numerics.oracle`
(mpmath at 256 bits, from the inputs exactly as the dtype holds them). A
computed 0 where the exact value is below the dtype's smallest normal counts as
exact: XLA's CPU kernels flush subnormal results to zero.

The table itself, `ULPS`, and `general_bound` live in `numerics.testing`, whose
public checks (`grokbench audit`) hold users' functions to the same bounds; the
reason for each bound is written there.
"""

from numerics.testing import DTYPES, ULPS, general_bound

BF16, F16, F32, F64 = DTYPES

__all__ = ["BF16", "DTYPES", "F16", "F32", "F64", "ULPS", "general_bound"]
