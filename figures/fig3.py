"""Figure 3: the normalized Adam step |g_t| / (|g_t| + eps) against the margin, eps 1e-8.

Analytic: g_t is the target-logit gradient of cross-entropy on logits [m, 0] in the
compute dtype (figures._analytic.target_gradients). With fixed CE the step stays near 1 and
falls smoothly around log(1/eps) = 18.4; standard CE's step drops to 0 at the cliff of its
dtype (c16 = 5.5 in bf16, c32 = 16.6 in fp32), before the equilibrium is reached.

    python -m figures fig3
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import numerics
from figures._analytic import EPS, normalized_steps
from figures._common import LOSS_COLORS, Context, mark_cliffs, new_figure, save
from figures.registry import Figure

__all__ = ["FIGURE", "draw"]

_DTYPES = (("bf16", ml_dtypes.bfloat16, ":"), ("fp32", np.float32, "-"))


def draw(ctx: Context) -> list:
    """Figure 3 (analytic: no training)."""
    fig, axes = new_figure(1, 1, width=4.2, height=2.8)
    ax = axes[0, 0]
    margins = np.linspace(0.0, 30.0, 1500)
    for name, dtype, linestyle in _DTYPES:
        steps = normalized_steps(dtype, margins)
        for loss in ("standard", "fixed"):
            ax.plot(
                steps["m"],
                steps[loss],
                color=LOSS_COLORS[loss],
                linestyle=linestyle,
                label=f"{loss} {name}",
            )
    ax.plot(
        margins[::5],
        normalized_steps(np.float64, margins[::5], truth=True)["truth"],
        "k--",
        linewidth=0.8,
        label="exact",
    )
    mark_cliffs(
        ax,
        {
            "c16": numerics.precision_cliff(ml_dtypes.bfloat16),
            "c32": numerics.precision_cliff(np.float32),
            "log(1/eps)": numerics.equilibrium_margin(EPS),
        },
    )
    ax.set_xlabel("logit margin m")
    ax.set_ylabel("|g_t| / (|g_t| + eps)")
    ax.set_title("normalized Adam step, eps = 1e-8")
    ax.legend(loc="lower left")
    return save(fig, ctx, "fig3")


FIGURE = Figure(
    name="fig3",
    order=3,
    builds={"fig3": draw},
    title="Fig. 3: the normalized Adam step",
    images=("fig3.png",),
)
