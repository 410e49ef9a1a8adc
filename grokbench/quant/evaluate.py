"""Evaluation of a trained quant-lab model: perplexity, outlier metrics and simulated PTQ.

Floating point: perplexity exp(mean cross-entropy) over fixed validation batches (MLM:
the masked positions; causal LM: every position), and the outlier statistics of
`tasks.quant._metrics` on the same batches.

PTQ (the paper's setup): weights symmetric per-tensor (min-max or MSE grid search),
every matrix but the head; activations asymmetric per-tensor at every tap of
`tasks.quant.quant_tap_names` with static ranges from `calib_batches` training batches
(running min-max with momentum 0.9, or per-batch percentiles with the same running
average, or MSE on a histogram). Calibration runs the weight-quantized model with float
activations. Repeated on `calib_subsets` random subsets of the training data; the
perplexity is reported as mean and standard deviation (ddof = 0) over the subsets.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from grokbench.quant.config import QuantConfig, parse_bit_list, parse_bits
from grokbench.quant.train import add_bos_noise, train_batches
from grokbench.store import Store
from tasks.quant import (
    Corpus,
    QuantModelConfig,
    make_quant_probe,
    mse_range,
    quant_eval_batches,
    quant_tap_names,
    quantize_weights,
    running_minmax,
    weight_names,
)

__all__ = []  # package-internal: only other harness modules use these names

_HIST_BINS = 1024  # histogram resolution of the MSE activation estimator
_EVAL_SEED = 1234  # masks of the fixed validation batches


def _weight_method(cfg: QuantConfig, w_bits: int) -> str:
    """'auto': the paper's choice, min-max for BERT and MSE for OPT at 8 bits, MSE below."""
    if cfg.weight_range != "auto":
        return cfg.weight_range
    if w_bits < 8:
        return "mse"  # Table 10 uses MSE weight ranges for W6 and W4
    return "minmax" if cfg.family == "encoder" else "mse"


class _Runner:
    """Holds the probe, the masks and the placeholder ranges of one model."""

    def __init__(self, cfg: QuantConfig, model: QuantModelConfig, corpus: Corpus) -> None:
        self.cfg, self.model, self.corpus = cfg, model, corpus
        pct = cfg.percentile if cfg.act_range == "percentile" else None
        self.probe = make_quant_probe(model, pct, 0)
        self.names = quant_tap_names(model)
        self.zeros = {n: jnp.float32(0) for n in self.names}
        self.delim = jnp.asarray(corpus.delimiter_mask())
        self.special = jnp.asarray(corpus.special_mask())
        self.gamma = jnp.float32(cfg.resolved("gamma"))
        self.zeta = jnp.float32(cfg.resolved("zeta"))

    def run(self, params, batch, lo=None, hi=None, act_bits=8, quantize=False, probe=None):
        probe = self.probe if probe is None else probe
        lo = self.zeros if lo is None else lo
        hi = self.zeros if hi is None else hi
        out = probe(
            params,
            {k: jnp.asarray(v) for k, v in batch.items()},
            gamma=self.gamma,
            zeta=self.zeta,
            lo=lo,
            hi=hi,
            act_bits=jnp.float32(act_bits),
            quantize=_flags(quantize, self.names),
            hist_lo=lo,
            hist_hi=hi,
            delim_V=self.delim,
            special_V=self.special,
        )
        return jax.device_get(out)  # one transfer, not one sync per statistic

    def perplexity(
        self, params, batches, lo=None, hi=None, act_bits=8, quantize: bool | dict = False
    ) -> float:
        ce = w = 0.0
        for batch in batches:
            out = self.run(params, batch, lo, hi, act_bits, quantize)
            ce += float(out["ce_sum"])
            w += float(out["w_sum"])
        return float(np.exp(ce / w))

    def calibrate(self, params, batches, act_bits: int) -> tuple[dict, dict]:
        """Static activation ranges (lo, hi) per tap from the calibration batches."""
        outs = [self.run(params, b) for b in batches]
        cfg = self.cfg
        key_lo, key_hi = ("plo", "phi") if cfg.act_range == "percentile" else ("min", "max")
        lo, hi = {}, {}
        for n in self.names:
            rows = np.array([[float(o[key_lo][n]), float(o[key_hi][n])] for o in outs])
            lo[n], hi[n] = running_minmax(rows, cfg.momentum)
        if cfg.act_range == "mse":
            # Histograms over each tap's full observed range, then the MSE-optimal range.
            full_lo = {n: jnp.float32(min(float(o["min"][n]) for o in outs)) for n in self.names}
            full_hi = {n: jnp.float32(max(float(o["max"][n]) for o in outs)) for n in self.names}
            probe = make_quant_probe(self.model, None, _HIST_BINS)
            hist = {n: np.zeros(_HIST_BINS) for n in self.names}
            for b in batches:
                out = jax.device_get(
                    probe(
                        params,
                        {k: jnp.asarray(v) for k, v in b.items()},
                        gamma=self.gamma,
                        zeta=self.zeta,
                        lo=self.zeros,
                        hi=self.zeros,
                        act_bits=jnp.float32(act_bits),
                        quantize=jnp.asarray(False),
                        hist_lo=full_lo,
                        hist_hi=full_hi,
                        delim_V=self.delim,
                        special_V=self.special,
                    )
                )
                for n in self.names:
                    hist[n] += np.asarray(out["hist"][n])
            for n in self.names:
                lo[n], hi[n] = mse_range(hist[n], float(full_lo[n]), float(full_hi[n]), act_bits)
        return (
            {n: jnp.float32(v) for n, v in lo.items()},
            {n: jnp.float32(v) for n, v in hi.items()},
        )


def _flags(quantize: bool | dict, names: tuple[str, ...]) -> dict:
    """Per-tap quantize flags: one for every tap (a dict of them is one pytree shape, so a
    run with every tap on and one with a single tap on share one compiled probe)."""
    if not isinstance(quantize, dict):
        quantize = dict.fromkeys(names, quantize)
    unknown = set(quantize) - set(names)
    if unknown:
        raise ValueError(f"no such quantized taps: {', '.join(sorted(unknown))}")
    return {n: jnp.asarray(bool(quantize.get(n, False))) for n in names}


def _fp_statistics(runner: _Runner, params: dict, batches: list) -> tuple[dict, dict]:
    """Perplexity and outlier statistics of the float model: (summary fields, arrays)."""
    model, corpus = runner.model, runner.corpus
    ce = w = 0.0
    inf: dict[str, list] = {n: [] for n in model.metric_taps()}
    first: dict[str, list] = {n: [] for n in model.metric_taps()}
    rest: dict[str, list] = {n: [] for n in model.metric_taps()}
    kurt: dict[str, list] = {n: [] for n in model.kurtosis_taps()}
    sums: dict[str, np.ndarray] = {}
    example = None
    for batch in batches:
        out = runner.run(params, batch)
        ce += float(out["ce_sum"])
        w += float(out["w_sum"])
        for n in inf:
            inf[n].extend(np.asarray(out["inf_norm"][n]).tolist())
            first[n].extend(np.asarray(out["inf_norm_first"][n]).tolist())
            rest[n].extend(np.asarray(out["inf_norm_rest"][n]).tolist())
        for n in kurt:
            kurt[n].extend(np.asarray(out["kurtosis"][n]).tolist())
        for key in (
            "outlier_dims",
            "outlier_tokens",
            "token_count",
            "attn_delim",
            "attn_special",
            "attn_dead_rows",
            "attn_zeros",
            "attn_allowed",
            "gate_mean",
            "value_norm_delim",
            "value_norm_other",
            "delim_positions",
        ):
            if key in out:
                sums[key] = sums.get(key, 0) + np.asarray(out[key], np.float64)
        if example is None:
            example = (np.asarray(out["example_probs"]), np.asarray(out["example_tokens"]))
    n_samples = len(batches) * len(batches[0]["tokens"])
    n_queries = n_samples * model.seq_len
    inf_avg = {n: float(np.mean(v)) for n, v in inf.items()}
    kurt_avg = {n: float(np.mean(v)) for n, v in kurt.items()}
    delim_attn = sums["attn_delim"] / n_samples  # (L, H) mean mass on delimiter/special keys
    special_attn = sums["attn_special"] / n_samples
    tokens = sums["token_count"]
    delim_v = corpus.delimiter_mask()
    out_tok = sums["outlier_tokens"]  # (L, V)
    total_out = out_tok.sum(axis=1)
    on_delim = out_tok[:, delim_v].sum(axis=1)
    dims = sums["outlier_dims"]  # (L, D)
    names = corpus.token_names()
    fields = {
        "fp_perplexity": float(np.exp(ce / w)),
        "max_inf_norm": max(inf_avg[n] for n in model.max_inf_norm_taps()),
        "avg_kurtosis": float(np.mean(list(kurt_avg.values()))),
        "max_kurtosis": max(kurt_avg.values()),
        "inf_norm_by_tensor": inf_avg,
        # The same per-sample inf-norm over position 0 ([BOS]/[CLS]) only and over the rest.
        "inf_norm_first_position_by_tensor": {n: float(np.mean(v)) for n, v in first.items()},
        "inf_norm_other_positions_by_tensor": {n: float(np.mean(v)) for n, v in rest.items()},
        "special_attention_by_layer": [float(x) for x in special_attn.mean(axis=1)],
        # Each layer's mean head mass on delimiters and special tokens (the sink when it is
        # a delimiter, as '.' and [SEP] in BERT) and its largest head's.
        "delimiter_attention_by_layer": [float(x) for x in delim_attn.mean(axis=1)],
        "max_head_delimiter_attention_by_layer": [float(x) for x in delim_attn.max(axis=1)],
        "kurtosis_by_tensor": kurt_avg,
        "outliers_per_token_position": float(total_out.sum() / tokens.sum()),
        "outlier_share_on_delimiters": [
            float(d / t) if t else None for d, t in zip(on_delim, total_out, strict=True)
        ],
        "delimiter_share_of_tokens": float(tokens[delim_v].sum() / tokens.sum()),
        "top_outlier_dims": [[int(i) for i in np.argsort(-row)[:3] if row[i] > 0] for row in dims],
        "top_outlier_tokens": [
            [names[int(i)] for i in np.argsort(-row)[:5] if row[i] > 0] for row in out_tok
        ],
        "max_head_delimiter_attention": float(delim_attn.max()),
        "max_head_special_attention": float(special_attn.max()),
        "attention_zero_fraction": float(sums["attn_zeros"].sum() / sums["attn_allowed"].sum()),
        "dead_attention_rows": float(sums["attn_dead_rows"].sum() / (n_queries * delim_attn.size)),
    }
    fields |= _parking_head_values(sums, delim_attn, n_queries)
    if "gate_mean" in sums:
        fields["gate_mean"] = float((sums["gate_mean"] / n_samples).mean())
        fields["gate_min_head"] = float((sums["gate_mean"] / n_samples).min())
    arrays = {
        "outlier_dims": dims,
        "outlier_tokens": out_tok,
        "token_count": tokens,
        "delimiter_attention": delim_attn,
        "special_attention": special_attn,
        "example_probs": example[0],
        "example_tokens": example[1],
        "token_names": np.array(corpus.token_names()),
    }
    return fields, arrays


def _parking_head_values(sums: dict, delim_attn: np.ndarray, n_positions: int) -> dict:
    """Fig. 2's values: in each layer's parking head (its largest mean attention mass on
    delimiter and special keys) and in the model's, the mean L2 norm of the head's value
    vectors on delimiter and special tokens over their mean on the other tokens."""
    n_delim = float(sums["delim_positions"])
    if n_delim == 0 or n_delim == n_positions:
        return {
            "delimiter_value_ratio_by_layer": None,
            "parking_head": None,
            "parking_head_value_ratio": None,
        }
    ratio = (sums["value_norm_delim"] / n_delim) / (
        sums["value_norm_other"] / (n_positions - n_delim)
    )  # (L, H)
    heads = delim_attn.argmax(axis=1)
    layer, head = np.unravel_index(int(delim_attn.argmax()), delim_attn.shape)
    return {
        "delimiter_value_ratio_by_layer": [float(ratio[i, h]) for i, h in enumerate(heads)],
        "parking_head": [int(layer), int(head)],
        "parking_head_value_ratio": float(ratio[layer, head]),
    }


def _runner_and_batches(cfg: QuantConfig, corpus: Corpus) -> tuple[_Runner, list[dict]]:
    """The probe runner of `cfg`'s architecture and its fixed validation batches."""
    runner = _Runner(cfg, cfg.model_config(corpus.vocab_size), corpus)
    val = quant_eval_batches(
        cfg.family,
        corpus.val_ids,
        cfg.eval_batches,
        cfg.batch_size,
        cfg.seq_len,
        corpus.vocab_size,
        _EVAL_SEED,
    )
    return runner, add_bos_noise(cfg, val, np.random.default_rng([_EVAL_SEED, 2]))


def _calibration_batches(cfg: QuantConfig, corpus: Corpus, subset: int) -> list[dict]:
    """Calibration subset `subset`: `calib_batches` training batches from its own stream."""
    return train_batches(
        cfg,
        corpus,
        np.random.default_rng([cfg.seed, 100 + subset]),
        cfg.calib_batches,
        np.random.default_rng([cfg.seed, 200 + subset]),
    )


def _eval_dir(store: Store, cfg: QuantConfig) -> pathlib.Path:
    return store.root / "quant" / "eval" / cfg.eval_hash()


def _load_evaluation(store: Store, cfg: QuantConfig) -> dict | None:
    """The stored evaluation summary of `cfg`, or None (missing or damaged)."""
    record = store.read_record(_eval_dir(store, cfg), cfg.eval_dict(), ("analysis",))
    return None if record is None else record[0]


def evaluate(cfg: QuantConfig, params: dict, corpus: Corpus, store: Store) -> dict:
    """FP and PTQ evaluation of `cfg`'s trained `params` (or the stored result); the summary's
    `analysis` names the record's analysis.npz (per-layer arrays for the figures)."""
    cached = _load_evaluation(store, cfg)
    if cached is not None:
        return cached
    start = time.perf_counter()
    runner, val = _runner_and_batches(cfg, corpus)
    fields, arrays = _fp_statistics(runner, params, val)
    bit_configs = parse_bit_list(cfg.bits)  # QuantConfig checked every entry
    weights: dict[tuple[int, str], dict] = {}
    ranges: dict[tuple, tuple[dict, dict]] = {}
    for name in bit_configs:
        w_bits, a_bits = parse_bits(name)
        method = _weight_method(cfg, w_bits)
        if (w_bits, method) not in weights:
            weights[(w_bits, method)] = quantize_weights(
                params, tuple(weight_names(params)), w_bits, method
            )
        q_params = weights[(w_bits, method)]
        runs = []
        for subset in range(cfg.calib_subsets):
            key = (w_bits, method, subset, a_bits if cfg.act_range == "mse" else None)
            if key not in ranges:
                calib = _calibration_batches(cfg, corpus, subset)
                ranges[key] = runner.calibrate(q_params, calib, a_bits)
            lo, hi = ranges[key]
            runs.append(runner.perplexity(q_params, val, lo, hi, a_bits, quantize=True))
        col = name.lower() + "_perplexity"
        fields[col] = float(np.mean(runs))
        fields[col + "_std"] = float(np.std(runs))
        fields[col + "_runs"] = runs
        fields[col + "_weight_range"] = method
    run_dir = _eval_dir(store, cfg)
    summary = {
        "family": cfg.family,
        "variant": cfg.variant,
        **fields,
        "eval_seconds": time.perf_counter() - start,
        "analysis": str((run_dir / "analysis.npz").resolve()),  # for figures from any cwd
    }
    store.write_record(run_dir, cfg.eval_dict(), {"analysis": arrays}, summary)
    return {**summary, "config": cfg.eval_dict()}


def tap_costs(cfg: QuantConfig, params: dict, corpus: Corpus, bits: str = "W8A8") -> dict:
    """Which quantized tensor costs the perplexity: PTQ at `bits` with one tap quantized, and
    with every tap but one, against the weights-only model.

    The weights and the activation ranges are `evaluate`'s for calibration subset 0, so
    "every tap" is that subset's perplexity in the table. Returns {"bits", "fp_perplexity",
    "weights_only_perplexity", "all_taps_perplexity", "taps": [{"tap", "lo", "hi",
    "only_this", "all_but_this"}]} with perplexities, taps in execution order. Not cached:
    2 x (number of taps) evaluation passes, seconds at the recipe's size.
    """
    w_bits, a_bits = parse_bits(bits)
    runner, val = _runner_and_batches(cfg, corpus)
    q_params = quantize_weights(
        params, tuple(weight_names(params)), w_bits, _weight_method(cfg, w_bits)
    )
    lo, hi = runner.calibrate(q_params, _calibration_batches(cfg, corpus, 0), a_bits)

    def ppl(on: dict) -> float:
        return runner.perplexity(q_params, val, lo, hi, a_bits, quantize=on)

    everything = dict.fromkeys(runner.names, True)
    taps = [
        {
            "tap": n,
            "lo": float(lo[n]),
            "hi": float(hi[n]),
            "only_this": ppl({n: True}),
            "all_but_this": ppl({**everything, n: False}),
        }
        for n in runner.names
    ]
    return {
        "family": cfg.family,
        "variant": cfg.variant,
        "bits": bits.upper(),
        "fp_perplexity": runner.perplexity(params, val),
        "weights_only_perplexity": ppl({}),
        "all_taps_perplexity": ppl(everything),
        "taps": taps,
    }
