"""Worst ulp errors of the fixed cross-entropy against mpmath, per dtype.

    python benchmarks/accuracy_report.py

Inputs: logits [m, 0] with the target first, for every finite m (bf16, fp16),
every ulp in a +-4096 window around the cliff, and 4,001 margins from -40 to
past exponent underflow (all four dtypes). The test suite asserts the bounds
of tests/tolerances.py on the same sets; this prints the measured maxima.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import numerics
from numerics import oracle

DTYPES = [ml_dtypes.bfloat16, np.float16, np.float32, np.float64]


def _margins(dtype) -> np.ndarray:
    sets = [oracle.ulp_window(numerics.precision_cliff(dtype), dtype, 4096)]
    underflow = -np.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    sets.append(np.linspace(-40.0, 1.05 * underflow, 4001).astype(dtype))
    if np.dtype(dtype).itemsize == 2:
        sets.append(oracle.representable_values(dtype))
    return np.unique(np.concatenate(sets))


def main() -> None:
    print(f"{'dtype':<9} {'inputs':>7} {'loss':>6} {'grad_t':>7} {'grad_j':>7} {'std grad_t':>11}")
    for dtype in DTYPES:
        with jax.enable_x64(np.dtype(dtype) == np.float64):
            m = _margins(dtype)
            logits = np.stack([m, np.zeros_like(m)], axis=-1)
            labels = np.zeros(m.shape, np.int32)
            fixed = jax.jit(jax.vmap(jax.value_and_grad(numerics.cross_entropy)))
            std = jax.jit(jax.vmap(jax.grad(numerics.standard.cross_entropy)))
            loss, grad = fixed(jnp.asarray(logits), jnp.asarray(labels))
            std_grad = std(jnp.asarray(logits), jnp.asarray(labels))
        exact_loss, exact_grad = oracle.cross_entropy_value_and_grad(logits, labels, exact=True)
        worst = [
            np.nanmax(oracle.ulp_error(c, e, dtype))
            for c, e in [
                (loss, exact_loss),
                (grad[:, 0], exact_grad[:, 0]),
                (grad[:, 1], exact_grad[:, 1]),
                (std_grad[:, 0], exact_grad[:, 0]),
            ]
        ]
        name = np.dtype(dtype).name
        errors = f"{worst[0]:>6.2f} {worst[1]:>7.2f} {worst[2]:>7.2f} {worst[3]:>11.3g}"
        print(f"{name:<9} {len(m):>7} {errors}")


if __name__ == "__main__":
    main()
