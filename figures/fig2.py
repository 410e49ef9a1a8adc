"""Figure 2: the slingshot, with and without weight decay, standard vs fixed cross-entropy.

Top: a+b mod 31, 1-layer transformer, AdamW (lambda 1, eps 1e-8), fp32 (`fig2-top`).
Bottom: a^2+b^2 mod 97, 2-layer MLP, Adam (lambda 0, eps 1e-16), fp32 (`fig2-bottom`);
below it Sec. 4's a^3+b mod 97 in the same setting (`fig2-bottom-cube`; it has no quick runs,
so at --quick its row names the command that trains it).
Columns: the training cross-entropy (the exact value from the margins, `train_ce`, so
standard CE's collapsed loss of 0 hides nothing), the mean training margin with c32 and
log(1/eps) marked, and test accuracy. One thin line per seed.

    python -m figures fig2 [--quick | --full]
"""

from __future__ import annotations

import numpy as np

import numerics
from figures._common import LOSS_COLORS, Context, mark_cliffs, new_figure, save, select
from figures.registry import Figure

__all__ = ["FIGURE", "RECIPES", "curves", "draw"]

RECIPES = ("fig2-top", "fig2-bottom", "fig2-bottom-cube")
_TITLES = {
    "fig2-top": "a+b mod 31, transformer, AdamW lambda 1, eps 1e-8",
    "fig2-bottom": "a^2+b^2 mod 97, MLP, Adam lambda 0, eps 1e-16",
    "fig2-bottom-cube": "a^3+b mod 97, MLP, Adam lambda 0, eps 1e-16 (Sec. 4)",
}


def curves(ax_row, runs, title: str) -> None:
    """Plot loss / margin / test accuracy of `runs` on three axes, one line per run; a
    recipe without runs at this scale (fig2-bottom-cube at quick) names the command."""
    ax_loss, ax_margin, ax_acc = ax_row
    if not runs:
        ax_loss.set_title(title, loc="left")
        ax_margin.text(
            0.5,
            0.5,
            "full scale only:\ngrokbench figures fig2 --full",
            ha="center",
            va="center",
            transform=ax_margin.transAxes,
            fontsize=7,
        )
        return
    for loss in ("standard", "fixed"):
        for i, run in enumerate(select(runs, loss=loss)):
            m = run.metrics
            kw = {"color": LOSS_COLORS[loss], "alpha": 0.8, "linewidth": 0.9}
            label = loss if i == 0 else None
            ax_loss.plot(m["step"], np.maximum(m["train_ce"], 1e-12), label=label, **kw)
            ax_margin.plot(m["step"], m["margin_mean"], label=label, **kw)
            ax_acc.plot(m["test_step"], 100 * m["test_acc"], label=label, **kw)
    cfg = runs[0].config
    cliff = numerics.precision_cliff(np.float32)
    marks = {f"c32 = {cliff:.1f}": cliff}
    if cfg.eps > 0:
        marks[f"log(1/eps) = {numerics.equilibrium_margin(cfg.eps):.1f}"] = (
            numerics.equilibrium_margin(cfg.eps)
        )
    mark_cliffs(ax_margin, marks, axis="y")
    ax_loss.set_yscale("log")
    ax_loss.set_ylabel("train cross-entropy")
    ax_margin.set_ylabel("mean train margin m")
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.set_ylim(-2, 102)
    ax_loss.set_title(title, loc="left")
    for ax in ax_row:
        ax.set_xlabel("step")
    ax_loss.legend(loc="upper right")


def draw(ctx: Context) -> list:
    """Both rows of Figure 2 (the fig2-top and fig2-bottom recipes), and a third for Sec. 4's
    a^3+b mod 97 at lambda 0 (fig2-bottom-cube)."""
    fig, axes = new_figure(len(RECIPES), 3, width=7.8, height=2.4)
    for row, recipe in zip(axes, RECIPES, strict=True):
        curves(row, ctx.runs(recipe), _TITLES[recipe])
    return save(fig, ctx, "fig2")


FIGURE = Figure(
    name="fig2",
    order=2,
    builds={"fig2": draw},
    title="Fig. 2: the slingshot",
    images=("fig2.png",),
    recipes=RECIPES,
)
