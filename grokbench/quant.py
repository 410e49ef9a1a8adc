"""The quantization lab (Bondarenko et al. 2023): train the attention variants, measure, PTQ.

`run_quant(quick, out, overrides)` trains (cached) every variant of the encoder and the
decoder, evaluates floating-point perplexity and the outlier metrics, simulates W8A8,
W6A8, W4A8 and W6A6 post-training quantization, and writes OUT/quant_table.json and
OUT/quant_table.md (the paper's Table 2 layout, plus the low-bit columns of its Table 10).
`figures.quant.draw_quant_figures` draws the figures from the same stored results.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib
import time
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from grokbench.config import ConfigError
from grokbench.quant_eval import BIT_CONFIGS, evaluate, parse_bits
from grokbench.quant_train import train
from grokbench.store import atomic_write_bytes, atomic_write_json, default_root
from numerics import clipped_softmax_gamma
from tasks import QuantModelConfig, build_corpus

__all__ = [
    "QUANT_VERSION",
    "VARIANTS",
    "QuantConfig",
    "format_markdown",
    "parse_quant_overrides",
    "quant_configs",
    "run_quant",
]

QUANT_VERSION = 1
"""Bumped when training or evaluation numbers change meaning; part of every quant hash."""

VARIANTS: dict[str, tuple[str, str]] = {
    "vanilla": ("softmax", "none"),
    "clipped": ("clipped", "none"),
    "gated": ("softmax", "linear"),
    "gated_mlp": ("softmax", "mlp"),
    "gated_all_heads": ("softmax", "all_heads"),
    "clipped_gated": ("clipped", "linear"),
}
"""Variant name -> (softmax, gate): the paper's vanilla, clipped softmax, gated attention with
its three gates, and clipped softmax with a linear gate (the combination the paper never tried)."""

_LABELS = {
    "vanilla": "Vanilla",
    "clipped": "Clipped softmax",
    "gated": "Gated attention (linear)",
    "gated_mlp": "Gated attention (MLP)",
    "gated_all_heads": "Gated attention (all-heads linear)",
    "clipped_gated": "Clipped softmax + gated (linear)",
}

_FAMILY_DEFAULTS = {  # BERT's and OPT's recipes (the paper's section 5 / appendix C)
    "encoder": {"b2": 0.999, "weight_decay": 0.01},
    "decoder": {"b2": 0.95, "weight_decay": 0.1},
}

_EVAL_FIELDS = (
    "eval_batches",
    "calib_batches",
    "calib_subsets",
    "act_range",
    "percentile",
    "momentum",
    "weight_range",
    "bits",
)


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """One quant-lab run: model, variant, training and PTQ evaluation (defaults: full recipe)."""

    # Model.
    family: str = "encoder"  # 'encoder' (BERT-like MLM, post-LN) or 'decoder' (OPT-like, pre-LN)
    variant: str = "vanilla"  # a key of VARIANTS
    # The full recipe is the largest setting measured (docs/quant.md): 4 layers as the first CPU
    # probe, at half its width and length so a run takes minutes, not an hour, on 2 cores.
    n_layers: int = 4  # the first CPU probe's 4-layer encoder (docs/recipes.md)
    d_model: int = 64  # d_head 16
    n_heads: int = 4
    d_ffn: int | None = None  # None -> 4 * d_model
    seq_len: int = 64  # T (the paper's BERT uses 128, OPT 512)
    # Attention variants.
    alpha: float = 4.0  # gamma = -alpha / T; the paper recommends alpha in [2, 4]
    gamma: float | None = None  # explicit gamma overrides alpha (BERT-base best: -0.025)
    zeta: float = 1.0  # upper stretch; the paper finds zeta > 1 does nothing for outliers
    pi_init: float = 0.5  # initial gate openness; the paper's range is [0.25, 0.5]
    gate_hidden: int = 4  # n_hid of the MLP gate (the paper's BERT-base 'MLP, n_hid = 4')
    # Data.
    corpus: str = "pydoc"  # CPython's pydoc_data.topics, or a path to a local UTF-8 text file
    level: str = "char"  # 'char' or 'byte' tokens
    # Training (AdamW, warmup then linear decay, gradient clipping: BERT/OPT).
    batch_size: int = 32  # sequences per step
    steps: int = 2000  # the first CPU probe's loss flattened by ~500 steps; outliers need longer
    lr: float = 1e-3  # peak learning rate (small models take larger rates than BERT's 1e-4)
    warmup_steps: int | None = None  # None -> 5% of steps
    b1: float = 0.9  # BERT/OPT
    b2: float | None = None  # None -> 0.999 (BERT) for the encoder, 0.95 (OPT) for the decoder
    eps: float = 1e-8  # AdamW default
    weight_decay: float | None = None  # None -> 0.01 (BERT) / 0.1 (OPT); matrices only
    ln_weight_decay: bool = False  # also decay LayerNorm scales (the paper's OPT finding)
    clip_norm: float = 1.0  # global gradient-norm clipping (BERT/OPT)
    seed: int = 0  # init and data order
    # Evaluation and PTQ.
    eval_batches: int = 8  # fixed validation batches (x batch_size = 256 sequences)
    calib_batches: int = 16  # the paper's 16 calibration batches
    calib_subsets: int = 3  # the paper's 3 calibration subsets (mean +- std)
    act_range: str = "running_minmax"  # 'running_minmax', 'percentile' or 'mse'
    percentile: float = 99.99  # for act_range=percentile (the paper's OPT option)
    momentum: float = 0.9  # running min-max momentum (the paper's 0.9)
    weight_range: str = "auto"  # 'auto' (BERT min-max, OPT MSE; MSE below 8 bits), 'minmax', 'mse'
    bits: str = ",".join(BIT_CONFIGS)  # W8A8 and the paper's Table 10 widths

    def __post_init__(self) -> None:
        _check_types(self)
        _check(
            self.variant in VARIANTS,
            f"variant must be one of {', '.join(VARIANTS)}; got {self.variant!r}",
        )
        _check(
            self.level in ("char", "byte"), f"level must be 'char' or 'byte', got {self.level!r}"
        )
        _check(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        _check(self.gamma is None or self.gamma <= 0, f"gamma must be <= 0, got {self.gamma}")
        _check(self.zeta >= 1, f"zeta must be >= 1, got {self.zeta}")
        _check(0 < self.pi_init < 1, f"pi_init must be in (0, 1), got {self.pi_init}")
        for name in ("batch_size", "steps", "eval_batches", "calib_batches", "calib_subsets"):
            _check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        _check(self.lr > 0, f"lr must be > 0, got {self.lr}")
        _check(0 <= self.b1 < 1, f"b1 must be in [0, 1), got {self.b1}")
        _check(self.b2 is None or 0 <= self.b2 < 1, f"b2 must be in [0, 1), got {self.b2}")
        _check(self.eps >= 0, f"eps must be >= 0, got {self.eps}")
        _check(
            self.weight_decay is None or self.weight_decay >= 0,
            f"weight_decay must be >= 0, got {self.weight_decay}",
        )
        _check(self.clip_norm > 0, f"clip_norm must be > 0, got {self.clip_norm}")
        _check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        _check(
            self.warmup_steps is None or 0 <= self.warmup_steps <= self.steps,
            f"warmup_steps must be in [0, steps], got {self.warmup_steps}",
        )
        _check(
            self.act_range in ("running_minmax", "percentile", "mse"),
            f"act_range must be running_minmax, percentile or mse; got {self.act_range!r}",
        )
        _check(
            50 < self.percentile < 100, f"percentile must be in (50, 100), got {self.percentile}"
        )
        _check(0 <= self.momentum < 1, f"momentum must be in [0, 1), got {self.momentum}")
        _check(
            self.weight_range in ("auto", "minmax", "mse"),
            f"weight_range must be auto, minmax or mse; got {self.weight_range!r}",
        )
        try:
            for name in self.bits.split(","):
                parse_bits(name.strip())
            self.model_config(110)
        except ValueError as err:
            raise ConfigError(str(err)) from None

    def resolved(self, name: str) -> Any:
        """A field with its default resolved: b2, weight_decay, warmup_steps, gamma, zeta.

        Softmax variants always get gamma = 0 and zeta = 1 (the plain softmax).
        """
        clipped = VARIANTS[self.variant][0] == "clipped"
        if name in ("gamma", "zeta") and not clipped:
            return 0.0 if name == "gamma" else 1.0
        value = getattr(self, name)
        if value is not None:
            return value
        if name == "warmup_steps":
            return max(1, self.steps // 20)
        if name == "gamma":
            return clipped_softmax_gamma(self.alpha, self.seq_len)
        return _FAMILY_DEFAULTS[self.family][name]

    @property
    def gate(self) -> str:
        """The variant's gate ('none', 'linear', 'mlp', 'all_heads')."""
        return VARIANTS[self.variant][1]

    def model_config(self, vocab_size: int) -> QuantModelConfig:
        """The architecture for `tasks.quant_model_apply`."""
        return QuantModelConfig(
            family=self.family,
            vocab_size=vocab_size,
            seq_len=self.seq_len,
            n_layers=self.n_layers,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ffn=self.d_ffn,
            gate=self.gate,
            gate_hidden=self.gate_hidden,
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return dataclasses.asdict(self)

    def train_dict(self) -> dict[str, Any]:
        """The fields that decide the trained parameters (clipping fields dropped for softmax)."""
        out = {k: v for k, v in self.to_dict().items() if k not in _EVAL_FIELDS}
        if VARIANTS[self.variant][0] == "softmax":
            out["alpha"] = out["gamma"] = out["zeta"] = None  # unused without clipping
        if self.gate == "none":
            out["pi_init"] = out["gate_hidden"] = None
        elif self.gate != "mlp":
            out["gate_hidden"] = None
        return out

    def train_hash(self) -> str:
        """16 hex digits identifying the trained model."""
        return _hash({"quant_version": QUANT_VERSION, "kind": "train", **self.train_dict()})

    def eval_hash(self) -> str:
        """16 hex digits identifying the evaluation (training fields and PTQ fields)."""
        return _hash({"quant_version": QUANT_VERSION, "kind": "eval", **self.to_dict()})


def _hash(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _members(tp: Any) -> tuple[type, ...]:
    return (
        typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, type(int | None)) else (tp,)
    )


def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(QuantConfig)


def _check_types(cfg: QuantConfig) -> None:
    for name, tp in _field_types().items():
        value = getattr(cfg, name)
        ok = False
        for member in _members(tp):
            if member is float and isinstance(value, int | float) and not isinstance(value, bool):
                ok = True
                if not math.isfinite(value):
                    raise ConfigError(f"{name} must be finite, got {value}")
                object.__setattr__(cfg, name, float(value))  # 1 and 1.0 hash the same
            elif member is int and isinstance(value, bool):
                continue
            elif isinstance(value, member):
                ok = True
            if ok:
                break
        names = " | ".join(m.__name__ for m in _members(tp))
        _check(ok, f"{name} must be {names}, got {type(value).__name__} {value!r}")


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _parse_value(key: str, text: str) -> Any:
    errors = []
    for member in _members(_field_types()[key]):
        try:
            if member is type(None):
                if text.lower() in ("none", "null"):
                    return None
            elif member is bool:
                if text.lower() in _BOOLS:
                    return _BOOLS[text.lower()]
            elif member is int:
                return int(text)
            elif member is float:
                value = float(text)
                if math.isfinite(value):
                    return value
            elif member is str and text:
                return text
        except ValueError:
            pass
        errors.append(member.__name__)
    raise ConfigError(f"{key}={text!r}: expected {' or '.join(errors)}")


def parse_quant_overrides(tokens: Sequence[str]) -> dict[str, Any]:
    """`key=value` tokens -> overrides. Keys: QuantConfig fields, `variants` and `families`
    (comma lists); `bits` takes a comma list too (W8A8,W6A6)."""
    out: dict[str, Any] = {}
    fields = _field_types()
    for token in tokens:
        key, sep, text = token.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {token!r}")
        if key in out:
            raise ConfigError(f"key {key!r} given twice")
        if key in ("variants", "families"):
            values = tuple(v.strip() for v in text.split(",") if v.strip())
            known = tuple(VARIANTS) if key == "variants" else ("encoder", "decoder")
            bad = [v for v in values if v not in known]
            if not values or bad:
                raise ConfigError(f"{key} must be a comma list of {', '.join(known)}; got {text!r}")
            out[key] = values
        elif key in ("variant", "family"):
            raise ConfigError(f"use {key}s=... to choose {key}s")
        elif key in fields:
            out[key] = _parse_value(key, text.strip())
        else:
            raise ConfigError(
                f"unknown key {key!r}; known keys: variants, families, {', '.join(fields)}"
            )
    return out


QUICK: dict[str, Any] = {
    "n_layers": 2,
    "d_model": 32,
    "seq_len": 48,
    "steps": 300,
    "eval_batches": 4,
}
"""`--quick`: the full pipeline, every variant of both families, in minutes on 2 CPU cores."""


def quant_configs(
    quick: bool = False, overrides: Mapping[str, Any] | None = None
) -> list[QuantConfig]:
    """The runs of the recipe: every family x variant, quick or full, with overrides applied."""
    overrides = dict(overrides or {})
    families = overrides.pop("families", ("encoder", "decoder"))
    variants = overrides.pop("variants", tuple(VARIANTS))
    base = {**(QUICK if quick else {}), **overrides}
    return [QuantConfig(family=f, variant=v, **base) for f in families for v in variants]


def _row(summary: dict, train_summary: dict, cfg: QuantConfig, eval_dir: pathlib.Path) -> dict:
    row = {
        "family": cfg.family,
        "variant": cfg.variant,
        "label": _LABELS[cfg.variant],
        "gamma": cfg.resolved("gamma"),
        **{k: v for k, v in summary.items() if k not in ("config", "family", "variant")},
        "final_train_loss": train_summary["final_train_loss"],
        "train_seconds": train_summary["train_seconds"],
        "analysis": str((eval_dir / "analysis.npz").resolve()),  # for figures from any cwd
    }
    return row


def run_quant(
    quick: bool,
    out: pathlib.Path | str | None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    results: pathlib.Path | str | None = None,
    progress: bool = True,
) -> dict:
    """Train (cached), evaluate and quantize every variant; write OUT/quant_table.{json,md}.

    `overrides`: a dict, or `key=value` tokens (see `parse_quant_overrides`). Returns the
    table: {"quick", "configs", "rows", "seconds"}, one row per family x variant.
    """
    if overrides is not None and not isinstance(overrides, Mapping):
        overrides = parse_quant_overrides(list(overrides))
    configs = quant_configs(quick, overrides)
    root = default_root() if results is None else pathlib.Path(results)
    start = time.perf_counter()
    corpora: dict[tuple[str, str], Any] = {}
    rows = []
    for cfg in configs:
        key = (cfg.corpus, cfg.level)
        if key not in corpora:
            try:
                corpora[key] = build_corpus(
                    None if cfg.corpus == "pydoc" else cfg.corpus, cfg.level
                )
            except ValueError as err:
                raise ConfigError(str(err)) from None
        corpus = corpora[key]
        params, train_summary = train(cfg, corpus, root, progress)
        summary = evaluate(cfg, params, corpus, root)
        eval_dir = root / "quant" / "eval" / cfg.eval_hash()
        rows.append(_row(summary, train_summary, cfg, eval_dir))
    table = {
        "quick": quick,
        "configs": [c.to_dict() for c in configs],
        "rows": rows,
        "seconds": time.perf_counter() - start,
    }
    if out is not None:
        out = pathlib.Path(out)
        atomic_write_json(out / "quant_table.json", table)
        atomic_write_bytes(out / "quant_table.md", format_markdown(table).encode())
    return table


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.{digits}f}"


def _pm(row: dict, col: str) -> str:
    if col not in row:
        return "-"
    return f"{_fmt(row[col])} ± {_fmt(row[col + '_std'])}"


def format_markdown(table: dict) -> str:
    """The paper's Table 2 layout per family (FP ppl, max inf-norm, avg kurtosis, W8A8 ppl),
    then its Table 10 low-bit columns and our diagnostics."""
    lines = []
    bits = [b for b in BIT_CONFIGS if any(f"{b.lower()}_perplexity" in r for r in table["rows"])]
    for family in ("encoder", "decoder"):
        rows = [r for r in table["rows"] if r["family"] == family]
        if not rows:
            continue
        name = "BERT-like encoder (MLM)" if family == "encoder" else "OPT-like decoder (causal LM)"
        cfg = next(c for c in table["configs"] if c["family"] == family)
        lines += [
            f"### {name}: {cfg['n_layers']} layers, d_model {cfg['d_model']}, "
            f"{cfg['n_heads']} heads, "
            f"T = {cfg['seq_len']}, {cfg['steps']} steps",
            "",
            "| Method | FP ppl | Max inf. norm | Avg. kurtosis | "
            + " | ".join(f"{b} ppl" for b in bits)
            + " |",
            "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in bits) + " |",
        ]
        for r in rows:
            cells = [
                r["label"],
                _fmt(r["fp_perplexity"]),
                _fmt(r["max_inf_norm"], 1),
                _fmt(r["avg_kurtosis"], 1),
                *(_pm(r, f"{b.lower()}_perplexity") for b in bits),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            "| Method | max kurtosis | max head mass on delimiters | outliers on delimiters "
            "(share of tokens) | top outlier dims per layer | exact-zero attention | gate mean |",
            "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
        ]
        for r in rows:
            shares = [s for s in r["outlier_share_on_delimiters"] if s is not None]
            share = f"{max(shares):.0%}" if shares else "no outliers"
            cells = [
                r["label"],
                _fmt(r["max_kurtosis"], 1),
                f"{r['max_head_delimiter_attention']:.2f}",
                f"{share} ({r['delimiter_share_of_tokens']:.0%})",
                " / ".join(",".join(str(d) for d in dims) or "-" for dims in r["top_outlier_dims"]),
                f"{r['attention_zero_fraction']:.0%}",
                _fmt(r.get("gate_mean")),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
