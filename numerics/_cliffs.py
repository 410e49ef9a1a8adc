"""Precision cliffs, the first zero of a function of the margin, and the Adam margin equilibrium."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax.numpy as jnp
import ml_dtypes
import numpy as np


def _float_dtype(dtype) -> np.dtype:
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"expected a floating-point dtype; got {dtype!r}.") from None
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"expected a floating-point dtype; got {dtype}.")
    return dtype


def bits_type(dtype) -> type:
    """The unsigned integer type of `dtype`'s bit patterns: positive floats order like
    their bit patterns, so consecutive patterns are consecutive representable values."""
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]


def to_bits(x, dtype) -> int:
    """The bit pattern of `x` rounded to `dtype`, as a Python int."""
    return int(np.array(x, dtype).view(bits_type(dtype)))


def from_bits(bits: int, dtype) -> float:
    """The `dtype` value whose bit pattern is `bits`, as a Python float."""
    return float(np.array(int(bits), bits_type(dtype)).view(dtype))


def precision_cliff(dtype) -> float:
    """Margin past which `1 + exp(-m)` rounds to exactly 1 in `dtype`.

    With p significand bits (stored mantissa plus the implicit one), the spacing
    of floats just above 1 is 2^(1-p); round-to-nearest-even sends 1 + x back to
    1 for every x <= 2^-p, a tie included. So the standard softmax's target
    probability collapses to 1 once e^-m <= 2^-p, that is for

        m >= c_d = p ln 2.

    Derived from the format itself (`ml_dtypes.finfo(dtype).nmant`), so it holds
    for any float dtype.

    Example:
      >>> round(precision_cliff(jnp.bfloat16), 3), round(precision_cliff("float32"), 3)
      (5.545, 16.636)

    Args:
      dtype: anything `numpy.dtype` accepts: `jnp.bfloat16`, `"float16"`, ...

    Returns:
      c_d as a Python float (bf16 5.545, fp16 7.625, fp32 16.636, fp64 36.737; float8
      e4m3fn 2.773, e5m2 2.079).
    """
    dtype = _float_dtype(dtype)
    significand_bits = ml_dtypes.finfo(dtype).nmant + 1
    return significand_bits * math.log(2.0)


def equilibrium_margin(eps: float) -> float:
    """Margin m*(eps) = log(1/eps) where Adam's eps balances weight decay.

    After memorisation |g| ~ e^-m; once |g| << eps the normalised step g/(|g|+eps)
    shrinks like e^-m/eps, and weight decay holds the margin at log(1/eps)
    (paper section 5). eps = 0 has no equilibrium: returns +inf.

    Example:
      >>> round(equilibrium_margin(1e-8), 2)
      18.42

    Args:
      eps: Adam's epsilon, >= 0.

    Returns:
      log(1/eps) as a Python float.
    """
    eps = float(eps)
    if not eps >= 0.0:
        raise ValueError(f"eps must be >= 0; got {eps}.")
    return math.inf if eps == 0.0 else -math.log(eps)


def first_zero(fn: Callable, lo: float, hi: float, dtype) -> float:
    """Smallest m of `dtype` in (lo, hi] with fn(m) == 0, by bisection on bit patterns.

    For 0 <= lo < hi with fn(lo) != 0 and fn(hi) == 0, and fn zero from its first zero
    on (as a gradient that underflows or collapses past a cliff): positive floats order
    like their bit patterns, so about as many calls as the dtype has bits find the
    exact representable threshold.

    Example:
      >>> first_zero(lambda m: m[0] < 3.0, 0.0, 10.0, "float32")  # 30 calls
      3.0

    Args:
      fn: called with a 1-element NumPy array of `dtype`; its result compares with 0.
      lo: where fn is not 0, >= 0.
      hi: where fn is 0.
      dtype: the float dtype whose values are searched.

    Returns:
      The first zero as a Python float.
    """
    dtype = _float_dtype(dtype)
    if not 0.0 <= lo < hi:
        raise ValueError(f"need 0 <= lo < hi; got lo={lo}, hi={hi}.")
    low, high = to_bits(lo, dtype), to_bits(hi, dtype)
    while high - low > 1:
        mid = (low + high) // 2
        if fn(np.array([mid], bits_type(dtype)).view(dtype)) == 0:
            high = mid
        else:
            low = mid
    return from_bits(high, dtype)
