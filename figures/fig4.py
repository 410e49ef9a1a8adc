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
from figures._common import (
    CLIFF_STYLE,
    Context,
    line_label,
    margin_curves,
    new_figure,
    save,
    select,
)
from figures.registry import Figure
from grokbench import equilibrium

__all__ = ["FIGURE", "draw"]


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
            label = f"eps {eps:g}" if eps else "eps 0"
            margin_curves(ax, group, color=colors[eps], label=label, alpha=0.85)
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
            line_label(ax, f"fp32 underflow {under:.1f}", under, axis="y")
        ax.set_title(f"lambda = {wd:g}" + (" (levels off)" if wd else " (overshoots)"))
        ax.set_xlabel("step")
    axes[0, 0].set_ylabel("mean train margin m")
    axes[0, 0].legend(loc="upper left", fontsize=6.5)
    return save(fig, ctx, "fig4")


FIGURE = Figure(
    name="fig4",
    order=4,
    builds={"fig4": draw},
    title="Fig. 4: margin equilibria",
    images=("fig4.png",),
    recipes=("fig4",),
)
