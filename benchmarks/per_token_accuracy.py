"""Worst ulp errors of the per-token log_prob and entropy against mpmath, per dtype.

    python benchmarks/per_token_accuracy.py

Inputs: logits [m, 0], label 0, for every finite m (bf16, fp16) or 4,001 margins from -40
to past exponent underflow plus every ulp in a +-512 window around the cliff (fp32,
fp64); rows where e^-|m| is below the dtype's smallest normal are left out (there the
terms flush to 0: docs/lm-losses.md). Fixed functions and their standard twins (under
`jit`), values and gradients (the worst over both entries). tests/numerics/test_per_token.py
asserts the error model's bounds on the same kind of inputs; this prints the maxima.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import numerics
from numerics import oracle, standard

DTYPES = [ml_dtypes.bfloat16, np.float16, np.float32, np.float64]


def _margins(dtype) -> np.ndarray:
    if np.dtype(dtype).itemsize == 2:
        m = oracle.representable_values(dtype)
    else:
        underflow = -np.log(float(ml_dtypes.finfo(dtype).smallest_normal))
        grid = np.linspace(-40.0, 1.05 * underflow, 4001).astype(dtype)
        window = oracle.ulp_window(numerics.precision_cliff(dtype), dtype, 512)
        m = np.unique(np.concatenate([grid, window]))
    tiny = float(ml_dtypes.finfo(np.float32 if dtype != np.float64 else dtype).smallest_normal)
    return m[np.abs(m.astype(np.float64)) < -np.log(tiny)]


def _worst(got, want, dtype) -> float:
    return float(np.nanmax(oracle.ulp_error(np.asarray(got), want, dtype)))


def main() -> None:
    head = ("log_prob", "grad", "std", "std grad", "entropy", "grad", "std", "std grad")
    print(f"{'dtype':<9} {'rows':>6} " + " ".join(f"{h:>9}" for h in head))
    for dtype in DTYPES:
        with jax.enable_x64(np.dtype(dtype) == np.float64):
            m = _margins(dtype)
            z = jnp.asarray(np.stack([m, np.zeros_like(m)], axis=-1))
            y = jnp.zeros(m.shape, jnp.int32)
            lp, h = oracle.log_prob_value_and_grad(z, y), oracle.entropy_value_and_grad(z)
            row = []
            for fixed, naive, exact in (
                (numerics.log_prob, standard.log_prob, lp),
                (numerics.entropy, standard.entropy, h),
            ):
                for fn in (fixed, naive):
                    args = (z, y) if exact is lp else (z,)
                    value, grad = jax.jit(jax.vmap(jax.value_and_grad(fn)))(*args)
                    row += [_worst(value, exact[0], dtype), _worst(grad, exact[1], dtype)]
        name = np.dtype(dtype).name
        print(f"{name:<9} {m.size:>6} " + " ".join(f"{v:>9.3g}" for v in row))


if __name__ == "__main__":
    main()
