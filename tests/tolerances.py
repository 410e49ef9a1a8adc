"""One tolerance table, keyed by dtype, in ulps of that dtype (docs/style.md 9).

Errors are |computed - exact| / ulp(exact), with `exact` from `numerics.oracle`
(mpmath at 256 bits, from the inputs exactly as the dtype holds them). A
computed 0 where the exact value is below the dtype's smallest normal counts as
exact: XLA's CPU kernels flush subnormal results to zero.
"""

import jax.numpy as jnp
import numpy as np

BF16, F16, F32, F64 = (
    np.dtype(jnp.bfloat16),
    np.dtype(np.float16),
    np.dtype(np.float32),
    np.dtype(np.float64),
)
DTYPES = (BF16, F16, F32, F64)

# Bounds for inputs whose differences z_j - z_max are exact (the exhaustive
# [m, 0] sweeps and the cliff windows). Each output is a short chain of
# correctly-rounded-or-nearly operations (XLA's exp/log1p are within about 1 ulp;
# 16-bit types evaluate them in f32 and round once), so a few roundings add up.
ULPS = {
    # log1p of a ratio of two sums: a division, a log1p and a final rounding.
    "value": {BF16: 2.0, F16: 2.0, F32: 2.0, F64: 2.0},
    # e^(z_j - z_max) times a per-row scale cotangent / S: exp, one division, one
    # multiply, each up to half an ulp, plus the rounding of S itself.
    "grad": {BF16: 3.0, F16: 3.0, F32: 3.0, F64: 3.0},
    # log_softmax / softmax gradients come from autodiff through the margin form:
    # exp(log q), softplus' derivative, and two products, each rounded.
    "autodiff_grad": {BF16: 4.0, F16: 4.0, F32: 4.0, F64: 4.0},
}


# For general inputs, z_j - z_max is itself rounded (relative error up to 2^-p),
# and exp turns that into a relative error |z_j - z_max| 2^-p of its result:
# between |z_j - z_max| / 2 and |z_j - z_max| ulps, depending on where the result
# sits in its binade. Any implementation working in the dtype inherits it. Sums
# over K terms add about log2(K) roundings (pairwise / blocked accumulation).
def general_bound(kind: str, dtype, exponent_args, num_classes: int) -> np.ndarray:
    """Per-element bound: the table entry plus the conditioning of exp and the sum."""
    dtype = np.dtype(dtype)
    return (
        ULPS[kind][dtype]
        + np.abs(np.asarray(exponent_args, np.float64))
        + np.log2(max(num_classes, 2))
    )
