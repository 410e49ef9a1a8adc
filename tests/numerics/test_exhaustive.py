"""Every finite bf16 and fp16 value m, as logits [m, 0]: fixed CE against mpmath.

Both placements of the target are covered (label 0: margin m; label 1: margin
-m). The standard CE's target gradient must be exactly zero from the precision
cliff on, and the cliff found this way must be `precision_cliff(dtype)`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numerics
from numerics import oracle, standard
from numerics.testing import assert_ulp_close
from tests.tolerances import BF16, F16, ULPS

SIXTEEN_BIT = [BF16, F16]
# The fast tier's sibling of the full sweep: every STRIDE-th value of |m| from 0 (both
# signs), each dtype, with the same bounds; every value is the slow tier's (-m slow).
STRIDE = 16
SWEEPS = [
    pytest.param(dtype, stride, marks=() if stride > 1 else pytest.mark.slow)
    for dtype in SIXTEEN_BIT
    for stride in (STRIDE, 1)
]


def _every(m, stride):
    """m[i] for every i whose distance to the nearer end is a multiple of `stride`: the
    value set stays symmetric about 0 (as `_exact_for_label` needs) and keeps its extremes."""
    i = np.arange(len(m))
    return m[np.minimum(i, len(m) - 1 - i) % stride == 0]


@functools.cache
def _sweep(dtype, stride):
    """(m, logits, fixed loss/grad for labels 0 and 1, oracle for label 0)."""
    m = _every(oracle.representable_values(dtype), stride)
    logits = np.stack([m, np.zeros_like(m)], axis=-1)
    value_and_grad = jax.jit(jax.vmap(jax.value_and_grad(numerics.cross_entropy)))
    fixed = {
        label: value_and_grad(jnp.asarray(logits), jnp.full(m.shape, label, jnp.int32))
        for label in (0, 1)
    }
    exact = oracle.cross_entropy_value_and_grad(logits, np.zeros(m.shape, np.int64))
    return m, logits, fixed, exact


def _exact_for_label(m, exact, label):
    """Oracle (loss, grad) for logits [m, 0] with the given target label."""
    loss, grad = exact
    if label == 0:
        return loss, grad
    # Target second: margin -m. That is label 0 at the value -m with the two
    # entries swapped; the value set is symmetric, so look -m up.
    index = np.searchsorted(m, -m)
    return loss[index], grad[index][:, ::-1]


@pytest.mark.parametrize(("dtype", "stride"), SWEEPS, ids=str)
@pytest.mark.parametrize("label", [0, 1])
def test_fixed_cross_entropy_matches_oracle_on_every_value(dtype, stride, label):
    m, _, fixed, exact = _sweep(dtype, stride)
    loss, grad = fixed[label]
    assert loss.dtype == dtype and grad.dtype == dtype
    exact_loss, exact_grad = _exact_for_label(m, exact, label)
    checks = {
        "loss": (loss, exact_loss, ULPS["value"][dtype]),
        "grad[0]": (grad[:, 0], exact_grad[:, 0], ULPS["grad"][dtype]),
        "grad[1]": (grad[:, 1], exact_grad[:, 1], ULPS["grad"][dtype]),
    }
    for name, (computed, expected, bound) in checks.items():
        assert_ulp_close(computed, expected, bound, dtype, inputs=m, err_msg=name)


@pytest.mark.parametrize(("dtype", "stride"), SWEEPS, ids=str)
def test_fixed_target_gradient_survives_until_underflow(dtype, stride):
    _, _, fixed, exact = _sweep(dtype, stride)
    _, grad = fixed[0]
    tiny = float(jnp.finfo(dtype).smallest_normal)
    representable = np.abs(exact[1][:, 0]) >= tiny
    # Softmax Collapse would zero these; the fixed gradient keeps every one.
    assert np.all(np.asarray(grad[:, 0], np.float64)[representable] < 0)


@pytest.mark.parametrize(("dtype", "stride"), SWEEPS, ids=str)
def test_standard_target_gradient_is_zero_exactly_from_the_cliff(dtype, stride):
    m, logits, _, _ = _sweep(dtype, stride)
    grad = jax.jit(jax.vmap(jax.grad(standard.cross_entropy)))(
        jnp.asarray(logits), jnp.zeros(m.shape, jnp.int32)
    )
    target = np.asarray(grad[:, 0], np.float64)
    positive = m.astype(np.float64) > 0
    zero = (target == 0) & positive
    # The first m from which the target gradient stays exactly 0.
    nonzero_positive = np.flatnonzero(positive & ~zero)
    first = nonzero_positive[-1] + 1
    assert np.all(zero[first:])
    found = float(m[first])
    below = float(m[first - 1])
    cliff = numerics.precision_cliff(dtype)
    assert below < cliff <= found, (below, cliff, found)
    # Meanwhile the non-target gradient stays positive: the sum is no longer 0.
    # (Up to where e^-m itself leaves the normal range.)
    normal = m[first:].astype(np.float64) < -np.log(float(jnp.finfo(dtype).smallest_normal))
    assert np.all(np.asarray(grad[first:, 1], np.float64)[normal] > 0)
