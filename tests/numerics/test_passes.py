"""How many times the compiled fixed cross-entropy computes e^(z - max) per entry.

A structural check of the optimized HLO (`jax.jit(f).lower(...).compile().as_text()`), not
a timing: in float32 and float64 the gradient reuses the forward pass's exps (one exp over
the (rows, K) logits, as optax), while bf16 logits recompute them in the backward pass
rather than store a float32 array twice their size (docs/numerics.md).
"""

import re

import jax
import jax.numpy as jnp
import pytest

import numerics

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="the layouts were chosen for XLA CPU's fusions"
)


def _full_exps(dtype, shape, mode) -> int:
    """Exponentials over arrays of the logits' full shape in the compiled program."""
    z = jnp.zeros(shape, dtype)
    t = jnp.zeros(shape[:-1], jnp.int32)
    f = jax.jit(mode(lambda z, t: jnp.mean(numerics.cross_entropy(z, t))))
    text = f.lower(z, t).compile().as_text()
    dims = ",".join(str(d) for d in shape)
    return len(re.findall(rf"\[{dims}\]\{{[^}}]*\}} exponential\(", text))


@pytest.mark.parametrize("mode", [jax.grad, jax.value_and_grad], ids=["grad", "value_and_grad"])
@pytest.mark.parametrize("shape", [(64, 4096), (3, 5, 1000)])
def test_float32_computes_each_exp_once(mode, shape):
    assert _full_exps(jnp.float32, shape, mode) == 1


@pytest.mark.parametrize("shape", [(64, 4096), (3, 5, 1000)])
def test_bf16_recomputes_its_exps_instead_of_storing_them(shape):
    # Once in the forward sum, once in the gradient pass.
    assert _full_exps(jnp.bfloat16, shape, jax.grad) == 2


def test_float64_computes_each_exp_once(x64):
    assert _full_exps(jnp.float64, (64, 4096), jax.value_and_grad) == 1
