"""One jitted pass over a batch that evaluates, calibrates and measures a quant-lab model.

Shape letters: B batch, T positions, D d_model, H heads, V vocabulary, L layers.

`make_quant_probe(cfg)` returns a function of (params, batch, *, ...) that runs the model with a
tap on every quantized tensor. Each tap records its input's min and max (and, when
asked, percentiles or a histogram for the range estimators) and, when `quantize` is
true, passes on the input quantize-dequantized with its static range. The same pass
returns the loss sums and the outlier statistics, so the floating-point evaluation,
calibration and the quantized evaluation share one compiled program per architecture
(gamma, zeta, ranges and bit width are arrays, not constants).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tasks._compiled import compiled_cache
from tasks.quant._fakequant import fake_quant_asymmetric
from tasks.quant._metrics import attention_mass, inf_norm, kurtosis, outlier_mask
from tasks.quant._models import QuantModelConfig, lm_loss_sums, quant_model_apply, quant_model_init


def quant_tap_names(cfg: QuantModelConfig) -> tuple[str, ...]:
    """Every tensor PTQ quantizes in `cfg`'s forward pass, in execution order."""
    return _tap_names(cfg)


@compiled_cache(maxsize=64)  # a traced pass, not a program: cheap to keep
def _tap_names(cfg: QuantModelConfig) -> tuple[str, ...]:
    names: list[str] = []

    def record(name: str, x: jax.Array) -> jax.Array:
        names.append(name)
        return x

    params = jax.eval_shape(lambda: quant_model_init(jax.random.key(0), cfg))
    tokens = jax.ShapeDtypeStruct((1, cfg.seq_len), jnp.int32)
    jax.eval_shape(lambda p, t: quant_model_apply(p, t, t, cfg, tap=record), params, tokens)
    return tuple(names)


def make_quant_probe(cfg: QuantModelConfig, percentile: float | None = None, hist_bins: int = 0):
    """The probe for `cfg`: one jitted program, cached per architecture and estimator options.

    Call as probe(params, batch, *, gamma, zeta, lo, hi, act_bits, quantize, hist_lo,
    hist_hi, delim_V, special_V), everything after the batch by name: lo/hi/hist_lo/hist_hi
    are dicts tap name -> float32 scalar (any values when unused), `act_bits` the activation
    bit width (a float32 scalar), `quantize` a bool scalar (every tap) or a dict tap name ->
    bool scalar (which taps pass on their quantized input), delim_V/special_V the corpus's
    (V,) bool masks of delimiter and special tokens. `percentile` (e.g. 99.99) adds the
    per-batch lower/upper percentiles of each tap; `hist_bins` > 0 adds a histogram over
    [hist_lo, hist_hi].
    """
    return _make_probe(cfg, percentile, hist_bins)


# One program per architecture and estimator options (the quant lab's builds use 9 models).
@compiled_cache(maxsize=32)
def _make_probe(cfg: QuantModelConfig, percentile: float | None, hist_bins: int):
    names = quant_tap_names(cfg)
    metric_names = cfg.metric_taps()

    def probe(
        params, batch, gamma, zeta, lo, hi, act_bits, quantize, hist_lo, hist_hi, delim_V, special_V
    ):
        seen: dict[str, jax.Array] = {}

        def tap(name: str, x: jax.Array) -> jax.Array:
            seen[name] = x
            xq = fake_quant_asymmetric(x, lo[name], hi[name], act_bits)
            return jnp.where(quantize[name] if isinstance(quantize, dict) else quantize, xq, x)

        tokens = batch["tokens"]
        logits = quant_model_apply(
            params, tokens, batch["segments"], cfg, gamma, zeta, tap, batch.get("bos_noise")
        )
        ce_sum, w_sum = lm_loss_sums(logits, batch["labels"], batch["weights"])
        out = {
            "ce_sum": ce_sum,
            "w_sum": w_sum,
            "min": {n: jnp.min(seen[n]) for n in names},
            "max": {n: jnp.max(seen[n]) for n in names},
        }
        if percentile is not None:
            qs = jnp.asarray([1 - percentile / 100, percentile / 100], jnp.float32)
            pct = {n: jnp.quantile(seen[n].ravel(), qs) for n in names}
            out["plo"] = {n: v[0] for n, v in pct.items()}
            out["phi"] = {n: v[1] for n, v in pct.items()}
        if hist_bins:
            out["hist"] = {n: _histogram(seen[n], hist_lo[n], hist_hi[n], hist_bins) for n in names}
        out |= _outlier_stats(cfg, seen, metric_names, tokens, delim_V, special_V)
        return out

    program = jax.jit(probe)

    def by_name(
        params,
        batch,
        *,
        gamma,
        zeta,
        lo,
        hi,
        act_bits,
        quantize,
        hist_lo,
        hist_hi,
        delim_V,
        special_V,
    ):
        # Positional into the jitted program: keyword arguments would enter it sorted by
        # name, reordering its parameters.
        args = (gamma, zeta, lo, hi, act_bits, quantize, hist_lo, hist_hi, delim_V, special_V)
        return program(params, batch, *args)

    return by_name


def _histogram(x: jax.Array, lo: jax.Array, hi: jax.Array, bins: int) -> jax.Array:
    width = jnp.maximum(hi - lo, 1e-12)
    idx = jnp.floor((x.ravel() - lo) / width * bins).astype(jnp.int32)
    return jnp.bincount(jnp.clip(idx, 0, bins - 1), length=bins).astype(jnp.float32)


def _outlier_stats(cfg, seen, metric_names, tokens_BxT, delim_V, special_V) -> dict:
    """Sums over the batch of every outlier statistic (`tasks.quant._metrics`)."""
    v = cfg.vocab_size
    flat_tokens = tokens_BxT.reshape(-1)
    stats: dict = {
        "inf_norm": {n: inf_norm(seen[n]) for n in metric_names},
        # Position 0 ([BOS] / [CLS], the sink) against the rest: sink or residual growth?
        "inf_norm_first": {n: inf_norm(seen[n][:, :1]) for n in metric_names},
        "inf_norm_rest": {n: inf_norm(seen[n][:, 1:]) for n in metric_names},
        "kurtosis": {n: kurtosis(seen[n]) for n in cfg.kurtosis_taps()},
        "token_count": jnp.bincount(flat_tokens, length=v).astype(jnp.float32),
    }
    delim_BxT, special_BxT = delim_V[tokens_BxT], special_V[tokens_BxT]
    dims, toks, mass_d, mass_s, dead, zeros, allowed, gates = [], [], [], [], [], [], [], []
    example_probs, value_d, value_o = [], [], []
    on_delim = delim_BxT.astype(jnp.float32)[:, :, None]  # (B, T, 1)
    for i in range(cfg.n_layers):
        # Each head's value vectors (its slice of V(x)): their L2 norm per position, summed
        # over delimiter/special positions and over the others (Fig. 2: small on delimiters).
        values = seen[f"l{i}.v"].astype(jnp.float32)
        norms = jnp.linalg.norm(values.reshape(*values.shape[:2], cfg.n_heads, -1), axis=-1)
        value_d.append(jnp.sum(norms * on_delim, axis=(0, 1)))
        value_o.append(jnp.sum(norms * (1 - on_delim), axis=(0, 1)))
        mask = outlier_mask(seen[f"l{i}.ffn_out"])  # (B, T, D)
        dims.append(jnp.sum(mask, axis=(0, 1)).astype(jnp.float32))
        per_pos = jnp.sum(mask, axis=2).astype(jnp.float32).reshape(-1)
        toks.append(jax.ops.segment_sum(per_pos, flat_tokens, num_segments=v))
        probs = seen[f"l{i}.probs"]  # (B, H, T, T), the floating-point probabilities
        mass_d.append(jnp.sum(attention_mass(probs, delim_BxT), axis=0))
        mass_s.append(jnp.sum(attention_mass(probs, special_BxT), axis=0))
        dead.append(jnp.sum(jnp.all(probs == 0, axis=3), axis=(0, 2)).astype(jnp.float32))
        if cfg.family == "decoder":
            t = cfg.seq_len
            causal = jnp.tril(jnp.ones((t, t), bool))[None, None, :, :]
        else:
            causal = jnp.ones((1, 1, 1, 1), bool)
        is_zero = (probs == 0) & causal
        zeros.append(jnp.sum(is_zero, axis=(0, 2, 3)).astype(jnp.float32))
        allowed.append(
            jnp.sum(jnp.broadcast_to(causal, probs.shape), axis=(0, 2, 3)).astype(jnp.float32)
        )
        if cfg.gate != "none":
            pi = seen[f"l{i}.gate"]  # (B, T, H), or (B, T, D) for the elementwise gate
            pi = pi.reshape(*pi.shape[:2], cfg.n_heads, -1).mean(axis=-1)  # per head
            gates.append(jnp.sum(jnp.mean(pi, axis=1), axis=0))
        example_probs.append(probs[0])
    stats |= {
        "outlier_dims": jnp.stack(dims),  # (L, D)
        "outlier_tokens": jnp.stack(toks),  # (L, V)
        "attn_delim": jnp.stack(mass_d),  # (L, H), summed over the batch
        "attn_special": jnp.stack(mass_s),
        "attn_dead_rows": jnp.stack(dead),  # (L, H) query rows with every probability 0
        "attn_zeros": jnp.stack(zeros),  # (L, H) exactly-zero probabilities (allowed keys)
        "attn_allowed": jnp.stack(allowed),
        "example_probs": jnp.stack(example_probs),  # (L, H, T, T) of the batch's first sample
        "example_tokens": tokens_BxT[0],
        "value_norm_delim": jnp.stack(value_d),  # (L, H), summed over delimiter positions
        "value_norm_other": jnp.stack(value_o),  # (L, H), summed over the other positions
        "delim_positions": jnp.sum(delim_BxT).astype(jnp.float32),
    }
    if gates:
        stats["gate_mean"] = jnp.stack(gates)  # (L, H), summed over the batch
    return stats
