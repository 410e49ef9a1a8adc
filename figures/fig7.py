"""Figure 7: distillation from an identical teacher (Softmax Cancellation), from `fig7`.

The student starts with the teacher's weights on a+b mod 53 and trains on its soft targets
(T = 4, Adam lr 2e-3, lambda 0, eps 1e-8). Columns: fp32/bf16 (bf16 compute on fp32 weights),
fp32, fp64. Rows: KL(teacher || student) on the training inputs (float64 from the logits;
an exact 0 is drawn as a labelled band on the bottom edge, since a log axis has no 0), the
parameter distance from the teacher, and test accuracy. Standard vs fixed soft-target cross-entropy.

    python -m figures fig7 [--quick | --full]
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np

from figures._common import LOSS_COLORS, Context, new_figure, save, select
from figures._panels import FIG7_PRECISIONS as PRECISIONS
from figures._panels import FIG7_SOFT_TARGET as _SOFT_TARGET
from figures.registry import Figure

__all__ = ["FIGURE", "PRECISIONS", "draw"]

_FLOOR = {"kl": 1e-40, "param_distance": 1e-20}


def _log_curve(ax, step, values, floor, color, label) -> bool:
    """Plot the positive values; exact zeros as a band (or a dot) at `floor`. Any zeros?"""
    positive = values > 0
    ax.plot(step, np.where(positive, values, np.nan), color=color, label=label)
    zero = step[values == 0]
    if zero.size:  # a log axis has no 0: a band on the bottom edge
        ax.plot(
            zero[[0, -1]],
            [floor, floor],
            color=color,
            linewidth=3,
            alpha=0.7,
            marker="o",
            markersize=3,
        )
    return bool(zero.size)


def draw(ctx: Context) -> list:
    """Figure 7 from the fig7 recipe."""
    runs = ctx.runs("fig7")
    fig, axes = new_figure(3, 3, width=7.8, height=2.1, sharex=True)
    for col, (precision, _) in enumerate(PRECISIONS):
        ax_kl, ax_dist, ax_acc = axes[:, col]
        zeros = {"kl": False, "param_distance": False}
        for loss in ("standard", "fixed"):
            for run in select(runs, precision=precision, loss=loss, **_SOFT_TARGET):
                m = run.metrics
                color = LOSS_COLORS[loss]
                for name, ax in (("kl", ax_kl), ("param_distance", ax_dist)):
                    zeros[name] |= _log_curve(ax, m["step"], m[name], _FLOOR[name], color, loss)
                ax_acc.plot(m["test_step"], 100 * m["test_acc"], color=color, label=loss)
        for name, ax, top in (("kl", ax_kl, 100), ("param_distance", ax_dist, 1e3)):
            floor = _FLOOR[name]
            ax.set_yscale("log")
            ax.set_ylim(floor / 10, top)
            # Labelled decades stop well above the zero band, so the band reads as no value.
            gap = 10 if name == "kl" else 5
            ax.set_yticks(10.0 ** np.arange(np.log10(floor) + gap, np.log10(top), gap))
            ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            if zeros[name]:
                ax.annotate(
                    "band: exactly 0",
                    (0.5, floor),
                    xycoords=("axes fraction", "data"),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=6.5,
                    color="0.3",
                )
        ax_acc.set_ylim(-2, 102)
        ax_kl.set_title(precision)  # the precision's name, as in Table 1 and the report
        ax_acc.set_xlabel("step")
    axes[0, 0].set_ylabel("KL(teacher || student)")
    axes[1, 0].set_ylabel("|theta_S - theta_T|")
    axes[2, 0].set_ylabel("test accuracy (%)")
    axes[2, 0].legend(loc="lower left", fontsize=6.5)
    return save(fig, ctx, "fig7")


FIGURE = Figure(
    name="fig7",
    order=7,
    builds={"fig7": draw},
    title="Fig. 7: distillation",
    images=("fig7.png",),
    recipes=("fig7",),
)
