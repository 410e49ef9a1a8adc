"""Table 1 and Figure 5: loss x precision x eps on a+b mod 31 (lambda 1), from `table1`.

table1: test accuracy (mean +- std over seeds, %) and the mean final training margin per
variant and eps, as Markdown (`table1.md`) and CSV (`table1.csv`, one row per variant and
eps). "bf16" rows are bf16 compute on fp32 parameters (see grokbench.recipes).
fig5: the margin curves behind it at eps 1e-8 and 1e-16, one panel per precision, fixed vs
standard, with the dtype's cliff and log(1/eps) marked.

    python -m figures table1 fig5 [--quick | --full]
"""

from __future__ import annotations

import csv
import io

import numpy as np

import numerics
from figures._common import (
    LOSS_COLORS,
    Context,
    margin_curves,
    mark_cliffs,
    new_figure,
    save,
    select,
)
from figures._panels import TABLE1_SHOW as SHOW
from figures.registry import Figure
from grokbench.precision import get_precision
from grokbench.store import atomic_write_bytes

__all__ = ["FIGURE", "ROWS", "SHOW", "cells", "draw_fig5", "markdown", "write_table"]

ROWS: tuple[tuple[str, str, str], ...] = (
    ("fp32", "fixed", "Fixed CE"),
    ("fp32", "standard", "Standard CE"),
    ("fp32/bf16", "fixed", "Fixed CE"),
    ("fp32/bf16", "standard", "Standard CE"),
    ("fp64", "fixed", "Fixed CE"),
    ("fp64", "standard", "Standard CE"),
    ("fp32", "zero_sum", "Zero-sum projection"),
    ("fp32", "stablemax", "StableMax"),
    ("fp64", "stablemax", "StableMax"),
)
"""Table 1's rows in the paper's order: (precision, loss, label)."""


def cells(runs) -> list[dict]:
    """One dict per (row, eps): accuracy mean/std (%), margin mean/std, seeds."""
    out = []
    eps_values = sorted({r.config.eps for r in runs}, reverse=True)
    for precision, loss, label in ROWS:
        for eps in eps_values:
            group = select(runs, precision=precision, loss=loss, eps=eps)
            if not group:
                continue
            acc = 100 * np.array([r.summary["test_accuracy"] for r in group], float)
            margin = np.array([r.summary["final_margin"] for r in group], float)
            out.append(
                {
                    "precision": SHOW[precision],
                    "loss": loss,
                    "variant": label,
                    "eps": eps,
                    "test_acc_mean": float(acc.mean()),
                    "test_acc_std": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
                    "margin_mean": float(margin.mean()),
                    "margin_std": float(margin.std(ddof=1)) if margin.size > 1 else 0.0,
                    "seeds": int(acc.size),
                    "steps": int(group[0].config.steps),
                }
            )
    return out


def _margin(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.1f}"


def markdown(rows: list[dict]) -> str:
    """Table 1's layout: accuracy per eps, then final margin per eps."""
    eps_values = sorted({r["eps"] for r in rows}, reverse=True)
    head = ["precision", "variant"]
    head += [f"test % eps {e:g}" for e in eps_values] + [f"margin eps {e:g}" for e in eps_values]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for precision, loss, label in ROWS:
        show = SHOW[precision]
        mine = {r["eps"]: r for r in rows if r["precision"] == show and r["loss"] == loss}
        if not mine:
            continue
        acc = [
            f"{mine[e]['test_acc_mean']:.1f} +- {mine[e]['test_acc_std']:.1f}" if e in mine else "-"
            for e in eps_values
        ]
        margin = [_margin(mine[e]["margin_mean"]) if e in mine else "-" for e in eps_values]
        lines.append("| " + " | ".join([show, label, *acc, *margin]) + " |")
    seeds = sorted({r["seeds"] for r in rows})
    steps = sorted({r["steps"] for r in rows})
    lines.append("")
    lines.append(
        f"a+b mod 31, lambda 1, {'/'.join(map(str, seeds))} seeds, "
        f"{'/'.join(map(str, steps))} steps; test accuracy mean +- std over seeds, margin = "
        "mean final training margin. bf16 = bf16 compute on fp32 parameters."
    )
    shown = {(r["precision"], r["loss"]) for r in rows}
    absent = [f"{SHOW[p]} {label}" for p, loss, label in ROWS if (SHOW[p], loss) not in shown]
    if absent:  # the quick recipe trains fixed and standard CE only (grokbench.recipes)
        lines.append("")
        lines.append(
            f"Not in these runs: {', '.join(absent)}; the full recipe trains every variant "
            "(`grokbench figures table1 --full`)."
        )
    return "\n".join(lines) + "\n"


def write_table(ctx: Context) -> list:
    rows = cells(ctx.runs("table1"))
    md, csv_path = ctx.out / "table1.md", ctx.out / "table1.csv"
    atomic_write_bytes(md, markdown(rows).encode())
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(csv_path, buf.getvalue().encode())
    return [md, csv_path]


def draw_fig5(ctx: Context) -> list:
    runs = ctx.runs("table1")
    eps_rows = [e for e in (1e-8, 1e-16) if select(runs, eps=e)] or sorted(
        {r.config.eps for r in runs}
    )[:2]
    precisions = ("fp32/bf16", "fp32", "fp64")
    fig, axes = new_figure(len(eps_rows), 3, width=7.8, height=2.3, sharey="row")
    for row, eps in zip(axes, eps_rows, strict=True):
        for ax, precision in zip(row, precisions, strict=True):
            for loss in ("standard", "fixed"):
                group = select(runs, precision=precision, loss=loss, eps=eps)
                margin_curves(ax, group, color=LOSS_COLORS[loss], label=loss)
            cliff = numerics.precision_cliff(get_precision(precision).compute_dtype)
            equilibrium = numerics.equilibrium_margin(eps)
            marks = {f"cliff {cliff:.1f}": cliff, f"log(1/eps) {equilibrium:.1f}": equilibrium}
            mark_cliffs(ax, marks, axis="y")
            ax.set_title(f"{SHOW[precision]}, eps {eps:g}")
            ax.set_xlabel("step")
        row[0].set_ylabel("mean train margin m")
    axes[0, 0].legend(loc="upper left")
    return save(fig, ctx, "fig5")


FIGURE = Figure(
    name="table1",
    order=5,
    builds={"fig5": draw_fig5, "table1": write_table},
    title="Table 1 and Fig. 5: precisions and losses",
    images=("fig5.png",),
    recipes=("table1",),
)
