"""Quantization-lab figures, drawn from stored results (never trains).

`draw_quant_figures(table, out)` takes the table `grokbench.quant.run_quant` returns (or the
path of its quant_table.json) and writes, per model family:

- quant_attention_FAMILY.png: for each variant, the attention pattern of its most
  no-op-like head (the head with the largest mean attention mass on delimiter and special
  tokens) on the first validation sequence, with the key/query tokens on the axes;
- quant_outlier_dims_FAMILY.png: for each variant and layer, how many outliers (entries
  beyond 6 sigma) each hidden dimension of the FFN output carries on the validation set;
- quant_sweep_AXIS.png, when the table sweeps one field (`grokbench quant alpha=2,4,8`):
  FP perplexity, max inf-norm and the W8A8 gap against it, one line per family and variant.
"""

from __future__ import annotations

import json
import pathlib

import matplotlib.colors
import numpy as np

from figures._common import (
    ABLATIONS_FILE,
    CONSTANT_LR_FILE,
    QUANT_TABLE_FILE,
    MissingRuns,
    new_figure,
    save_to,
)
from figures.registry import Figure
from grokbench.quant.recipes import ABLATIONS
from grokbench.store import default_root

__all__ = ["FIGURE", "draw", "draw_quant_figures"]


def _load_table(table: dict | str | pathlib.Path) -> dict:
    if isinstance(table, dict):
        return table
    path = pathlib.Path(table)
    if path.is_dir():
        path = path / "quant_table.json"
    return json.loads(path.read_text())


def _analysis(row: dict) -> dict[str, np.ndarray]:
    with np.load(row["analysis"]) as npz:
        return {k: npz[k] for k in npz.files}


def _save(fig, title: str, out: pathlib.Path, name: str) -> list[pathlib.Path]:
    fig.suptitle(title)
    return save_to(fig, out, name)


def _attention_figure(rows: list[dict], family: str, out: pathlib.Path) -> list[pathlib.Path]:
    n = len(rows)
    cols = min(n, 3)
    grid_rows = -(-n // cols)
    fig, axes = new_figure(grid_rows, cols, width=4.6 * cols, height=4.4)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    for ax, row in zip(axes.ravel(), rows, strict=False):
        data = _analysis(row)
        mass = data["delimiter_attention"]  # (L, H)
        layer, head = np.unravel_index(int(np.argmax(mass)), mass.shape)
        probs = data["example_probs"][layer, head]
        names = data["token_names"]
        labels = [str(names[int(t)]) for t in data["example_tokens"]]
        # Square-root colour scale: a no-op head's small off-delimiter mass stays visible.
        norm = matplotlib.colors.PowerNorm(0.5, vmin=0.0, vmax=max(float(probs.max()), 1e-6))
        ax.imshow(probs, cmap="viridis", norm=norm)
        ticks = np.arange(len(labels))
        ax.set_xticks(ticks, labels, fontsize=4, rotation=90)
        ax.set_yticks(ticks, labels, fontsize=4)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        dead = " (all zero: dead)" if not probs.any() else ""
        ax.set_title(
            f"{row['label']}\nlayer {layer} head {head}: "
            f"{mass[layer, head]:.0%} of attention on delimiters{dead}",
            fontsize=8,
        )
    title = f"Most no-op-like head per variant ({family}, first validation sequence)"
    return _save(fig, title, out, f"quant_attention_{family}")


def _outlier_dims_figure(rows: list[dict], family: str, out: pathlib.Path) -> list[pathlib.Path]:
    layers = _analysis(rows[0])["outlier_dims"].shape[0]
    fig, axes = new_figure(len(rows), layers, width=3.2 * layers, height=1.7, sharex=True)
    for i, row in enumerate(rows):
        dims = _analysis(row)["outlier_dims"]  # (L, D)
        for layer in range(layers):
            ax = axes[i, layer]
            ax.bar(np.arange(dims.shape[1]), dims[layer], width=1.0, color="tab:red")
            ax.set_ylim(bottom=0, top=max(1.0, float(dims.max()) * 1.1))
            if not dims[layer].any():
                ax.text(0.5, 0.5, "no outliers", ha="center", va="center", transform=ax.transAxes)
            ax.tick_params(labelsize=6)
            if i == 0:
                ax.set_title(f"layer {layer} FFN output", fontsize=8)
            if layer == 0:
                ax.set_ylabel(row["label"].replace(" (", "\n("), fontsize=6)
            if i == len(rows) - 1:
                ax.set_xlabel("hidden dimension", fontsize=7)
    title = f"Outliers (> 6 sigma) per hidden dimension ({family}, validation set)"
    return _save(fig, title, out, f"quant_outlier_dims_{family}")


def _sweep_figure(rows: list[dict], axis: str, out: pathlib.Path) -> list[pathlib.Path]:
    """The paper's ablation plots (Fig. 6 alpha, Fig. 7 pi_init, Table 1 zeta, Table 6 LN
    weight decay): FP perplexity, max inf-norm and the W8A8 gap against the swept value."""
    panels = (
        ("FP perplexity", lambda r: r["fp_perplexity"]),
        ("max inf-norm", lambda r: r["max_inf_norm"]),
        ("W8A8 / FP perplexity", lambda r: r["w8a8_perplexity"] / r["fp_perplexity"]),
    )
    fig, axes = new_figure(1, len(panels), width=4.2 * len(panels), height=3.4)
    axes = axes[0]
    lines: dict[str, list[dict]] = {}
    for r in rows:
        if r["sweep"].get(axis) is None:
            continue  # a reference row without the axis (the gamma sweep's vanilla)
        # The other swept fields name the line (T in the gamma sweep, gamma in the zeta one).
        rest = "".join(f" {k}={v}" for k, v in r["sweep"].items() if k != axis and v is not None)
        lines.setdefault(f"{r['family']} {r['variant']}{rest}", []).append(r)
    for ax, (name, value) in zip(axes, panels, strict=True):
        for label, members in lines.items():
            members = sorted(members, key=lambda r: float(r["sweep"][axis]))
            xs = [float(r["sweep"][axis]) for r in members]
            ax.plot(xs, [value(r) for r in members], "o-", label=label)
        ax.set_xlabel(axis)
        ax.set_title(name, fontsize=9)
    axes[0].legend(fontsize=7)
    return _save(fig, f"Sweep of {axis}", out, f"quant_sweep_{axis}")


def draw_quant_figures(
    table: dict | str | pathlib.Path, out: str | pathlib.Path
) -> list[pathlib.Path]:
    """Write the attention and outlier-dimension figures of every family; return their paths."""
    table = _load_table(table)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for family in ("encoder", "decoder"):
        rows = [r for r in table["rows"] if r["family"] == family]
        if rows:
            paths += _attention_figure(rows, family, out)
            paths += _outlier_dims_figure(rows, family, out)
    axes = {k for r in table["rows"] for k in r.get("sweep", {})}
    if len(axes) == 1:  # one swept field: the paper's ablation plot
        paths += _sweep_figure(table["rows"], axes.pop(), out)
    return paths


def draw(ctx) -> list[pathlib.Path]:
    """`grokbench figures quant`: the quant lab's figures in the build's output directory,
    drawn from the tables the build made there first (`figures.build`: the lab at the
    build's scale, cached in its own store): quant_table.json, quant_table.md, then the
    figures. The full build's tables add the paper's ablations (`grokbench.quant.ABLATIONS`):
    quant_ablations.json and one quant_sweep_AXIS.png each; and the encoder recipe at a
    constant lr (`grokbench.quant.recipes.CONSTANT_LR`): quant_constant_lr.json. The quick
    build has neither (it stays within its budget). `MissingRuns` names the command that
    makes a table this directory lacks."""
    table = _stored(ctx, QUANT_TABLE_FILE)
    if table.get("quick") != ctx.quick:
        raise MissingRuns(_missing(ctx, f"{QUANT_TABLE_FILE} of this scale"))
    paths = [ctx.out / QUANT_TABLE_FILE, ctx.out / "quant_table.md"]
    paths += draw_quant_figures(table, ctx.out)
    if not ctx.quick:
        tables = _stored(ctx, ABLATIONS_FILE)
        paths.append(ctx.out / ABLATIONS_FILE)
        for axis in ABLATIONS:
            paths += _sweep_figure(tables[axis]["rows"], axis, ctx.out)
        _stored(ctx, CONSTANT_LR_FILE)
        paths.append(ctx.out / CONSTANT_LR_FILE)
    return paths


def _stored(ctx, name: str) -> dict:
    """The build's stored table OUT/NAME; `MissingRuns` when OUT lacks it."""
    path = ctx.out / name
    if not path.is_file():
        raise MissingRuns(_missing(ctx, name))
    return json.loads(path.read_text())


def _missing(ctx, what: str) -> str:
    """What `draw` says of a table OUT lacks, with the command that makes it there."""
    command = f"grokbench figures quant {'--quick' if ctx.quick else '--full'} --out {ctx.out}"
    if ctx.store.root != default_root():
        command += f" --results {ctx.store.root}"
    return f"no {what} in {ctx.out}: `{command}` makes it"


FIGURE = Figure(
    name="quant",
    order=9,
    builds={"quant": draw},
    title="Quantizable transformers",
    images=(
        "quant_attention_encoder.png",
        "quant_attention_decoder.png",
        "quant_outlier_dims_encoder.png",
        "quant_outlier_dims_decoder.png",
        *(f"quant_sweep_{axis}.png" for axis in ABLATIONS),
    ),
    quant_lab=True,
)
