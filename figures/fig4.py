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
import numpy as np

import numerics
from figures import paper
from figures._common import CLIFF_STYLE, Context, new_figure, save, select
from figures.claims import Evidence, Row, claim_row
from figures.registry import Figure
from grokbench import equilibrium


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


# --- the report's claims (Fig. 4, Sec. 5) -----------------------------------------------------

EPS = (1e-4, 1e-8, 1e-12, 1e-16, 1e-24)
"""The fig4 recipe's eps > 0 (the paper's Fig. 4 spans these)."""


def claims(evidence: Evidence) -> list[Row]:
    """Plateaus at log(1/eps) with lambda 1, eps = 0 up to underflow, overshoot with lambda 0."""
    runs = evidence.runs("fig4", full=True)
    why = evidence.why("fig4", full=True)
    by = {(g["eps"], g["weight_decay"]): g for g in groups(runs)} if runs else {}
    peaks = (
        [
            r["peak"]
            for r in run_rows(runs)
            if r["config"]["eps"] == 0 and r["config"]["weight_decay"] > 0
        ]
        if runs
        else []
    )
    n = paper.FIG4_UNDERFLOW
    rows = [
        claim_row(
            claim="eps = 0 (lambda 1): the margin grows until fp32 gradients underflow",
            source=n.where,
            paper=n.stated,
            ours=lambda: "largest margin per seed " + ", ".join(f"{x:.1f}" for x in peaks),
            tolerance=f"mean {n.tolerance}",
            ok=None if not peaks else n.holds(float(np.mean(peaks))),
            why=why,
        )
    ]
    for wd in (1.0, 0.0):
        for eps in EPS:
            g = by.get((eps, wd))
            predicted = numerics.equilibrium_margin(eps)
            shown = (
                "-"
                if g is None or g["measured_mean"] is None
                else (
                    f"{g['measured_mean']:.2f} +- {g['measured_std']:.2f} "
                    f"({g['plateaued']:.0%} of {g['n']} plateaued)"
                )
            )
            if wd:
                number = paper.margin(
                    predicted,
                    f"levels off at log(1/eps) = {predicted:.2f}",
                    f"{paper.FIX}, Fig. 4a, Eq. 11",
                )
                rows.append(
                    claim_row(
                        claim=f"plateau margin = log(1/eps), eps {eps:g}, lambda 1",
                        source=number.where,
                        paper=number.stated,
                        ours=shown,
                        tolerance=f"{number.tolerance}; every run plateaued",
                        ok=None
                        if g is None
                        else lambda g=g, number=number: (
                            g["measured_mean"] is not None
                            and g["plateaued"] == 1.0
                            and number.holds(g["measured_mean"])
                        ),
                        why=why,
                    )
                )
            else:
                rows.append(
                    claim_row(
                        claim=f"without weight decay the margin overshoots log(1/eps), eps {eps:g}",
                        source=f"{paper.FIX}, Fig. 4b",
                        paper=f"> {predicted:.2f}",
                        ours=shown,
                        tolerance="mean above the prediction",
                        ok=None
                        if g is None
                        else lambda g=g, predicted=predicted: (
                            g["measured_mean"] is not None and g["measured_mean"] > predicted
                        ),
                        why=why,
                    )
                )
    return rows


FIGURE = Figure(
    name="fig4",
    order=4,
    builds={"fig4": draw},
    title="Fig. 4: margin equilibria",
    images=("fig4.png",),
    claims=claims,
    recipes=("fig4",),
)
