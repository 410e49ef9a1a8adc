"""Clipped softmax and gated attention as the quant lab uses them (paper eqs. 4 and 5)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numerics
from tasks.quant import QuantModelConfig, quant_model_apply, quant_model_init
from tasks.quant._attention import (
    _draw_length,
    _normal_draw,
    attention,
    gate_init,
    gate_logits,
    identity_tap,
    logit,
    normal_draw,
)
from tests.tasks._compile import FAST_COMPILE

# Rows of the Jacobian per sample, gamma and zeta arguments (not constants): one program for
# the three cases below.
_clipped_jacobian = jax.jit(
    jax.vmap(jax.jacobian(numerics.clipped_softmax), in_axes=(0, None, None))
)


@pytest.mark.parametrize("gamma, zeta", [(-0.03, 1.0), (-0.1, 1.0), (-0.05, 1.03)])
def test_clipped_softmax_exact_zeros_and_zero_gradient_below_threshold(gamma, zeta):
    logits = jnp.asarray(np.random.default_rng(0).normal(0, 2.0, (8, 32)), jnp.float32)
    probs = np.asarray(jax.nn.softmax(logits))
    threshold = -gamma / (zeta - gamma)
    below = probs < threshold
    assert below.any() and (~below).any()
    out = np.asarray(jax.jit(numerics.clipped_softmax)(logits, gamma, zeta))
    assert np.all(out[below] == 0.0)  # exact zeros, not just small
    assert np.all(out[probs > threshold * 1.001] > 0.0)
    # d out_ij / d logits = 0 for every clipped entry (rows of the Jacobian per sample).
    jac = np.asarray(_clipped_jacobian(logits, gamma, zeta))  # (B, K_out, K_in)
    assert np.all(jac[below] == 0.0)
    assert np.any(jac[~below] != 0.0)


def test_clipped_attention_with_alpha_above_one_is_dead_at_uniform_attention():
    """With gamma = -alpha/T and alpha > 1, uniform attention (p = 1/T) is clipped to 0
    everywhere: the output and every gradient through the attention are exactly zero."""
    # _dead_rows' encoder (T = 64, D = 64, 4 heads): the two share its init's program.
    cfg = QuantModelConfig(family="encoder", vocab_size=32, seq_len=64, n_layers=1, d_model=64)
    params = quant_model_init(jax.random.key(0), cfg)
    params = {k: (jnp.zeros_like(v) if k in ("l0.wq", "l0.wk") else v) for k, v in params.items()}
    x = jax.random.normal(jax.random.key(1), (2, 64, 64))
    gamma = jnp.float32(numerics.clipped_softmax_gamma(2.0, 64))

    def attn_sum(p):
        out, probs = attention(p, "l0.", x, 4, "none", gamma, jnp.float32(1.0), None, identity_tap)
        return jnp.sum(jnp.square(out - p["l0.bo"][None, None, :])), probs

    # FAST_COMPILE (tests/tasks/_compile.py): every entry is clipped to 0 at any level.
    vg = jax.jit(jax.value_and_grad(attn_sum, has_aux=True), compiler_options=FAST_COMPILE)
    (value, probs), grads = vg(params)
    assert float(value) == 0.0
    assert np.all(np.asarray(probs) == 0.0)
    for name in ("l0.wq", "l0.wk", "l0.wv", "l0.bq", "l0.bk", "l0.bv"):
        assert np.all(np.asarray(grads[name]) == 0.0), name


def test_vanilla_is_clipped_softmax_with_gamma_zero_bit_for_bit():
    """gamma = 0, zeta = 1 is the plain softmax exactly, so vanilla and clipped share a program."""
    x = jnp.asarray(np.random.default_rng(1).normal(0, 3.0, (4, 2, 9, 9)), jnp.float32)
    causal = jnp.tril(jnp.ones((9, 9), bool))[None, None, :, :]
    for where in (None, causal):
        clipped = numerics.clipped_softmax(x, jnp.float32(0.0), jnp.float32(1.0), where=where)
        plain = numerics.softmax(x, where=where)
        np.testing.assert_array_equal(np.asarray(clipped), np.asarray(plain))
    np.testing.assert_allclose(
        np.asarray(plain), np.asarray(jax.nn.softmax(x, where=causal)), atol=1e-6
    )


# One program per gate and input shape, shared by the pi_init cases (values, not structure).
_gate_pi = jax.jit(
    lambda p, gate, x: jax.nn.sigmoid(gate_logits(p, "l0.", gate, x)), static_argnums=1
)


@pytest.mark.parametrize("gate", ["linear", "mlp", "all_heads"])
@pytest.mark.parametrize("pi_init", [0.25, 0.5, 0.9])
def test_gate_starts_at_pi_init(gate, pi_init):
    d, h = 32, 4
    p = {"l0." + k: v for k, v in gate_init(jax.random.key(0), gate, d, h, 4, pi_init).items()}
    zeros = jnp.zeros((2, 5, d), jnp.float32)
    pi = _gate_pi(p, gate, zeros)
    np.testing.assert_allclose(np.asarray(pi), pi_init, rtol=1e-6)
    # On LayerNorm-scale inputs the N(0, 0.02^2) weights move each gate only slightly.
    x = jax.random.normal(jax.random.key(1), (8, 16, d), jnp.float32)
    pi = np.asarray(_gate_pi(p, gate, x))
    assert pi.shape == (8, 16, h)
    assert abs(pi.mean() - pi_init) < 0.02
    assert np.abs(pi - pi_init).max() < 0.1


def test_gate_bias_is_logit_of_pi_init():
    assert logit(0.5) == 0.0
    assert abs(1 / (1 + np.exp(-logit(0.25))) - 0.25) < 1e-15
    with pytest.raises(ValueError):
        logit(1.0)


# The linear gate's case is the slow tier's: its fast sibling is the tiny gated decoder of
# tests/tasks/test_quant_probe.py, whose two linear gates (pi_init 0.25) it checks the same
# way, and the linear-gated encoder of tests/tasks/test_quant_corpus.py runs its forward pass.
# No `fast_compile` mark: its one program is jitted at FAST_COMPILE, and under the mark the
# init's programs, which the two cases and _dead_rows share, would be compiled under a cache
# key of their own (conftest.py, fast_compile) and again outside it.
@pytest.mark.parametrize(
    "gate", [pytest.param("linear", marks=pytest.mark.slow), "mlp", "all_heads"]
)
def test_gated_model_starts_with_gates_at_pi_init(gate):
    cfg = QuantModelConfig(
        family="encoder", vocab_size=12, seq_len=12, n_layers=2, d_model=16, gate=gate
    )
    params = quant_model_init(jax.random.key(0), cfg, pi_init=0.25)

    def gates_of(p, t):
        gates = []

        def tap(name, x):
            if name.endswith(".gate"):
                gates.append(x)
            return x

        quant_model_apply(p, t, t * 0, cfg, tap=tap)
        return gates

    tokens = jax.random.randint(jax.random.key(1), (4, 12), 0, 12)
    gates = jax.jit(gates_of, compiler_options=FAST_COMPILE)(params, tokens)  # 2 % tolerance
    assert len(gates) == 2
    for g in gates:
        assert g.shape == (4, 12, 4)
        assert abs(float(jnp.mean(g)) - 0.25) < 0.02


def _dead_rows(family: str, gamma: float, qk_scale: float = 1.0) -> np.ndarray:
    """(T,) fraction of dead query rows (every probability clipped to 0) per position at init."""
    cfg = QuantModelConfig(family=family, vocab_size=32, seq_len=64, n_layers=1, d_model=64)
    params = quant_model_init(jax.random.key(0), cfg)
    params |= {k: params[k] * qk_scale for k in ("l0.wq", "l0.wk")}
    tokens = jax.random.randint(jax.random.key(1), (16, 64), 6, 32)
    return np.asarray(_dead_program(cfg, gamma)(params, tokens)).mean(axis=(0, 1))


@functools.cache  # the two encoder calls differ only in the parameters: one program
def _dead_program(cfg: QuantModelConfig, gamma: float):
    # One compiled program, not one per operation, at FAST_COMPILE (tests/tasks/_compile.py):
    # a row is dead when every probability is clipped to exactly 0, at any level.
    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def dead(params, tokens):
        probs = []

        def tap(name, x):
            if name == "l0.probs":
                probs.append(x)
            return x

        quant_model_apply(params, tokens, tokens * 0, cfg, gamma, 1.0, tap)
        return jnp.all(probs[0] == 0, axis=-1)

    return dead


def test_clipped_softmax_rows_are_alive_at_step_0():
    """The fan-in init of q and k makes attention logits unequal at step 0, so BERT's
    clipped(-.025:1) keeps every row alive at T = 64; N(0, 0.02^2) q/k kill every row."""
    assert _dead_rows("encoder", -0.025).max() == 0.0
    assert _dead_rows("encoder", -0.025, qk_scale=0.02 * 8).min() == 1.0  # std 0.02 at D = 64


def test_decoder_clipped_softmax_at_alpha_12_kills_long_rows_only():
    """OPT's gamma = -12/T at T = 64: a row of n keys has a probability >= 1/n, so rows with
    n <= (1 - gamma) / -gamma keys never die; longer rows die where no logit stands out
    (the causal mask shortens rows, which -alpha/T ignores: a lead on OPT's negative result)."""
    gamma = -12 / 64
    dead = _dead_rows("decoder", gamma)
    safe = int((1 - gamma) / -gamma)  # 6 keys
    assert dead[:safe].max() == 0.0
    assert 0.0 < dead[-16:].mean() < 1.0


def test_mlp_gate_has_d_head_over_4_units_fed_its_own_slice():
    cfg = QuantModelConfig(vocab_size=12, seq_len=8, n_layers=1, d_model=128, gate="mlp")
    assert cfg.param_shapes()["l0.gate.w1"] == (4, 32, 8)  # d_head 32 -> 8 hidden units
    p = {"l0." + k: v for k, v in gate_init(jax.random.key(0), "mlp", 128, 4, 8, 0.5).items()}
    x = jax.random.normal(jax.random.key(1), (1, 1, 128))
    jac = jax.jit(jax.jacobian(lambda x: gate_logits(p, "l0.", "mlp", x)))(x)  # (1,1,H,1,1,D)
    jac = np.asarray(jac).reshape(4, 4, 32)  # head, input head slice, dims
    off_diagonal = ~np.eye(4, dtype=bool)
    assert np.all(jac[off_diagonal] == 0.0) and np.all(np.abs(jac[~off_diagonal]).sum(-1) > 0)


# Shapes of 1 to 70,001 values, odd and even, 1-D to 3-D: one value (its own program) and the
# length buckets 4,096, 8,192 and 131,072 (tasks/quant/_attention.py, `normal_draw`), on seeds
# and indices not used elsewhere. The reference draws compile a threefry program per shape, so
# the fast tier checks two: the one value and an odd 3-D shape sliced from the smallest bucket.
@pytest.mark.bitwise
@pytest.mark.parametrize(
    ("seed", "index", "shape"),
    [
        (7, 3, (1, 1)),  # a seed and index where one value drawn alone rounds otherwise
        (77, 4, (3, 5, 7)),
        pytest.param(2024, 5, (2,), marks=pytest.mark.slow),
        pytest.param(9, 6, (17, 33), marks=pytest.mark.slow),
        pytest.param(31, 7, (64, 64), marks=pytest.mark.slow),
        pytest.param(4, 8, (4097,), marks=pytest.mark.slow),
        pytest.param(1, 9, (257, 259), marks=pytest.mark.slow),
        pytest.param(123, 10, (70_001,), marks=pytest.mark.slow),
    ],
)
def test_bucketed_draw_is_the_draw_of_the_shape_bit_for_bit(seed, index, shape):
    """`normal_draw` takes a weight from a longer draw; its values must be those of the
    program that draws the weight's own shape, the init before the buckets (partitionable
    threefry keys each value by its flat index): eagerly, as the lab draws, and inside jit,
    where the slice is part of the program (std is then a constant of the outer program, which
    XLA may fold otherwise than the eager program does, so each is held to its own kind)."""
    key, std = jax.random.key(seed), np.float32(0.02 * (index % 3 + 1))
    eager = normal_draw(key, index, shape, std)
    traced = jax.jit(lambda k, i: normal_draw(k, i, shape, std))(key, index)
    # The draws of the shape itself, one program per shape, as before the buckets.
    want_eager = _normal_draw(key, index, shape, std)
    want_traced = jax.jit(lambda k, i: _normal_draw(k, i, shape, std))(key, index)
    assert isinstance(eager, jax.Array) and eager.shape == shape == traced.shape
    assert eager.dtype == traced.dtype == jnp.float32
    for got, want in ((eager, want_eager), (traced, want_traced)):
        np.testing.assert_array_equal(
            np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32)
        )


def test_weights_up_to_4096_values_share_one_draw_program():
    before = _normal_draw._cache_size()
    key = jax.random.key(8)
    for index, shape in enumerate([(16, 48), (48, 16), (12, 16), (2, 8), (64, 64), (4096,)]):
        normal_draw(key, index, shape, 0.02)
    assert _normal_draw._cache_size() - before <= 1
    assert [_draw_length(n) for n in (2, 4096, 4097, 70_001)] == [4096, 4096, 8192, 131_072]
