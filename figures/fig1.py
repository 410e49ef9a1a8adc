"""Figure 1: the two bugs, measured against mpmath.

fig1a (Softmax Collapse): the target-logit gradient of cross-entropy on logits [m, 0]
(target 0) against the margin m, standard vs fixed, in bf16, fp32 and fp64, with the
256-bit mpmath value at the same (rounded) inputs. Standard CE's gradient is exactly 0
from the cliff p ln 2 on (drawn as marks on the bottom edge: a log axis has no 0); the fixed
one follows the truth until e^-m itself underflows.

fig1b (Softmax Cancellation): the soft-target gradient's error against the distance
between student and teacher logits. Teacher rows are fixed random logits (K = 10); the
student is teacher + delta * u for a random unit direction u, both rounded to the dtype,
and the truth is mpmath's gradient at exactly those rounded inputs. Plotted: the median
over rows of max_k |g_k - g_k^true|, and the truth's own size max_k |g_k^true| for scale.
Standard CE's error stalls at a floor (its residual at z_S = z_T); the fixed one's error
shrinks with the gradient.

    python -m figures fig1
"""

from __future__ import annotations

import matplotlib.ticker
import ml_dtypes
import numpy as np

import numerics
from figures._analytic import DTYPES, LOSSES, soft_target_errors, target_gradients
from figures._common import LOSS_COLORS, Context, mark_cliffs, new_figure, save
from figures.registry import Figure

__all__ = ["FIGURE", "draw_fig1a", "draw_fig1b"]


def _floor(values: np.ndarray, floor: float) -> np.ndarray:
    return np.where(values > 0, values, np.nan) if floor <= 0 else np.maximum(values, floor)


def draw_fig1a(ctx: Context) -> list:
    fig, axes = new_figure(1, 3, height=2.6)
    for ax, (name, dtype) in zip(axes[0], DTYPES, strict=True):
        tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
        hi = -np.log(tiny) * 1.08
        g = target_gradients(dtype, np.linspace(0.05, hi, 400 if ctx.quick else 1200))
        m = g["m"]
        ax.plot(m, -g["truth"], color="black", linestyle="--", linewidth=1.0, label="mpmath")
        for loss in LOSSES:
            mag = -g[loss]
            ax.plot(m, np.where(mag > 0, mag, np.nan), color=LOSS_COLORS[loss], label=loss)
            zero = m[mag == 0]
            if zero.size:  # exactly-zero gradients: a log axis has no 0, so a band on its edge
                ax.plot(zero[[0, -1]], [tiny, tiny], color=LOSS_COLORS[loss], linewidth=4)
        # The point of the panel: past the cliff the standard gradient is exactly 0.
        std_zero = m[-g["standard"] == 0]
        if std_zero.size:
            ax.axvspan(std_zero[0], hi, color=LOSS_COLORS["standard"], alpha=0.08, linewidth=0)
            ax.text(
                0.7,
                0.62,
                "shaded: standard\ngradient exactly 0\n(band on the axis)",
                transform=ax.transAxes,
                color=LOSS_COLORS["standard"],
                ha="center",
                va="center",
                fontsize=7,
            )
        mark_cliffs(
            ax, {f"c = {numerics.precision_cliff(dtype):.1f}": numerics.precision_cliff(dtype)}
        )
        ax.set_yscale("log")
        ax.set_ylim(tiny, 1.5)
        # Decades 10 or 100 apart: fp64's range spans 324 of them.
        decades = -np.log10(tiny)
        step = 100 if decades > 100 else 10
        ax.set_yticks(10.0 ** -np.arange(0, decades, step))
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlim(0, hi)
        ax.set_title(f"{name}: target-logit gradient")
        ax.set_xlabel("logit margin m")
    axes[0, 0].set_ylabel("|dL/dz_t|")
    axes[0, 2].legend(loc="upper right")
    return save(fig, ctx, "fig1a")


def draw_fig1b(ctx: Context) -> list:
    fig, axes = new_figure(1, 3, width=7.8, height=2.6)
    distances = np.logspace(-14, 0, 15 if ctx.quick else 43)
    for ax, (name, dtype) in zip(axes[0], DTYPES, strict=True):
        e = soft_target_errors(dtype, distances)
        ax.plot(distances, e["truth"], "k--", linewidth=1.0, label="|true gradient|")
        bottom = 1e-34 if name == "fp64" else 1e-20
        for loss in LOSSES:
            err = e[loss]
            ax.plot(
                distances,
                np.where(err > 0, err, np.nan),
                color=LOSS_COLORS[loss],
                marker=".",
                markersize=3,
                label=f"{loss}: error",
            )
            zero = distances[err == 0]
            if zero.size:  # error exactly 0, drawn on the bottom edge
                ax.plot(
                    zero,
                    np.full(zero.shape, bottom),
                    "|",
                    color=LOSS_COLORS[loss],
                    markersize=6,
                    label=f"{loss}: error exactly 0",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(bottom, 10)
        ax.set_title(f"{name}: soft-target gradient error")
        ax.set_xlabel("distance |z_S - z_T|")
    axes[0, 0].set_ylabel("max_k |g_k - g_k(mpmath)|")
    axes[0, 0].legend(loc="center left", fontsize=6.5)
    return save(fig, ctx, "fig1b")


FIGURE = Figure(
    name="fig1",
    order=1,
    builds={"fig1a": draw_fig1a, "fig1b": draw_fig1b},
    title="Sec. 1-3 and Fig. 1: the two bugs",
    images=("fig1a.png", "fig1b.png"),
)
