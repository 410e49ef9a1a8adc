"""The quant lab's recipe and table: train the attention variants, measure, PTQ.

`run_quant(quick=..., out=..., overrides=...)` trains (cached) every variant of the encoder and the
decoder, evaluates floating-point perplexity and the outlier metrics, simulates W8A8,
W6A8, W4A8 and W6A6 post-training quantization, and writes OUT/quant_table.json and
OUT/quant_table.md (the paper's Table 2 layout, plus the low-bit columns of its Table 10).
`figures.quant.draw_quant_figures` draws the figures from the same stored results.
`run_tap_costs` attributes each row's PTQ loss to the quantized tensors
(OUT/quant_tap_costs.json and .md).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from grokbench.config import ConfigError, field_types, override_readers, require
from grokbench.overrides import choices, parse, refused
from grokbench.quant.config import BIT_CONFIGS, VARIANTS, QuantConfig, parse_bit_list
from grokbench.quant.evaluate import evaluate, tap_costs
from grokbench.quant.recipes import ABLATIONS, QUANT
from grokbench.quant.train import train
from grokbench.recipes import Recipe, expand
from grokbench.store import Store, atomic_write_bytes, atomic_write_json
from grokbench.tables import fmt
from tasks.quant import SYNTHETIC_CORPORA, Corpus, build_corpus

__all__ = [
    "corpus_of",
    "format_tap_costs",
    "parse_quant_overrides",
    "quant_configs",
    "run_ablations",
    "run_quant",
    "run_tap_costs",
]

_LABELS = {
    "vanilla": "Vanilla",
    "clipped": "Clipped softmax",
    "gated": "Gated attention (linear)",
    "gated_mlp": "Gated attention (MLP)",
    "gated_all_heads": "Gated attention (all-heads linear)",
    "clipped_gated": "Clipped softmax + gated (linear)",
    "off_by_one": "Softmax off by one",
    "sink": "Learned sink logit",
    "sigmoid": "Sigmoid attention",
    "softpick": "Softpick",
    "gated_output": "Output gate (elementwise)",
}


_LISTS = {"variants": tuple(VARIANTS), "families": ("encoder", "decoder")}
"""Overrides that are lists but not sweep axes: the variants and families a run covers."""


def parse_quant_overrides(tokens: Sequence[str]) -> dict[str, Any]:
    """`key=value` tokens -> overrides, through the one parser (`grokbench.overrides.parse`):
    `QuantConfig` fields as `grokbench.config.parse_overrides` reads them (a comma list sweeps
    a field, except `bits`, `corpus` and the other `QuantConfig.WHOLE_VALUES`), plus
    `variants` and `families` (comma lists of the variants and families to run, read in a
    first pass). A single value is returned as itself, a sweep as a tuple."""
    lists = {k: choices(v) for k, v in _LISTS.items()}
    singular = {k: refused(f"use {k}s=... to choose {k}s") for k in ("variant", "family")}
    fields = override_readers(QuantConfig, extra=())
    known = [*_LISTS, *field_types(QuantConfig)]
    readers = {**fields, **lists, **singular}
    parsed = parse(tokens, readers, known=known, first=[*lists, *singular])
    return {k: v if k in lists or len(v) > 1 else v[0] for k, v in parsed.items()}


def quant_configs(
    quick: bool = False, overrides: Mapping[str, Any] | None = None, recipe: Recipe = QUANT
) -> list[QuantConfig]:
    """The runs of `recipe` (the lab's by default): each family x variant x sweep point,
    quick or full, with overrides applied (`recipes.expand`; `families` keeps the recipe's
    grids of those families, in that order; `variants` replaces each grid's variants)."""
    overrides = dict(overrides or {})
    families = overrides.pop("families", None)
    if "variants" in overrides:
        overrides["variant"] = overrides.pop("variants")
    if families is not None:
        grids = recipe.grids or ({},)
        of = [g.get("family", (recipe.base.family,)) for g in grids]
        kept = tuple(g for f in families for g, gf in zip(grids, of, strict=True) if gf == (f,))
        # A family the recipe has no grid for runs its base settings in that family.
        kept += tuple({"family": (f,)} for f in families if (f,) not in of)
        recipe = dataclasses.replace(recipe, grids=kept)
    values = {k: v if isinstance(v, tuple) else (v,) for k, v in overrides.items()}
    return expand(recipe, values, quick=quick)


def _sweep_axes(configs: Sequence[QuantConfig]) -> tuple[str, ...]:
    """The fields other than family and variant whose value differs between `configs` of one
    family: the swept ones, which label each row (the recipe's per-family settings, such as
    the encoder's corpus and steps, are not a sweep)."""
    fields = [f.name for f in dataclasses.fields(QuantConfig) if f.name not in _NOT_AXES]
    families: dict[str, list[QuantConfig]] = {}
    for c in configs:
        families.setdefault(c.family, []).append(c)
    return tuple(
        k
        for k in fields
        if any(len({getattr(c, k) for c in group}) > 1 for group in families.values())
    )


_NOT_AXES = ("family", "variant")


def run_ablations(
    *, results: pathlib.Path | str | None = None, progress: bool = True, quick: bool = False
) -> dict[str, dict]:
    """Every `ABLATIONS` recipe with its vanilla references (cached like `run_quant`):
    {"vanilla": table, AXIS: table, ...}, tables as `run_quant`'s. The encoder's sweeps run at
    the encoder recipe's setting (their quick form if `quick`) against the recipe's encoder
    vanilla; the decoder's LayerNorm sweep at the quick scale against the quick decoder's."""
    kw = {"out": None, "results": results, "progress": progress}
    enc = run_quant(quick=quick, overrides=["variants=vanilla", "families=encoder"], **kw)
    dec = run_quant(quick=True, overrides=["variants=vanilla", "families=decoder"], **kw)
    vanilla = {**enc, "rows": enc["rows"] + dec["rows"], "configs": enc["configs"] + dec["configs"]}
    tables = {"vanilla": vanilla}
    for axis, recipe in ABLATIONS.items():
        tables[axis] = run_quant(quick=quick, recipe=recipe, **kw)
    return tables


def _label(cfg: QuantConfig, axes: Sequence[str]) -> str:
    """The variant's name, with the swept fields' values ('Vanilla, seed=1')."""
    return _LABELS[cfg.variant] + "".join(f", {k}={getattr(cfg, k)}" for k in axes)


def _row(summary: dict, train_summary: dict, cfg: QuantConfig, axes: Sequence[str]) -> dict:
    sweep = {k: getattr(cfg, k) for k in axes}
    return {
        "family": cfg.family,
        "variant": cfg.variant,
        "label": _label(cfg, axes),
        "sweep": sweep,
        "gamma": cfg.resolved("gamma"),
        "pi_init": cfg.resolved("pi_init") if cfg.gate != "none" else None,
        **{k: v for k, v in summary.items() if k not in ("config", "family", "variant")},
        "final_train_loss": train_summary["final_train_loss"],
        "train_seconds": train_summary["train_seconds"],
    }


def corpus_of(cfg: QuantConfig) -> Corpus:
    """`cfg`'s corpus; a bad one is a `ConfigError`. A generated corpus or CPython's docs is
    built once per process (the GPU scripts' 16M letters take seconds), a file every time."""
    if cfg.corpus in (*SYNTHETIC_CORPORA, "pydoc"):
        return _fixed_corpus(cfg.corpus, cfg.level, cfg.corpus_chars)
    return _build(cfg.corpus, cfg.level, None)


@functools.lru_cache(maxsize=4)
def _fixed_corpus(name: str, level: str, n_chars: int | None) -> Corpus:
    return _build(name, level, n_chars)


def _build(name: str, level: str, n_chars: int | None) -> Corpus:
    try:
        return build_corpus(None if name == "pydoc" else name, level, n_chars=n_chars)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _trained(configs: Sequence[QuantConfig], store: Store, progress: bool):
    """(cfg, corpus, params, train summary) per config, trained or loaded from `store`; each
    corpus is built once, and a bad corpus or a sequence longer than it is a `ConfigError`."""
    for cfg in configs:
        corpus = corpus_of(cfg)
        shortest = min(len(corpus.train_ids), len(corpus.val_ids))
        require(
            cfg.seq_len <= shortest,
            f"seq_len {cfg.seq_len} is longer than the corpus's {shortest}-token split",
        )
        yield (cfg, corpus, *train(cfg, corpus, store, progress))


def quant_table(
    configs: Sequence[QuantConfig], store: Store, *, quick: bool, progress: bool = True
) -> dict:
    """Train (cached), evaluate (cached) and quantize `configs` in `store`: the table
    {"quick", "configs", "rows", "seconds"}, one row per config (the quant lab's `train`)."""
    start = time.perf_counter()
    axes = _sweep_axes(configs)
    rows = []
    for cfg, corpus, params, train_summary in _trained(configs, store, progress):
        summary = evaluate(cfg, params, corpus, store)
        rows.append(_row(summary, train_summary, cfg, axes))
    return {
        "quick": quick,
        "configs": [c.to_dict() for c in configs],
        "rows": rows,
        "seconds": time.perf_counter() - start,
    }


def write_quant_table(out: pathlib.Path | str, table: dict) -> list[pathlib.Path]:
    """Write OUT/quant_table.json and OUT/quant_table.md (atomically); their paths."""
    out = pathlib.Path(out)
    paths = [out / "quant_table.json", out / "quant_table.md"]
    atomic_write_json(paths[0], table)
    atomic_write_bytes(paths[1], format_markdown(table).encode())
    return paths


def run_quant(
    *,
    quick: bool,
    out: pathlib.Path | str | None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    results: pathlib.Path | str | None = None,
    progress: bool = True,
    recipe: Recipe = QUANT,
) -> dict:
    """Train (cached), evaluate and quantize every variant; write OUT/quant_table.{json,md}.

    `overrides`: a dict, or `key=value` tokens (see `parse_quant_overrides`). Returns the
    table: {"quick", "configs", "rows", "seconds"}, one row per family x variant.
    """
    if overrides is not None and not isinstance(overrides, Mapping):
        overrides = parse_quant_overrides(list(overrides))
    configs = quant_configs(quick, overrides, recipe)
    table = quant_table(configs, Store(results), quick=quick, progress=progress)
    if out is not None:
        write_quant_table(out, table)
    return table


def run_tap_costs(
    *,
    quick: bool,
    out: pathlib.Path | str | None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    results: pathlib.Path | str | None = None,
    bits: str = "W8A8",
    progress: bool = True,
    recipe: Recipe = QUANT,
) -> list[dict]:
    """`evaluate.tap_costs` of every config `run_quant` makes (trained if the store lacks it,
    else loaded), at each of the comma-separated `bits`; writes OUT/quant_tap_costs.{json,md}."""
    if overrides is not None and not isinstance(overrides, Mapping):
        overrides = parse_quant_overrides(list(overrides))
    names = parse_bit_list(bits)
    configs = quant_configs(quick, overrides, recipe)
    axes = _sweep_axes(configs)
    costs = []
    for cfg, corpus, params, _ in _trained(configs, Store(results), progress):
        for name in names:
            costs.append({"label": _label(cfg, axes), **tap_costs(cfg, params, corpus, name)})
    if out is not None:
        out = pathlib.Path(out)
        atomic_write_json(out / "quant_tap_costs.json", costs)
        atomic_write_bytes(out / "quant_tap_costs.md", format_tap_costs(costs).encode())
    return costs


def format_tap_costs(costs: Sequence[dict], top: int = 5) -> str:
    """Per model and bit width: the gap over the weights-only model with every tap quantized,
    then the `top` taps whose quantization alone costs the most, with the gap left when
    every tap but that one is quantized."""

    def gap(ppl: float, base: float) -> str:
        return f"{100 * (ppl / base - 1):+.2f}%"

    lines = []
    for c in costs:
        base = c["weights_only_perplexity"]
        lines += [
            f"### {c['family']} {c['label']}, {c['bits']}: FP {_fmt(c['fp_perplexity'])}, "
            f"weights only {_fmt(base)}, every tap {_fmt(c['all_taps_perplexity'])} "
            f"({gap(c['all_taps_perplexity'], base)})"
        ]
        ranked = sorted(c["taps"], key=lambda t: -t["only_this"])[:top]
        lines += _markdown_table(
            ["tap", "range", "only this tap", "every tap but this"],
            ["---", "---", "---:", "---:"],
            [
                [
                    f"`{t['tap']}`",
                    f"[{t['lo']:.1f}, {t['hi']:.1f}]",
                    gap(t["only_this"], base),
                    gap(t["all_but_this"], base),
                ]
                for t in ranked
            ],
        )
        lines.append("")
    return "\n".join(lines)


def _fmt(x: float | None, digits: int = 2) -> str:
    """`digits` decimals, none from 1000 up ('-' when missing or not finite)."""
    return fmt(x, ".0f" if x is not None and abs(x) >= 1000 else f".{digits}f")


def _pm(row: dict, col: str) -> str:
    if col not in row:
        return "-"
    return f"{_fmt(row[col])} ± {_fmt(row[col + '_std'])}"


def _markdown_table(header: Sequence[str], align: Sequence[str], body) -> list[str]:
    """A markdown table (preceded by a blank line): one `|`-joined line per row of cells."""
    return ["", *("| " + " | ".join(cells) + " |" for cells in (header, align, *body))]


def _table2_cells(r: dict, bits: Sequence[str]) -> list[str]:
    return [
        r["label"],
        _fmt(r["fp_perplexity"]),
        _fmt(r["max_inf_norm"], 1),
        _fmt(r["avg_kurtosis"], 1),
        *(_pm(r, f"{b.lower()}_perplexity") for b in bits),
    ]


def _where_cells(r: dict) -> list[str]:
    """Where the largest inf-norm sits: the tensor, position 0 against the rest there, the
    other tensors above 10, and each layer's mean head mass on [BOS]/[CLS]."""
    by = r["inf_norm_by_tensor"]
    top = max(by, key=by.get)
    big = [f"{n} {v:.0f}" for n, v in by.items() if v > 10 and n != top]
    return [
        r["label"],
        f"{top} ({by[top]:.1f})",
        f"{r['inf_norm_first_position_by_tensor'][top]:.1f} / "
        f"{r['inf_norm_other_positions_by_tensor'][top]:.1f}",
        ", ".join(big) or "-",
        " / ".join(f"{m:.2f}" for m in r["special_attention_by_layer"]),
    ]


def _diagnostic_cells(r: dict) -> list[str]:
    shares = [s for s in r["outlier_share_on_delimiters"] if s is not None]
    share = f"{max(shares):.0%}" if shares else "no outliers"
    return [
        r["label"],
        _fmt(r["max_kurtosis"], 1),
        f"{r['max_head_delimiter_attention']:.2f}",
        _fmt(r.get("parking_head_value_ratio"), 2),
        f"{share} ({r['delimiter_share_of_tokens']:.0%})",
        " / ".join(",".join(str(d) for d in dims) or "-" for dims in r["top_outlier_dims"]),
        f"{r['attention_zero_fraction']:.0%}",
        _fmt(r.get("gate_mean")),
    ]


def format_markdown(table: dict) -> str:
    """The paper's Table 2 layout per family (FP ppl, max inf-norm, avg kurtosis, W8A8 ppl),
    then its Table 10 low-bit columns, where the largest values sit, and our diagnostics."""
    lines = []
    bits = [b for b in BIT_CONFIGS if any(f"{b.lower()}_perplexity" in r for r in table["rows"])]
    for family in ("encoder", "decoder"):
        rows = [r for r in table["rows"] if r["family"] == family]
        if not rows:
            continue
        name = "BERT-like encoder (MLM)" if family == "encoder" else "OPT-like decoder (causal LM)"
        cfg = next(c for c in table["configs"] if c["family"] == family)
        lines.append(
            f"### {name}: {cfg['n_layers']} layers, d_model {cfg['d_model']}, "
            f"{cfg['n_heads']} heads, T = {cfg['seq_len']}, {cfg['steps']} steps "
            f"({'linear decay' if cfg['decay_lr'] else 'constant lr'}), {cfg['corpus']}"
        )
        lines += _markdown_table(
            ["Method", "FP ppl", "Max inf. norm", "Avg. kurtosis", *(f"{b} ppl" for b in bits)],
            ["---", *["---:"] * (3 + len(bits))],
            [_table2_cells(r, bits) for r in rows],
        )
        lines += _markdown_table(
            [
                "Method",
                "largest inf-norm at",
                "position 0 / others there",
                "other tensors > 10",
                "mean head mass on [BOS]/[CLS] per layer",
            ],
            ["---"] * 5,
            [_where_cells(r) for r in rows],
        )
        lines += _markdown_table(
            [
                "Method",
                "max kurtosis",
                "max head mass on delimiters",
                "its values on delimiters / others",
                "outliers on delimiters (share of tokens)",
                "top outlier dims per layer",
                "exact-zero attention",
                "gate mean",
            ],
            ["---", "---:", "---:", "---:", "---:", "---", "---:", "---:"],
            [_diagnostic_cells(r) for r in rows],
        )
        lines.append("")
    return "\n".join(lines)
