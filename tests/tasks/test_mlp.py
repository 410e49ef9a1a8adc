"""The 2-layer one-hot MLP: the row gather equals the one-hot product, dtypes, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks import MLPConfig, ModularTask, build_model, mlp_apply, mlp_init, modular_split
from tests.tiers import BF16_AND_F32

DATA = modular_split(ModularTask(op="a^2+b^2", p=31))


@pytest.mark.parametrize("activation", ["relu", "quadratic"])
def test_matches_one_hot_reference(activation, x64):
    cfg = MLPConfig(p=31, width=50, activation=activation)
    params = mlp_init(jax.random.key(0), cfg, jnp.float64)
    tokens = jnp.asarray(DATA.x_train)
    x = jnp.concatenate(
        [
            jax.nn.one_hot(tokens[:, 0], 31, dtype=jnp.float64),
            jax.nn.one_hot(tokens[:, 1], 31, dtype=jnp.float64),
        ],
        axis=-1,
    )
    pre = x @ params["w_in"]
    h = jax.nn.relu(pre) if activation == "relu" else pre**2
    np.testing.assert_array_equal(mlp_apply(params, tokens, activation), h @ params["w_out"])


# float16's case is the slow tier's (tests/tiers.py): the init draws in float32 and casts, and
# the pass has no float16 branch: bfloat16's fast case keeps the path (the same checks).
@BF16_AND_F32
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_dtypes(dtype):
    model = build_model(MLPConfig(p=31, width=64, activation="quadratic"))
    params = model.init(jax.random.key(0), dtype)
    assert params["w_in"].shape == (62, 64) and params["w_out"].shape == (64, 31)
    # Dtypes and shapes of the trace (`jax.eval_shape`: nothing compiled).
    logits = jax.eval_shape(model.apply, params, DATA.x_train)
    assert logits.dtype == dtype and logits.shape == (480, 31)
    loss = lambda p: jnp.sum(model.apply(p, DATA.x_train)).astype(jnp.float32)  # noqa: E731
    grads = jax.eval_shape(jax.grad(loss), params)
    assert all(g.dtype == dtype for g in grads.values())


def test_doshi_init_scale():
    params = mlp_init(jax.random.key(0), MLPConfig(init="doshi"), jnp.float32)
    for w in params.values():  # Doshi and Gromov's code: std 0.5 / (2 * 500)^(1/3) = 0.05
        assert abs(float(jnp.std(w)) - 0.05) < 0.002
    unit = mlp_init(jax.random.key(0), MLPConfig(), jnp.float32)
    assert abs(float(jnp.std(unit["w_in"])) - 0.5**0.5) < 0.02


def test_default_width_and_errors():
    assert MLPConfig().width == 500 and MLPConfig().p == 97
    with pytest.raises(ValueError, match="activation"):
        MLPConfig(activation="gelu")
    with pytest.raises(ValueError, match="width"):
        MLPConfig(width=0)
    with pytest.raises(ValueError, match="init must be one of unit, doshi"):
        MLPConfig(init="xavier")
    params = mlp_init(jax.random.key(0), MLPConfig(p=31, width=8), jnp.float32)
    with pytest.raises(ValueError, match="activation"):
        mlp_apply(params, DATA.x_train, "tanh")
    with pytest.raises(ValueError, match=r"\[0, 31\)"):
        mlp_apply(params, jnp.asarray([[31, 0, 31]], jnp.int32))
    with pytest.raises(TypeError):
        build_model("mlp")
