"""fp32 and fp64 (and the 16-bit types): every ulp around each cliff, and margins up to underflow.

Logits [m, 0] with the target first, so the margin is m. The window covers
2 * HALF_WIDTH + 1 consecutive values of m centred on `precision_cliff`; the
dense sweep samples m from -40 to past the point where e^-m leaves the
dtype's normal range.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numerics
from numerics import oracle, standard
from numerics.testing import assert_ulp_close
from tests.tiers import BF16_AND_F32
from tests.tolerances import DTYPES, ULPS

HALF_WIDTH = 4096
DENSE = 4001
# The fast tier's sibling of each sweep, at a sixteenth of the size (the same code, the same
# bounds): the 2 * 256 + 1 ulps around the cliff and 250 margins to underflow. The full
# sizes above are the slow tier's (-m slow).
SIZES = [
    pytest.param(HALF_WIDTH // 16, DENSE // 16, id="small"),
    pytest.param(HALF_WIDTH, DENSE, id="full", marks=pytest.mark.slow),
]


def _margins(dtype, kind, sizes):
    half_width, dense = sizes
    if kind == "window":
        return oracle.ulp_window(numerics.precision_cliff(dtype), dtype, half_width)
    underflow = -np.log(float(jnp.finfo(dtype).smallest_normal))
    return np.unique(np.linspace(-40.0, 1.05 * underflow, dense).astype(dtype))


@functools.cache
def _case(dtype, kind, sizes):
    m = _margins(dtype, kind, sizes)
    logits = np.stack([m, np.zeros_like(m)], axis=-1)
    labels = np.zeros(m.shape, np.int64)
    return m, logits, labels, oracle.cross_entropy_value_and_grad(logits, labels, exact=True)


@BF16_AND_F32
@pytest.mark.parametrize(("half_width", "dense"), SIZES)
@pytest.mark.parametrize("kind", ["window", "dense"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fixed_cross_entropy_near_cliff_and_to_underflow(dtype, kind, half_width, dense):
    with jax.enable_x64(dtype == np.float64):
        m, logits, labels, (exact_loss, exact_grad) = _case(dtype, kind, (half_width, dense))
        loss, grad = jax.jit(jax.vmap(jax.value_and_grad(numerics.cross_entropy)))(
            jnp.asarray(logits), jnp.asarray(labels, jnp.int32)
        )
    assert loss.dtype == dtype and grad.dtype == dtype
    grad_bound = ULPS["grad"][dtype]
    assert_ulp_close(loss, exact_loss, ULPS["value"][dtype], inputs=m, err_msg="loss")
    assert_ulp_close(grad[:, 0], exact_grad[:, 0], grad_bound, inputs=m, err_msg="target grad")
    assert_ulp_close(grad[:, 1], exact_grad[:, 1], grad_bound, inputs=m, err_msg="other grad")


@BF16_AND_F32
@pytest.mark.parametrize(("half_width", "dense"), SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fixed_log_softmax_and_softmax_gradient_in_cliff_window(dtype, half_width, dense):
    with jax.enable_x64(dtype == np.float64):
        m, logits, _, _ = _case(dtype, "window", (half_width, dense))
        x = jnp.asarray(logits)
        log_probs = jax.jit(numerics.log_softmax)(x)
        # Gradient of the dominant probability: q0 (1 - q0) on entry 0, never 1 - 1.
        grad = jax.jit(jax.vmap(jax.grad(lambda z: numerics.softmax(z)[0])))(x)
    exact_log = oracle.log_softmax(logits, exact=True)
    cotangent = np.zeros_like(logits, dtype=np.float64)
    cotangent[:, 0] = 1
    exact_grad = oracle.softmax_vjp(logits, cotangent, exact=True)
    for k in range(2):
        bound = ULPS["value"][dtype]
        assert_ulp_close(log_probs[:, k], exact_log[:, k], bound, inputs=m, err_msg=f"lsm[{k}]")
        bound = ULPS["autodiff_grad"][dtype]
        assert_ulp_close(grad[:, k], exact_grad[:, k], bound, inputs=m, err_msg=f"dq0 / dz{k}")


@BF16_AND_F32
@pytest.mark.parametrize(("half_width", "dense"), SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_standard_collapses_exactly_at_the_cliff(dtype, half_width, dense):
    with jax.enable_x64(dtype == np.float64):
        m, logits, labels, _ = _case(dtype, "window", (half_width, dense))
        grad = jax.jit(jax.vmap(jax.grad(standard.cross_entropy)))(
            jnp.asarray(logits), jnp.asarray(labels, jnp.int32)
        )
    target = np.asarray(grad[:, 0], np.float64)
    first_zero = np.flatnonzero(target != 0)[-1] + 1  # zero from here on
    assert np.all(target[:first_zero] < 0) and np.all(target[first_zero:] == 0)
    # The collapse sits at the cliff to within SLACK ulps of m: exactly for the
    # 16-bit types (f32 arithmetic rounded once), while XLA's f32/f64 exp is not
    # correctly rounded, and e^-m landing an ulp above 2^-p moves the boundary.
    at_cliff = np.searchsorted(m.astype(np.float64), numerics.precision_cliff(dtype))
    slack = 0 if dtype.itemsize == 2 else 8
    assert abs(first_zero - at_cliff) <= slack, (first_zero - at_cliff, float(m[first_zero]))
