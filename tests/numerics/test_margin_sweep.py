"""Fixed softmax and log_softmax against mpmath over the whole margin range, every dtype.

The cliff windows (test_cliff_windows.py) look at every ulp around `precision_cliff`;
this sweep looks everywhere else: logits [m, 0] with m on a grid from -40 to past
exponent underflow plus margins drawn uniformly from [-8, 8], where e^-m is of order 1
and a rounding of 1 + e^-m or an exp of a rounded log shows most. Values of both
entries and the vector-Jacobian product with the cotangent [1, 0] are held to the
table (`ULPS['value']`, `ULPS['autodiff_grad']`), and the gradients must sum to zero.
Random rows (K = 10, planted margins from -10 to 40) add the conditioning of
`general_bound`. One jit per dtype and function.
"""

import functools
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import numerics
from numerics import oracle
from numerics._check_tolerances import finite_gaps, weighted_gap
from numerics.testing import assert_ulp_close
from tests.tolerances import DTYPES, ULPS, general_bound

FUNCTIONS = {
    "log_softmax": (numerics.log_softmax, oracle.log_softmax, oracle.log_softmax_vjp),
    "softmax": (numerics.softmax, oracle.softmax, oracle.softmax_vjp),
}


def _half(parity):
    """(dtype, name) pairs: those with (dtype index + name index) % 2 == parity in the fast
    tier, the others in the slow (-m slow). The sweep takes parity 0 and the random rows
    parity 1, so every dtype and function meets one of the two in the fast tier, and each
    test meets every dtype and every function there."""
    return [
        pytest.param(dtype, name, marks=() if (d + f) % 2 == parity else pytest.mark.slow)
        for d, dtype in enumerate(DTYPES)
        for f, name in enumerate(FUNCTIONS)
    ]


def _value_and_vjp(fn):
    def run(x, cotangent):
        out, vjp = jax.vjp(fn, x)
        return out, vjp(cotangent)[0]

    return jax.jit(run)


@functools.cache
def _sweep(dtype, name):
    """(m, logits, computed value and VJP, exact value and VJP) on logits [m, 0]."""
    underflow = -math.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    grid = np.linspace(-40.0, 1.05 * underflow, 1001)
    drawn = np.random.default_rng(0).uniform(-8.0, 8.0, 1000)
    m = np.unique(np.concatenate([grid, drawn]).astype(dtype))
    fn, exact_fn, exact_vjp = FUNCTIONS[name]
    x = np.stack([m, np.zeros_like(m)], -1)
    cotangent = np.broadcast_to(np.array([1, 0], dtype), x.shape)
    out, grad = _value_and_vjp(fn)(jnp.asarray(x), jnp.asarray(cotangent))
    assert out.dtype == dtype and grad.dtype == dtype
    exact = exact_fn(x, exact=True), exact_vjp(x, cotangent, exact=True)
    return m, (out, grad), exact


@pytest.mark.parametrize(("dtype", "name"), _half(0), ids=str)
def test_margin_sweep_within_the_table(dtype, name):
    m, computed, exact = _sweep(dtype, name)
    for (what, bound), got, want in zip(
        ((name, ULPS["value"][dtype]), (f"d {name}[0] / dx", ULPS["autodiff_grad"][dtype])),
        computed,
        exact,
        strict=True,
    ):
        for k in range(2):
            assert_ulp_close(got[:, k], want[:, k], bound, inputs=m, err_msg=f"{what}[{k}]")
    # [m, 0] with m != 0: the max entry's gradient is minus the other's, bit for bit.
    g = np.asarray(computed[1], np.float64)
    np.testing.assert_array_equal(g[m != 0, 0], -g[m != 0, 1])


def _planted_rows(dtype, count=32, k=10):
    rng = np.random.default_rng(1)
    z = rng.standard_normal((count, k))
    top = rng.integers(k, size=count)
    rows = np.arange(count)
    others = np.where(np.arange(k) == top[:, None], -np.inf, z)
    lse = np.log(np.sum(np.exp(others), -1))
    z[rows, top] = lse + rng.uniform(-10.0, 40.0, count)
    return z.astype(dtype)


@pytest.mark.parametrize(("dtype", "name"), _half(1), ids=str)
def test_random_rows_within_the_general_bound(dtype, name):
    fn, exact_fn, exact_vjp = FUNCTIONS[name]
    x = _planted_rows(dtype)
    k = x.shape[-1]
    is_max = np.arange(k) == np.argmax(x, -1)[:, None]
    cotangent = is_max.astype(dtype)
    out, grad = _value_and_vjp(fn)(jnp.asarray(x), jnp.asarray(cotangent))
    gaps = finite_gaps(x)
    # Each e^(z_k - z_max) carries the rounding of its gap; the max entry's, and every
    # log-probability's, normaliser carries their weighted mean (`weighted_gap`).
    mean_gap = np.broadcast_to(weighted_gap(gaps, is_max)[:, None], gaps.shape)
    conditioning = gaps if name == "softmax" else mean_gap
    value_bound = general_bound("value", dtype, conditioning, k)
    assert_ulp_close(out, exact_fn(x, exact=True), value_bound, dtype, err_msg=name)
    grad_bound = general_bound("autodiff_grad", dtype, np.where(is_max, mean_gap, gaps), k)
    exact_grad = exact_vjp(x, cotangent, exact=True)
    assert_ulp_close(grad, exact_grad, grad_bound, dtype, err_msg=f"d {name}")
    g = np.asarray(grad, np.float64)
    eps = float(ml_dtypes.finfo(dtype).eps)
    assert np.all(np.abs(g.sum(-1)) <= ULPS["autodiff_grad"][dtype] * eps * np.abs(g).sum(-1))
