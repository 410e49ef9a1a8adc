"""Figure 4: margin equilibria. LaProp (tracking sqrt(v) directly), fixed CE, a+b mod 31,
fp32, eps from 1e-4 down to 1e-24 and 0, with (lambda 1) and without (lambda 0) weight decay.

Solid: the mean training margin of each seed; dashed, same colour: the prediction
m*(eps) = log(1/eps). eps = 0 is black, with the margin where e^-m / N leaves fp32's range
(`grokbench.equilibrium.underflow_margin`) dotted. Runs from the `fig4` recipe; the plateau
rule and the table are `grokbench equilibrium`'s (grokbench.equilibrium).

    python -m figures fig4 [--quick | --full]
"""

from __future__ import annotations

import matplotlib as mpl

import numerics
from figures._common import CLIFF_STYLE, Context, new_figure, save, select
from grokbench import equilibrium

NAMES = ("fig4",)
RECIPES = ("fig4",)


def draw(ctx: Context) -> list:
    """Figure 4 from the fig4 recipe."""
    runs = ctx.runs("fig4")
    eps_values = sorted({r.config.eps for r in runs if r.config.eps > 0}, reverse=True)
    cmap = mpl.colormaps["viridis"]
    colors = {e: cmap(i / max(1, len(eps_values) - 1) * 0.9) for i, e in enumerate(eps_values)}
    colors[0.0] = "black"
    fig, axes = new_figure(1, 2, width=7.8, height=3.0, sharey=True)
    for ax, wd in zip(axes[0], (1.0, 0.0), strict=True):
        for eps in [*eps_values, 0.0]:
            group = select(runs, weight_decay=wd, eps=eps)
            for i, run in enumerate(group):
                m = run.metrics
                label = (f"eps {eps:g}" if eps else "eps 0") if i == 0 else None
                ax.plot(
                    m["step"],
                    m["margin_mean"],
                    color=colors[eps],
                    linewidth=0.9,
                    alpha=0.85,
                    label=label,
                )
            if eps and group:
                ax.axhline(
                    numerics.equilibrium_margin(eps),
                    color=colors[eps],
                    linestyle="--",
                    linewidth=0.8,
                )
        zero = select(runs, eps=0.0)
        if zero:
            under = equilibrium.underflow_margin(zero[0].config)
            ax.axhline(under, **CLIFF_STYLE)
            ax.annotate(
                f"fp32 underflow {under:.1f}",
                (1.0, under),
                xycoords=("axes fraction", "data"),
                ha="right",
                va="bottom",
                fontsize=7,
                color="0.35",
            )
        ax.set_title(f"lambda = {wd:g}" + (" (levels off)" if wd else " (overshoots)"))
        ax.set_xlabel("step")
    axes[0, 0].set_ylabel("mean train margin m")
    axes[0, 0].legend(loc="upper left", fontsize=6.5)
    return save(fig, ctx, "fig4")


def run_rows(runs) -> list[dict]:
    """`grokbench equilibrium`'s per-run rows (plateau verdict, peak, stop) for `runs`."""
    return equilibrium.run_rows([(r.summary, r.metrics) for r in runs])


def groups(runs) -> list[dict]:
    """`grokbench equilibrium`'s group rows (one per eps and weight decay) for `runs`."""
    return equilibrium.group_rows(run_rows(runs))
