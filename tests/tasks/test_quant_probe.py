"""The probe: one pass that evaluates, calibrates and measures (here on a tiny gated decoder)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks.quant import (
    QuantModelConfig,
    build_corpus,
    lm_loss_sums,
    make_quant_batch,
    make_quant_probe,
    quant_model_apply,
    quant_model_init,
    quant_tap_names,
)


def _setup():
    corpus = build_corpus()
    cfg = QuantModelConfig(
        family="decoder", vocab_size=corpus.vocab_size, seq_len=12, n_layers=2, d_model=16,
        n_heads=2, gate="linear",
    )  # fmt: skip
    params = quant_model_init(jax.random.key(0), cfg, pi_init=0.25)
    batch = make_quant_batch("decoder", corpus.train_ids, np.random.default_rng(0), 4, 12, 0)
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    probe = make_quant_probe(cfg, percentile=99.0)  # with the percentiles: one program
    names = quant_tap_names(cfg)
    masks = jnp.asarray(corpus.delimiter_mask()), jnp.asarray(corpus.special_mask())

    def run(lo, hi, bits, quantize):
        return probe(
            params, batch, gamma=0.0, zeta=1.0, lo=lo, hi=hi, act_bits=bits, quantize=quantize,
            hist_lo=lo, hist_hi=hi, delim_V=masks[0], special_V=masks[1],
        )  # fmt: skip

    zeros = {n: jnp.float32(0) for n in names}
    fp = run(zeros, zeros, jnp.float32(8), jnp.asarray(False))
    return cfg, params, batch, names, run, fp


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_probe_on_a_tiny_gated_decoder():
    """One test, one compile: the float pass, the attention statistics, the quantized pass."""
    setup = _setup()
    _check_float_pass(setup)
    _check_attention_and_gate_statistics(setup)
    _check_quantized_pass_uses_the_static_ranges(setup)
    _check_value_norms(setup)
    _check_percentiles(setup)


@functools.cache  # the value norms and the percentiles share it
def _taps(cfg):
    """The jitted forward pass returning every tap (one compiled program, not one per op)."""

    @jax.jit
    def taps(params, batch):
        seen = {}

        def tap(name, x):
            seen[name] = x
            return x

        quant_model_apply(params, batch["tokens"], batch["segments"], cfg, tap=tap)
        return seen

    return taps


def _check_percentiles(setup):
    """test_percentile_estimator_matches_numpy's checks (its encoder case is the slow tier's)
    on the tiny gated decoder's float pass: the probe's per-batch percentiles are numpy's
    (linear) quantiles of each tap."""
    cfg, params, batch, names, _, fp = setup
    _assert_percentiles_are_numpys(cfg, params, batch, names, fp)


def _assert_percentiles_are_numpys(cfg, params, batch, names, out):
    """The probe's output `out` (made with percentile=99) against numpy's linear quantiles of
    each tap of the float pass; the probe takes everything after the batch by name."""
    with pytest.raises(TypeError):
        make_quant_probe(cfg, percentile=99.0)(params, batch, 0.0, 1.0)
    seen = {n: np.asarray(x, np.float64).ravel() for n, x in _taps(cfg)(params, batch).items()}
    assert set(seen) == set(names)
    for n in names:
        lo, hi = np.quantile(seen[n], [0.01, 0.99])
        assert float(out["plo"][n]) == pytest.approx(lo, rel=1e-4, abs=1e-6), n
        assert float(out["phi"][n]) == pytest.approx(hi, rel=1e-4, abs=1e-6), n
        assert seen[n].min() <= lo <= hi <= seen[n].max()


def _check_float_pass(setup):
    cfg, params, batch, names, _, fp = setup
    logits = jax.jit(lambda p, b: quant_model_apply(p, b["tokens"], b["segments"], cfg))(
        params, batch
    )
    ce, w = jax.jit(lm_loss_sums)(logits, batch["labels"], batch["weights"])
    np.testing.assert_allclose(float(fp["ce_sum"]), float(ce), rtol=1e-5)
    assert float(fp["w_sum"]) == float(w) == 4 * 12
    assert set(fp["min"]) == set(names) and set(fp["inf_norm"]) == set(cfg.metric_taps())
    assert all(float(fp["min"][n]) <= float(fp["max"][n]) for n in names)


def _check_attention_and_gate_statistics(setup):
    cfg, _, _, _, _, fp = setup
    t = cfg.seq_len
    np.testing.assert_array_equal(np.asarray(fp["attn_allowed"]), 4 * t * (t + 1) / 2)
    probs = np.asarray(fp["example_probs"])  # (L, H, T, T)
    assert probs.shape == (2, 2, t, t)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(probs, k=1) == 0.0)  # causal
    assert float(np.asarray(fp["attn_zeros"]).sum()) == 0.0  # softmax: no exact zeros
    # Query 0 sees only [BOS] (special): its whole mass is on special tokens.
    assert np.all(np.asarray(fp["attn_special"]) >= 4 / t - 1e-6)
    np.testing.assert_allclose(np.asarray(fp["gate_mean"]) / 4, 0.25, atol=0.02)
    assert float(np.asarray(fp["token_count"]).sum()) == 4 * t


def _check_value_norms(setup):
    """Each head's value-vector norms, summed over delimiter and over other positions, are
    numpy's on the tapped V(x) (Fig. 2's measure)."""
    cfg, params, batch, _, _, fp = setup
    seen = _taps(cfg)(params, batch)
    delim = np.asarray(build_corpus().delimiter_mask())[np.asarray(batch["tokens"])]  # (B, T)
    assert 0 < delim.sum() < delim.size  # both kinds of position are in the batch
    for i in range(cfg.n_layers):
        v = np.asarray(seen[f"l{i}.v"], np.float64)
        norms = np.linalg.norm(v.reshape(*v.shape[:2], cfg.n_heads, -1), axis=-1)  # (B, T, H)
        np.testing.assert_allclose(fp["value_norm_delim"][i], norms[delim].sum(0), rtol=1e-5)
        np.testing.assert_allclose(fp["value_norm_other"][i], norms[~delim].sum(0), rtol=1e-5)
    assert float(fp["delim_positions"]) == delim.sum()


def _check_quantized_pass_uses_the_static_ranges(setup):
    _, _, _, names, run, fp = setup
    lo = {n: jnp.float32(fp["min"][n]) for n in names}
    hi = {n: jnp.float32(fp["max"][n]) for n in names}
    fine = run(lo, hi, jnp.float32(16), jnp.asarray(True))
    coarse = run(lo, hi, jnp.float32(3), jnp.asarray(True))
    ce = float(fp["ce_sum"])
    assert abs(float(fine["ce_sum"]) - ce) < 1e-3 * ce
    assert abs(float(coarse["ce_sum"]) - ce) > 1e-3 * ce


@pytest.mark.slow  # the encoder's case: its fast sibling is the tiny gated decoder's
def test_percentile_estimator_matches_numpy():  # _check_percentiles, the same checks
    """The probe's per-batch percentiles are numpy's (linear) quantiles of each tap."""
    corpus = build_corpus()
    cfg = QuantModelConfig(
        family="encoder", vocab_size=corpus.vocab_size, seq_len=8, n_layers=1, d_model=8,
        n_heads=2,
    )  # fmt: skip
    params = quant_model_init(jax.random.key(1), cfg)
    batch = make_quant_batch(
        "encoder", corpus.train_ids, np.random.default_rng(1), 2, 8, corpus.vocab_size
    )
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    names = quant_tap_names(cfg)
    zeros = {n: jnp.float32(0) for n in names}
    masks = jnp.asarray(corpus.delimiter_mask()), jnp.asarray(corpus.special_mask())
    out = make_quant_probe(cfg, percentile=99.0)(
        params, batch, gamma=0.0, zeta=1.0, lo=zeros, hi=zeros, act_bits=jnp.float32(8),
        quantize=jnp.asarray(False), hist_lo=zeros, hist_hi=zeros, delim_V=masks[0],
        special_V=masks[1],
    )  # fmt: skip
    _assert_percentiles_are_numpys(cfg, params, batch, names, out)
