"""Progress measures over training (Nanda et al.'s, `grokbench.fourier`) for fig2-top's fixed
and standard CE runs (fp32), the slingshot spikes marked. (Prieto et al.'s ⊥Grad claim, in
this figure's report section, is `figures.report.progress`.)

The figure reuses the fig2-top runs (the quick build's, or the full recipe's with --full),
which fig2's build makes (`draws`): it trains nothing of its own. One column per loss (the
first seed); rows: the losses (train CE, test, restricted on all pairs, excluded on the
training pairs), the share of the logits' norm in each frequency (the key frequencies are
those at >= 5 %), and the Gini coefficient of the embedding's Fourier norms beside the total
squared weight norm. Dashed red lines: spikes (`grokbench.slingshot`); dotted grey: the
phase steps of `grokbench.progress` (M memorised, C circuit, K cleanup, G grokked).
"""

from __future__ import annotations

import numpy as np

from figures._common import LOSS_COLORS, Context, line_label, new_figure, save, select
from figures.registry import Figure
from grokbench import fourier, progress

__all__ = ["FIGURE", "LOSSES", "draw"]

LOSSES = ("fixed", "standard")
"""The figure's columns: fig2-top's two losses."""

_PHASES = {"M": "memorization_step", "C": "circuit_step", "K": "cleanup_step", "G": "grok_step"}


def _marks(ax, run, phases: dict) -> None:
    """Spikes (dashed red) and phase steps (dotted grey, lettered at the top)."""
    for step in run.summary.get("spike_steps", []):
        ax.axvline(step, color="tab:red", linestyle="--", linewidth=0.7, alpha=0.7)
    for letter, key in _PHASES.items():
        if phases[key] is not None:
            ax.axvline(phases[key], color="0.5", linestyle=":", linewidth=0.8)
            line_label(ax, letter, phases[key], above=True, color="black")


def _column(axes, run) -> None:
    m = run.metrics
    phases = progress.phases(m)
    ax_loss, ax_freq, ax_norm = axes
    color = LOSS_COLORS[run.config.loss]
    ax_loss.plot(m["step"], np.maximum(m["train_ce"], 1e-9), color=color, lw=0.8, label="train")
    tests = m["test_step"]
    ax_loss.plot(tests, m["test_loss"], color="k", lw=0.9, label="test")
    # Losses below 1e-9 (a restricted loss of ~1e-8 can round to 0 or below) sit on the floor.
    for name, c in (("restricted_loss", "tab:blue"), ("excluded_loss", "tab:purple")):
        label = name.removesuffix("_loss")
        ax_loss.plot(tests, np.maximum(m[name], 1e-9), color=c, lw=0.9, label=label)
    ax_loss.set_yscale("log")
    ax_loss.set_ylabel("loss (nats)")
    ax_loss.set_title(f"{run.config.loss} CE, seed {run.config.seed}", loc="left")
    share = m["logit_freq_share"]
    image = ax_freq.imshow(
        share.T,
        aspect="auto",
        origin="lower",
        cmap="viridis",
        vmin=0.0,
        vmax=max(float(share.max()), fourier.KEY_SHARE),
        extent=(0, tests[-1], 0.5, share.shape[1] + 0.5),
        interpolation="nearest",
    )
    ax_freq.set_ylabel("frequency k")
    ax_freq.set_yticks(range(1, share.shape[1] + 1, 2))
    ax_freq.figure.colorbar(image, ax=ax_freq, label="share of logit norm", pad=0.01)
    ax_norm.plot(tests, m["gini"], color="tab:orange", lw=0.9)
    ax_norm.set_ylabel("Gini of embedding", color="tab:orange")
    twin = ax_norm.twinx()
    twin.plot(tests, m["weight_sq"], color="0.3", lw=0.9)
    twin.set_ylabel("sum of squared weights")
    for ax in axes:
        _marks(ax, run, phases)
        ax.set_xlabel("step")
    ax_loss.legend(loc="lower left", fontsize=6)


def draw(ctx: Context) -> list:
    """The figure (progress.png/.pdf) from the fig2-top runs of this build's scale."""
    runs = ctx.runs("fig2-top")
    fig, axes = new_figure(3, len(LOSSES), width=8.4, height=2.2)
    for col, loss in enumerate(LOSSES):
        _column(axes[:, col], select(runs, loss=loss)[0])
    return save(fig, ctx, "progress")


FIGURE = Figure(
    name="progress",
    order=8,
    builds={"progress": draw},
    draws=("fig2-top",),  # fig2-top's runs, which fig2's build makes
    title="Progress measures and ⊥Grad (Nanda et al., Prieto et al.)",
    images=("progress.png",),
)
