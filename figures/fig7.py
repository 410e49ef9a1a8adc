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

NAMES = ("fig7",)
RECIPES = ("fig7",)
PRECISIONS = (("fp32/bf16", "bf16"), ("fp32", "fp32"), ("fp64", "fp64"))
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
            for run in select(runs, precision=precision, loss=loss):
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


# --- the report's distillation claims -------------------------------------------------------

PAPER_RESIDUAL = {"fp32/bf16": 1e-3, "fp32": 1e-8, "fp64": 1e-17}
"""The paper's residual gradient of standard soft-target CE at z_S = z_T (Sec. 7: '~')."""


def claims_at_start(runs) -> list:
    """Claims any scale tests: the residual at step 0 and the fixed student never moving."""
    from figures.report import Row, _verdict

    rows = []
    for precision, name in PRECISIONS:
        std = select(runs, precision=precision, loss="standard")
        fixed = select(runs, precision=precision, loss="fixed")
        if std:
            r = std[0].summary["residual_gradient"]
            paper = PAPER_RESIDUAL[precision]
            rows.append(
                Row(
                    f"standard soft-target CE's residual gradient at z_S = z_T ({name})",
                    "Sec. 7, Fig. 7",
                    f"~{paper:g}",
                    f"max |q - p| at step 0: {r:.2g}",
                    "within a factor 100 (the paper quotes orders of magnitude)",
                    _verdict(paper / 100 <= r <= paper * 100),
                )
            )
        if fixed:
            s = fixed[0].summary
            moved = (s["residual_gradient"], s["kl_max"], s["max_param_distance"])
            rows.append(
                Row(
                    f"fixed soft-target CE: zero gradient, KL 0, student never moves ({name})",
                    "Sec. 7, Fig. 7",
                    "g = 0, KL = 0, 100 % test",
                    f"residual {moved[0]:g}, max KL {moved[1]:g}, max distance {moved[2]:g}, "
                    f"test {100 * s['min_test_accuracy']:.1f}-{100 * s['test_accuracy']:.1f} % "
                    f"(teacher {100 * s['teacher_test_accuracy']:.1f} %)",
                    "all exactly 0; test accuracy = the teacher's at every step",
                    _verdict(
                        moved == (0.0, 0.0, 0.0)
                        and s["min_test_accuracy"]
                        == s["teacher_test_accuracy"]
                        == s["test_accuracy"]
                    ),
                )
            )
    return rows


def claims_full(runs) -> list:
    """Claims about the 2,000-step trajectories of standard soft-target CE."""
    from figures.report import Row, _verdict

    rows = []
    by = {p: select(runs, precision=p, loss="standard") for p, _ in PRECISIONS}
    if by["fp64"]:
        s = by["fp64"][0].summary
        rows.append(
            Row(
                "fp64 standard: the residual (below eps) leaves the student near KL 0",
                "Sec. 7, Fig. 7",
                "KL stays ~0",
                f"max KL {s['kl_max']:.2g}, final {s['kl_final']:.2g}, "
                f"max distance {s['max_param_distance']:.2g}",
                "max KL <= 1e-6 (below fp32's floor)",
                _verdict(s["kl_max"] <= 1e-6),
            )
        )
    if by["fp32"]:
        run = by["fp32"][0]
        kl = run.metrics["kl"]
        floor = float(np.median(kl[-500:]))
        rows.append(
            Row(
                "fp32 standard: a KL spike, then a floor near 1e-6",
                "Sec. 7, Fig. 7",
                "floor ~1e-6",
                f"spike {run.summary['kl_max']:.2g}, floor (median of the last 500 steps) "
                f"{floor:.2g}",
                "floor within a factor 10 of 1e-6, spike above it",
                _verdict(1e-7 <= floor <= 1e-5 and run.summary["kl_max"] > floor),
            )
        )
    if by["fp32/bf16"]:
        s = by["fp32/bf16"][0].summary
        rows.append(
            Row(
                "bf16 standard: the student drifts away and test accuracy drops",
                "Sec. 7, Fig. 7",
                "drifts; accuracy degrades",
                f"max distance {s['max_param_distance']:.3g}, test accuracy min "
                f"{100 * s['min_test_accuracy']:.1f} %, final {100 * s['test_accuracy']:.1f} %",
                "min test accuracy < 99 %",
                _verdict(s["min_test_accuracy"] < 0.99),
            )
        )
    return rows
