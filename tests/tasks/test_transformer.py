"""The 1-layer transformer: the fast forward pass against the plain one, dtypes, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks import (
    ModularTask,
    TransformerConfig,
    build_model,
    modular_split,
    transformer_apply,
    transformer_apply_fast,
    transformer_init,
)
from tests.tiers import BF16_AND_F32

DATA = modular_split(ModularTask())  # a+b mod 31, 480 training examples


def _logits_and_grads(apply, params, tokens, cotangent):
    """Logits and the gradient of sum(logits * cotangent): every logit weighted differently."""
    logits, vjp = jax.vjp(lambda p: apply(p, tokens), params)
    return logits, vjp(cotangent)[0]


def _compare(cfg, dtype, tokens, rtol, atol):
    params = transformer_init(jax.random.key(0), cfg, dtype)
    shape = (tokens.shape[0], cfg.num_classes)
    cot = jnp.asarray(np.random.default_rng(1).standard_normal(shape), dtype)
    run = jax.jit(_logits_and_grads, static_argnums=0)
    plain, g_plain = run(transformer_apply, params, tokens, cot)
    fast, g_fast = run(transformer_apply_fast, params, tokens, cot)
    assert plain.dtype == fast.dtype == dtype and plain.shape == shape
    np.testing.assert_allclose(
        np.asarray(fast, np.float64), np.asarray(plain, np.float64), rtol, atol
    )
    assert set(g_plain) == set(g_fast) == set(params)
    for name in params:
        assert g_fast[name].dtype == dtype
        # In numpy (the same float32 values, exact abs and max): not three eager programs per
        # parameter shape.
        scale = float(np.max(np.abs(np.asarray(g_plain[name], np.float32))))
        np.testing.assert_allclose(
            np.asarray(g_fast[name], np.float64),
            np.asarray(g_plain[name], np.float64),
            rtol=rtol,
            atol=atol * scale,
            err_msg=name,
        )


# Each dtype and each LayerNorm option is in the fast tier once: float64 without LayerNorm,
# float32 with it; the other two pairs are their slow siblings (-m slow).
@pytest.mark.parametrize("layer_norm", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_fast_equals_plain_float64(layer_norm, x64):
    cfg = TransformerConfig(layer_norm=layer_norm)
    _compare(cfg, jnp.float64, jnp.asarray(DATA.x_train), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("layer_norm", [pytest.param(False, marks=pytest.mark.slow), True])
def test_fast_equals_plain_float32(layer_norm):
    cfg = TransformerConfig(layer_norm=layer_norm)
    _compare(cfg, jnp.float32, jnp.asarray(DATA.x_train), rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # Nanda's sizes (p 113, width 128) of the same program: the fast sibling is
def test_fast_equals_plain_nanda_config(x64):  # test_fast_equals_plain_float64[False]
    data = modular_split(ModularTask(p=113, train_fraction=0.3))
    _compare(TransformerConfig.nanda(), jnp.float64, jnp.asarray(data.x_train[:512]), 1e-12, 1e-13)


def test_fast_equals_plain_bfloat16_loosely():
    params = transformer_init(jax.random.key(0), TransformerConfig(), jnp.bfloat16)
    plain = jax.jit(transformer_apply)(params, DATA.x_train)
    fast = jax.jit(transformer_apply_fast)(params, DATA.x_train)
    assert plain.dtype == fast.dtype == jnp.bfloat16
    # Different summation orders in bf16 (8 significant bits): agree to a few bf16 ulps.
    np.testing.assert_allclose(
        np.asarray(fast, np.float32), np.asarray(plain, np.float32), atol=0.1
    )


# float16's case is the slow tier's (tests/tiers.py): the init draws in float32 and casts, the
# path bfloat16's fast case keeps (the dtype, the shapes and the scale checked the same way).
@BF16_AND_F32
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_init_dtypes_and_scale(dtype):
    cfg = TransformerConfig.nanda()
    params = transformer_init(jax.random.key(0), cfg, dtype)
    assert all(x.dtype == dtype for x in params.values())
    assert params["w_q"].shape == (128, 4, 32) and params["w_in"].shape == (128, 512)
    assert params["w_u"].shape == (128, 113) and params["embed"].shape == (114, 128)
    std = float(jnp.std(params["embed"].astype(jnp.float32)))
    assert abs(std - 1 / np.sqrt(128)) < 0.01  # embeddings ~ N(0, 1/d)
    assert "ln1_scale" not in params  # no LayerNorm by default


def test_same_draw_in_every_precision(x64):
    cfg = TransformerConfig()
    p32 = transformer_init(jax.random.key(7), cfg, jnp.float32)
    p64 = transformer_init(jax.random.key(7), cfg, jnp.float64)
    for name in p32:
        np.testing.assert_array_equal(np.asarray(p64[name]), np.asarray(p32[name], np.float64))


def test_float64_needs_x64():
    with pytest.raises(ValueError, match="x64"):
        transformer_init(jax.random.key(0), TransformerConfig(), jnp.float64)


def test_bad_dtype_and_config():
    with pytest.raises(ValueError, match="dtype"):
        transformer_init(jax.random.key(0), TransformerConfig(), jnp.int32)
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="positive"):
        TransformerConfig(d_mlp=0)


def test_bad_tokens():
    params = transformer_init(jax.random.key(0), TransformerConfig(), jnp.float32)
    for apply in (transformer_apply, transformer_apply_fast):
        with pytest.raises(TypeError, match="integers"):
            apply(params, jnp.zeros((2, 3), jnp.float32))
        with pytest.raises(ValueError, match="shape"):
            apply(params, jnp.zeros((2, 4), jnp.int32))
        with pytest.raises(ValueError, match="lie in"):
            apply(params, jnp.full((2, 3), 32, jnp.int32))
        # Tokens closed over by a jitted function are constants: still checked.
        bad = jnp.full((2, 3), -1, jnp.int32)
        with pytest.raises(ValueError, match="lie in"):
            jax.jit(lambda p, bad=bad, apply=apply: apply(p, bad))(params)
    with pytest.raises(ValueError, match="position 2"):
        transformer_apply_fast(params, jnp.zeros((2, 3), jnp.int32))
    with pytest.raises(TypeError, match="array"):
        transformer_apply(params, [[0, 1, 31]])
    mixed = dict(params, w_u=params["w_u"].astype(jnp.bfloat16))
    with pytest.raises(TypeError, match="one dtype"):
        transformer_apply(mixed, DATA.x_train)


def test_build_model_vmaps_over_seeds():
    model = build_model(TransformerConfig())
    assert model.apply is transformer_apply_fast  # the fast pass is the training default
    keys = jax.random.split(jax.random.key(0), 3)
    params = jax.jit(jax.vmap(lambda k: model.init(k, jnp.float32)))(keys)  # one program
    logits = jax.jit(jax.vmap(model.apply, in_axes=(0, None)))(params, DATA.x_train)
    assert logits.shape == (3, 480, 31)
    one = jax.tree.map(lambda x: np.asarray(x)[1], params)  # numpy: no program per shape
    got = jax.jit(model.apply)(one, DATA.x_train)
    np.testing.assert_allclose(np.asarray(logits)[1], got, atol=1e-5)
    assert build_model(TransformerConfig(), fast=False).apply is transformer_apply
