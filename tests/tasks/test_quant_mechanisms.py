"""The mechanisms that let a head do nothing (tasks.quant._attention): each one's defining
property, on random scores with and without the causal mask, forward and backward.

Bounds: the lab's attention runs in float32, u = 2^-24. A softmax weight is e^(x - m) / S:
the subtraction x - m rounds with absolute error u |x - m| (exact when x and m are within a
factor 2), which e^. turns into that relative error; the exp adds 2 u (XLA's float32 exp),
the sum S of at most T + 1 terms (T + 1) u and the division u. So a weight is within
(T + 4 + G) u relative of exact, G the largest gap |x - m| of its row, and the tests ask
for twice that (`_rtol`). Where a property is an identity of the same operations in the
same order the test asks for equality bit for bit.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numerics
from grokbench.quant import QuantConfig
from tasks.quant import QuantModelConfig, quant_model_apply, quant_model_init
from tasks.quant._attention import SOFTPICK_EPS, attention_weights, gate_init, gate_logits
from tests.tasks._compile import FAST_COMPILE

T = 9
RTOL = 2 * (T + 4) * 2**-24  # rows whose gaps stay below 1: module docstring
CAUSAL = jnp.tril(jnp.ones((T, T), bool))[None, None, :, :]
ZERO, ONE = jnp.float32(0.0), jnp.float32(1.0)


def _scores(seed: int = 0, scale: float = 3.0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(0, scale, (3, 2, T, T)), jnp.float32)


def _rtol(x, sink=None) -> float:
    """2 (T + 4 + G) u, G the largest gap to the row max (the sink counted): module docstring."""
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, np.asarray(sink, np.float64)[None, :, None, None])
    return 2 * (T + 4 + float(np.max(m - x))) * 2**-24


def _weights(x, normalizer, mask, sink=None):
    return np.asarray(attention_weights(x, normalizer, ZERO, ONE, mask, sink))


@pytest.mark.parametrize("mask", [None, CAUSAL], ids=["full", "causal"])
def test_a_sink_logit_of_minus_infinity_is_vanilla(mask):
    """e^-inf = 0 adds nothing to the denominator: the softmax over the same keys."""
    x = _scores(1)
    got = _weights(x, "sink", mask, jnp.full((2,), -jnp.inf))
    want = np.asarray(numerics.softmax(x, where=mask))
    np.testing.assert_allclose(got, want, rtol=_rtol(x), atol=0)
    assert np.all(got.sum(-1) > 1 - 1e-6)


@pytest.mark.parametrize("mask", [None, CAUSAL], ids=["full", "causal"])
def test_off_by_one_is_softmax_with_a_zero_logit_appended(mask):
    """softmax_1(x)_i = e^x_i / (1 + sum_j e^x_j): against float64 with a 0 appended, and
    equal to the learned sink at s = 0 bit for bit (numerics.softmax's sink, 0 as a number or
    per head)."""
    x = _scores(2)
    got = _weights(x, "off_by_one", mask)
    x64 = np.asarray(x, np.float64)
    e = np.exp(x64) if mask is None else np.where(np.asarray(CAUSAL), np.exp(x64), 0.0)
    want = e / (1.0 + e.sum(-1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=_rtol(x, np.zeros(2)), atol=1e-30)
    np.testing.assert_array_equal(got, _weights(x, "sink", mask, jnp.zeros((2,))))
    # The mass left over is the zero logit's: a head puts it on nothing.
    np.testing.assert_allclose(got.sum(-1), 1 - 1 / (1 + e.sum(-1)), rtol=_rtol(x, np.zeros(2)))


def test_a_large_sink_logit_lets_a_head_attend_to_nothing():
    """The row's total mass is sum e^x / (e^s + sum e^x) < e^-s sum e^x: a sink 20 above
    the scores' scale leaves the keys almost nothing."""
    x = _scores(3)
    x64 = np.asarray(x, np.float64)
    for s in (0.0, 20.0):
        got = _weights(x, "sink", None, jnp.full((2,), s))
        want = np.exp(x64) / (np.exp(s) + np.exp(x64).sum(-1, keepdims=True))
        np.testing.assert_allclose(got, want, rtol=_rtol(x, np.full(2, s)))
        bound = np.exp(x64).sum(-1) * np.exp(-s)
        assert np.all(got.sum(-1) <= bound * (1 + _rtol(x, np.full(2, s)) * (T + 1)))
    assert got.sum(-1).max() < 1e-3


def test_sink_gradient_is_minus_p_times_p_sink():
    """d p_i / d s = -p_i P_sink, P_sink = e^s / (e^s + sum_j e^x_j): the learned logit's
    gradient, against the closed form in float64."""
    x = _scores(4, 1.0)
    s = jnp.asarray([0.3, -0.7], jnp.float32)
    cot = jnp.asarray(np.random.default_rng(5).normal(size=x.shape), jnp.float32)
    g = jax.jit(  # one program, not one per operation
        jax.grad(lambda s: jnp.sum(cot * attention_weights(x, "sink", ZERO, ONE, None, s)))
    )(s)
    x64, s64 = np.asarray(x, np.float64), np.asarray(s, np.float64)[None, :, None, None]
    denom = np.exp(s64) + np.exp(x64).sum(-1, keepdims=True)
    p, p_sink = np.exp(x64) / denom, np.exp(s64) / denom
    want = np.sum(np.asarray(cot, np.float64) * (-p * p_sink), axis=(0, 2, 3))
    # A sum of 3 * 9 * 9 = 243 terms per head, each within a few u: 243 * 8 u absolute on a
    # sum of magnitudes below sum |cot| p p_sink.
    scale = np.sum(np.abs(np.asarray(cot, np.float64)) * p * p_sink, axis=(0, 2, 3))
    assert np.all(np.abs(np.asarray(g) - want) <= 243 * 8 * 2**-24 * scale + 1e-30)


@pytest.mark.parametrize("mask", [None, CAUSAL], ids=["full", "causal"])
def test_sigmoid_attention_is_independent_sigmoids_with_minus_log_n_bias(mask):
    x = _scores(6)
    got = _weights(x, "sigmoid", mask)
    want = 1 / (1 + np.exp(-(np.asarray(x, np.float64) - math.log(T))))
    if mask is not None:
        want = np.where(np.asarray(CAUSAL), want, 0.0)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-30)
    # Independent: raising one score moves only its own weight.
    bumped = _weights(x.at[0, 0, 4, 2].add(1.0), "sigmoid", mask)
    changed = np.argwhere(bumped != got)
    assert changed.tolist() == [[0, 0, 4, 2]]


@pytest.mark.parametrize("mask", [None, CAUSAL], ids=["full", "causal"])
def test_softpick_is_rectified_and_exact_zero_for_non_positive_scores(mask):
    """softpick(x)_i = relu(e^x_i - 1) / (sum_j |e^x_j - 1| + eps), masked keys left out."""
    x = _scores(7)
    got = _weights(x, "softpick", mask)
    x64 = np.asarray(x, np.float64)
    keep = np.ones(x.shape, bool) if mask is None else np.broadcast_to(np.asarray(CAUSAL), x.shape)
    # The reference computes from x - max, so eps enters as eps e^max: the same here.
    m = np.max(np.where(keep, x64, -np.inf), axis=-1, keepdims=True)
    num = np.where(keep, np.maximum(np.exp(x64) - 1, 0), 0.0)
    den = np.sum(np.where(keep, np.abs(np.exp(x64) - 1), 0.0), -1, keepdims=True)
    want = num / (den + SOFTPICK_EPS * np.exp(m))
    # e^(x - m) - e^-m cancels where x is near 0: absolute error u e^-m relative to the
    # row's scale, u (2 + T) / den after the division.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.all(got[(x64 <= 0) | ~keep] == 0.0)
    assert np.all(got.sum(-1) <= 1 + 1e-6)


def test_softpick_row_of_negative_scores_is_all_zero_with_finite_gradient():
    x = -jnp.abs(_scores(8)) - 0.1

    def f(x):
        return jnp.sum(attention_weights(x, "softpick", ZERO, ONE, CAUSAL))

    assert float(jax.jit(f)(x)) == 0.0  # jitted: one program, not one per operation
    g = np.asarray(jax.jit(jax.grad(f))(x))
    assert np.all(np.isfinite(g))


def test_elementwise_gate_starts_at_pi_init_and_gates_each_entry():
    d, h = 16, 4
    p = {"l0." + k: v for k, v in gate_init(jax.random.key(0), "elementwise", d, h, 4, 0.3).items()}
    zeros = jnp.zeros((2, 5, d), jnp.float32)
    pi = np.asarray(jax.nn.sigmoid(gate_logits(p, "l0.", "elementwise", zeros)))
    assert pi.shape == (2, 5, d)  # one gate per output entry, not per head
    np.testing.assert_allclose(pi, 0.3, rtol=1e-6)


def _family_variant(fast: set[tuple[str, str]]) -> list:
    """Every (family, variant) pair; those not in `fast` in the slow tier."""
    return [
        pytest.param(f, v, marks=() if (f, v) in fast else pytest.mark.slow, id=f"{f}-{v}")
        for f in ("encoder", "decoder")
        for v in (
            "off_by_one",
            "sink",
            "sigmoid",
            "softpick",
            "gated_output",
            "gated",
            "gated_mlp",
            "clipped_gated",
        )
    ]


# The fast tier trains each variant once, in one family or the other (both families are
# there): the variant's code is the same function in both, whose masked (causal) path the
# property tests above check; the other family's pair of each variant runs with -m slow.
_FAST_PAIRS = {
    ("encoder", "sigmoid"),
    ("encoder", "softpick"),
    ("decoder", "off_by_one"),
    ("decoder", "sink"),
    ("decoder", "gated_output"),
    # The paper's two per-head gates and the clipped + gated combination, which no other
    # fast test trains (the quick recipe's tiny run, tests/grokbench/test_quant.py, trains
    # gated_all_heads and, in the slow tier, clipped_gated; the tiny lab vanilla and clipped).
    ("encoder", "gated_mlp"),
    ("decoder", "gated"),
    ("encoder", "clipped_gated"),
}


@pytest.mark.parametrize(("family", "variant"), _family_variant(_FAST_PAIRS))
def test_every_mechanism_trains_a_step_in_both_families(family, variant):
    """Finite logits and gradients, the sink's parameter only for the sink, and the loss
    moving under one gradient step: the smoke test of each variant's training path."""
    qc = QuantConfig(family=family, variant=variant, n_layers=1, d_model=16, n_heads=2, seq_len=8)
    cfg = qc.model_config(12)
    params = quant_model_init(jax.random.key(0), cfg)
    assert ("l0.sink" in params) == (variant == "sink")
    tokens = jax.random.randint(jax.random.key(1), (4, 8), 0, 12)

    def loss(p):
        logits = quant_model_apply(p, tokens, tokens * 0, cfg)
        return jnp.mean(numerics.cross_entropy(logits, tokens))

    # One program for both calls, at FAST_COMPILE (tests/tasks/_compile.py): the traced
    # program, the variant's training path, is the one training runs.
    value_and_grad = jax.jit(jax.value_and_grad(loss), compiler_options=FAST_COMPILE)
    value, grads = value_and_grad(params)
    assert np.isfinite(float(value))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads.values())
    if variant == "sink":
        assert np.any(np.asarray(grads["l0.sink"]) != 0)
    # The step in numpy, float32 (the same two roundings): no eager program per shape.
    stepped = {k: np.asarray(v) - np.float32(0.5) * np.asarray(grads[k]) for k, v in params.items()}
    assert float(value_and_grad(stepped)[0]) < float(value)


def test_unknown_normalizer_and_variant_are_refused():
    with pytest.raises(ValueError, match="normalizer must be one of"):
        QuantModelConfig(normalizer="softmax2")
    from grokbench.config import ConfigError

    with pytest.raises(ConfigError, match="variant must be one of"):
        QuantConfig(variant="sinkhorn")
