"""The setup study: how much each choice the fix paper leaves unstated moves grokking.

The `setup-study` recipe trains fig2-top (a+b mod 31, width 64, AdamW lambda 1, eps 1e-8,
fp32, 10,000 steps) with the defaults, then with one choice changed at a time
(`grokbench.recipes.SETUP_AXES`): the split (one per seed, or one for every seed), the init
scale, a 10-step warmup, p + 1 outputs, the MLP width and the number of heads; fixed and
standard CE, 5 seeds each. A run's grok step is the first test evaluation at >= 99 % test
accuracy (`grok_step` of its summary); a run that never gets there has none.

Figure: one panel per loss, one column per setting, a dot per seed at its grok step (a
cross above the top line for a run that did not grok), the median as a bar. Table
(`setup_study.md`): per setting and loss, how many runs grokked and the median grok step,
counting a run that did not grok as later than every step (so the median is "> steps"
when half or more did not grok), with the final test accuracy and margin.

    python -m figures setup_study [--quick | --full]
"""

from __future__ import annotations

import numpy as np

from figures._common import LOSS_COLORS, Context, Run, new_figure, save
from figures.registry import Figure
from grokbench.recipes import SETUP_AXES, get_recipe
from grokbench.store import atomic_write_bytes

__all__ = [
    "FIGURE",
    "LOSSES",
    "RECIPE",
    "draw",
    "grok_steps",
    "markdown",
    "median_grok",
    "rows",
    "setting",
    "setting_labels",
]

RECIPE = "setup-study"
LOSSES = ("fixed", "standard")


def _format(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def setting_labels() -> list[str]:
    """The settings in study order: 'defaults', then 'key=value' for each changed choice."""
    labels = ["defaults"]
    for axis in SETUP_AXES:
        labels.extend(f"{k}={_format(v)}" for k, values in axis.items() for v in values)
    return labels


def setting(run: Run) -> str:
    """The run's setting: the `SETUP_AXES` key differing from the recipe's base, or 'defaults'."""
    base = get_recipe(RECIPE).base
    keys = dict.fromkeys(k for axis in SETUP_AXES for k in axis)
    changed = [
        f"{k}={_format(getattr(run.config, k))}"
        for k in keys
        if getattr(run.config, k) != getattr(base, k)
    ]
    if len(changed) > 1:
        raise ValueError(f"a setup-study run changes more than one choice: {changed}")
    return changed[0] if changed else "defaults"


def grok_steps(runs: list[Run]) -> list[int | None]:
    """Each run's grok step (None: never at >= 99 % test)."""
    return [r.summary.get("grok_step") for r in runs]


def median_grok(steps: list[int | None]) -> float | None:
    """The median grok step with a non-grokking run counted as later than every step;
    None when that median is itself a non-grokking run (half or more did not grok)."""
    values = sorted(np.inf if s is None else s for s in steps)
    n = len(values)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    return None if not np.isfinite(median) else float(median)


def rows(runs: list[Run]) -> list[dict]:
    """One row per (setting, loss) present, in study order."""
    out = []
    for label in setting_labels():
        for loss in LOSSES:
            group = [r for r in runs if r.config.loss == loss and setting(r) == label]
            if not group:
                continue
            steps = grok_steps(group)
            total = group[0].config.steps
            out.append(
                {
                    "setting": label,
                    "loss": loss,
                    "runs": len(group),
                    "grokked": sum(s is not None for s in steps),
                    "median_grok_step": median_grok(steps),
                    "steps": total,
                    "grok_steps": steps,
                    "median_test_acc": float(
                        np.median([r.summary["test_accuracy"] for r in group])
                    ),
                    "median_margin": float(np.median([r.summary["final_margin"] for r in group])),
                    "spiking_runs": sum(bool(r.summary["spikes"]) for r in group),
                }
            )
    return out


def markdown(table: list[dict]) -> str:
    """The study's table: grokked runs and the median grok step per setting and loss."""
    lines = [
        "| setting | loss | grokked by the last step | median grok step | grok steps (per seed) "
        "| median final test acc | median final margin | runs with spikes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in table:
        median = row["median_grok_step"]
        median_text = f"> {row['steps']:,}" if median is None else f"{median:,.0f}"
        per_seed = ", ".join("-" if s is None else f"{s:,}" for s in row["grok_steps"])
        lines.append(
            f"| {row['setting']} | {row['loss']} | {row['grokked']}/{row['runs']} "
            f"(by {row['steps']:,}) | {median_text} | {per_seed} "
            f"| {100 * row['median_test_acc']:.1f} % | {row['median_margin']:.2f} "
            f"| {row['spiking_runs']}/{row['runs']} |"
        )
    lines.append(
        "\nA run's grok step is its first test evaluation (every 100 steps) at >= 99 % test "
        "accuracy; '-' never. The median counts a run that did not grok as later than every "
        "step. Settings: the defaults, then one choice changed (grokbench.recipes.SETUP_AXES)."
    )
    return "\n".join(lines) + "\n"


def draw(ctx: Context) -> list:
    """The grok-step distribution per setting (one panel per loss) and the Markdown table.
    A build without the study's runs (the quick build trains none) says so in both."""
    runs = ctx.runs(RECIPE)
    if not runs:
        return _without_runs(ctx)
    table = rows(runs)
    labels = [label for label in setting_labels() if any(r["setting"] == label for r in table)]
    losses = [loss for loss in LOSSES if any(r["loss"] == loss for r in table)]
    fig, axes = new_figure(1, len(losses), width=7.8, height=3.0)
    for ax, loss in zip(axes[0], losses, strict=True):
        for x, label in enumerate(labels):
            (row,) = [r for r in table if r["setting"] == label and r["loss"] == loss] or [None]
            if row is None:
                continue
            total = row["steps"]
            jitter = np.linspace(-0.15, 0.15, len(row["grok_steps"]))
            for dx, s in zip(jitter, row["grok_steps"], strict=True):
                if s is None:
                    ax.plot(x + dx, 1.06 * total, "x", color="0.4", markersize=4)
                else:
                    ax.plot(x + dx, s, "o", color=LOSS_COLORS[loss], markersize=3.5, alpha=0.8)
            if row["median_grok_step"] is not None:
                ax.plot([x - 0.3, x + 0.3], [row["median_grok_step"]] * 2, color="k", lw=1.2)
        ax.axhline(table[0]["steps"], color="0.6", lw=0.6, ls="--")
        ax.set_ylim(0, 1.12 * table[0]["steps"])
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=7)
        ax.set_title(f"{loss} CE (x: not grokked)", loc="left")
        ax.set_ylabel("grok step (>= 99 % test)")
    paths = save(fig, ctx, "setup_study")
    md = ctx.out / "setup_study.md"
    atomic_write_bytes(md, markdown(table).encode())
    return [*paths, md]


def _without_runs(ctx: Context) -> list:
    why = (
        "the quick build does not run the setup study"
        if ctx.quick
        else "no setup-study runs in the store"
    )
    command = "grokbench figures setup_study --full"
    fig, axes = new_figure(1, 1, width=7.8, height=3.0)
    ax = axes[0, 0]
    ax.text(0.5, 0.5, f"{why}:\n{command}", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    paths = save(fig, ctx, "setup_study")
    md = ctx.out / "setup_study.md"
    text = f"The setup study's table (setup_study.md)\n\nNo runs: {why} (`{command}`).\n"
    atomic_write_bytes(md, text.encode())
    return [*paths, md]


FIGURE = Figure(name="setup_study", order=10, builds={"setup_study": draw}, recipes=(RECIPE,))
