"""Figure 6: four grokking benchmarks at eps 1e-12 (fp32 standard, fp32 fixed, fp64 standard).

Columns: a+b mod 113 (Nanda's transformer), a+b mod 31 (Varma's), a^2+b^2 mod 97 and
a^3+b mod 97 (2-layer MLPs). Rows: exact training cross-entropy, mean training margin
(c32 and c64 marked), test accuracy. One thin line per seed. Quick mode trains fp32 only
(the fp64 reference is the full recipe's; a CPU spends most of a quick build on fp64), and
not a+b mod 113: its quick runs (1,000 of 20,000 steps) cost a fifth of the quick build's
training and stayed at 6 % test accuracy, below every cliff; its panel names the command.

    python -m figures fig6 [--quick | --full]
"""

from __future__ import annotations

import numpy as np

import numerics
from figures._common import Context, mark_cliffs, new_figure, save, select
from figures._panels import FIG6_RECIPES as RECIPES
from figures._panels import FIG6_TITLES as _TITLES
from figures._panels import FIG6_VARIANTS as VARIANTS
from figures.registry import Figure

__all__ = ["FIGURE", "RECIPES", "VARIANTS", "draw"]


def draw(ctx: Context) -> list:
    """Figure 6 from the four fig6-* recipes."""
    fig, axes = new_figure(3, 4, width=9.0, height=2.0)
    for col, recipe in enumerate(RECIPES):
        runs = ctx.runs(recipe)
        ax_loss, ax_margin, ax_acc = axes[:, col]
        if not runs:  # a recipe without quick runs (the transformers): say so in its panel
            ax_loss.set_title(_TITLES[recipe])
            ax_margin.text(
                0.5,
                0.5,
                "full scale only:\ngrokbench figures fig6 --full",
                ha="center",
                va="center",
                transform=ax_margin.transAxes,
                fontsize=7,
            )
            continue
        for precision, loss, color, label in VARIANTS:
            for i, run in enumerate(select(runs, precision=precision, loss=loss)):
                m = run.metrics
                kw = {
                    "color": color,
                    "alpha": 0.8,
                    "linewidth": 0.9,
                    "label": label if i == 0 else None,
                }
                ax_loss.plot(m["step"], np.maximum(m["train_ce"], 1e-30), **kw)
                ax_margin.plot(m["step"], m["margin_mean"], **kw)
                ax_acc.plot(m["test_step"], 100 * m["test_acc"], **kw)
        mark_cliffs(
            ax_margin,
            {
                "c32": numerics.precision_cliff(np.float32),
                "c64": numerics.precision_cliff(np.float64),
            },
            axis="y",
        )
        ax_loss.set_yscale("log")
        ax_loss.set_title(_TITLES[recipe])
        ax_acc.set_ylim(-2, 102)
        ax_acc.set_xlabel("step")
    axes[0, 0].set_ylabel("train cross-entropy")
    axes[1, 0].set_ylabel("mean train margin")
    axes[2, 0].set_ylabel("test accuracy (%)")
    # The legend on the first panel with curves (at quick scale mod 113's column has none).
    drawn = [ax for ax in axes[2] if ax.get_legend_handles_labels()[0]]
    if drawn:
        drawn[0].legend(loc="lower right")
    return save(fig, ctx, "fig6")


FIGURE = Figure(
    name="fig6",
    order=6,
    builds={"fig6": draw},
    title="Fig. 6: four benchmarks",
    images=("fig6.png",),
    recipes=RECIPES,
)
