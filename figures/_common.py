"""What every figure script shares: the build context, cached runs, one plot style, saving.

A figure script gets a `Context` and asks it for a recipe's runs (`ctx.runs("fig2-top")`).
The context expands the recipe at the build's scale (`--quick` or `--full`) and sends it
through `grokbench.experiment.run_configs`, the path `grokbench run` takes: finished runs
are loaded from the store, missing ones are trained there and then stored. So figures
never train anything a second way, and a warm store makes a build take seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display needed (or wanted) on a headless machine

import matplotlib.pyplot as plt
import numpy as np

from grokbench import experiment, recipes
from grokbench.config import RunConfig
from grokbench.store import Store, atomic_write_bytes, load_metrics

__all__ = [
    "CLIFF_STYLE",
    "LOSS_COLORS",
    "PRECISION_COLORS",
    "Context",
    "Run",
    "margin_curves",
    "mark_cliffs",
    "new_figure",
    "save",
    "save_to",
    "select",
    "style",
]

LOSS_COLORS: dict[str, str] = {
    "fixed": "#1b7837",  # green: the fix
    "standard": "#b2182b",  # red: the bug
    "zero_sum": "#2166ac",
    "stablemax": "#762a83",
}
"""One colour per loss variant, in every figure."""

PRECISION_COLORS: dict[str, str] = {
    "bf16": "#e08214",
    "fp32/bf16": "#e08214",
    "fp32": "#2166ac",
    "fp64": "#4d4d4d",
}
"""One colour per precision (bf16 compute on fp32 parameters shares bf16's)."""

CLIFF_STYLE: dict[str, Any] = {"color": "0.45", "linestyle": ":", "linewidth": 1.0}
"""Vertical/horizontal marker lines for precision cliffs."""

_RC: dict[str, Any] = {
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 7.5,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "lines.linewidth": 1.2,
    "pdf.fonttype": 42,  # embed TrueType, so the PDF text stays text
}


def style() -> None:
    """Apply the one style all grokbench figures share."""
    plt.rcParams.update(_RC)


def new_figure(nrows: int, ncols: int, width: float = 7.0, height: float = 2.4, **kw: Any):
    """A styled (figure, axes) grid, `height` inches per row; axes always a 2-D array."""
    style()
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width, height * nrows), squeeze=False, layout="constrained", **kw
    )
    return fig, axes


def mark_cliffs(ax, cliffs: Mapping[str, float], axis: str = "x", label: bool = True) -> None:
    """Dotted lines at the given cliffs (name -> margin), labelled at the top/right edge."""
    for name, value in cliffs.items():
        if axis == "x":
            ax.axvline(value, **CLIFF_STYLE)
            if label:
                ax.annotate(
                    name,
                    (value, 1.0),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    color="0.35",
                    ha="left",
                    va="top",
                    xytext=(2, -2),
                    textcoords="offset points",
                )
        else:
            ax.axhline(value, **CLIFF_STYLE)
            if label:
                ax.annotate(
                    name,
                    (1.0, value),
                    xycoords=("axes fraction", "data"),
                    fontsize=7,
                    color="0.35",
                    ha="right",
                    va="bottom",
                )


@dataclasses.dataclass
class Run:
    """One finished run: its config, summary.json, and (loaded on first use) its metrics."""

    config: RunConfig
    summary: dict
    run_dir: pathlib.Path

    @functools.cached_property
    def metrics(self) -> dict[str, np.ndarray]:
        """The stored metric columns (see grokbench.metrics)."""
        return load_metrics(self.run_dir)


@dataclasses.dataclass
class Context:
    """One figures build: its scale, where images go, the store, and the runs it loaded.

    `overrides` (key -> tuple of values, as `grokbench run` parses them) are applied to every
    recipe; tests use them to shrink recipes. `train=False` never trains: a recipe with a
    missing run gives None (the report uses that to say what was not tested).
    """

    quick: bool
    out: pathlib.Path
    store: Store
    progress: bool = True
    overrides: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    _cache: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def scale(self) -> str:
        """'quick' or 'full'."""
        return "quick" if self.quick else "full"

    def configs(self, recipe: str) -> list[RunConfig]:
        """The recipe's runs at this build's scale."""
        return recipes.expand(recipes.get_recipe(recipe), self.overrides, quick=self.quick)

    def runs(self, recipe: str, train: bool = True) -> list[Run] | None:
        """The recipe's finished runs, training the missing ones unless `train` is False."""
        if recipe in self._cache:
            return self._cache[recipe]
        configs = self.configs(recipe)
        if not train:
            summaries = [self.store.load_summary(cfg) for cfg in configs]
            if any(s is None for s in summaries):
                return None
        else:
            summaries = experiment.run_configs(configs, self.store, progress=self.progress)
        runs = [
            Run(cfg, summary, self.store.run_dir(cfg))
            for cfg, summary in zip(configs, summaries, strict=True)
        ]
        self._cache[recipe] = runs
        return runs


def margin_curves(ax, runs: Sequence[Run], *, color, label: str | None = None, alpha=0.8) -> None:
    """One thin line per run: its mean training margin against the step (`label` on the
    first only, so a legend names the group once)."""
    for i, run in enumerate(runs):
        m = run.metrics
        ax.plot(
            m["step"],
            m["margin_mean"],
            color=color,
            alpha=alpha,
            linewidth=0.9,
            label=label if i == 0 else None,
        )


def select(runs: Sequence[Run], **where: Any) -> list[Run]:
    """The runs whose config has every given key = value."""
    return [r for r in runs if all(getattr(r.config, k) == v for k, v in where.items())]


def save(fig, ctx: Context, name: str) -> list[pathlib.Path]:
    """Write OUT/NAME.png and OUT/NAME.pdf (each atomically), close the figure, return paths."""
    return save_to(fig, ctx.out, name)


def save_to(fig, out: pathlib.Path, name: str) -> list[pathlib.Path]:
    """`save` into the directory `out` (for figures drawn outside a build: `grokbench quant`)."""
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    try:
        for path in paths:
            buf = io.BytesIO()
            fig.savefig(buf, format=path.suffix[1:])
            atomic_write_bytes(path, buf.getvalue())
    finally:
        plt.close(fig)
    return paths
