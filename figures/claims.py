"""What every figure's `claims(evidence)` shares: the row, the evidence, and one verdict rule.

A claim's row says what the paper states (`figures.paper`), what we measured, the
tolerance, and a status:

- `holds` / `fails`: measured on this build's runs;
- `not tested`: no measurement, with the reason and the command that makes one. There is
  no verdict without data: a claim whose measurement is missing (an empty list of runs, a
  run that lacks a value) is `not tested`, never `holds`.

Each figure module builds its rows with `claim_row`, from data or without it, so a claim that
cannot be tested appears exactly as it does when tested, only with its reason. Nothing here
trains: `Evidence` holds what the store already has.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from figures._common import Run

__all__ = [
    "FAILS",
    "HOLDS",
    "NOT_TESTED",
    "Evidence",
    "Row",
    "claim_row",
    "finite",
    "grok_rate",
    "mean_std",
    "per_seed",
    "pm",
    "seeds",
    "spikes_row",
]

HOLDS, FAILS, NOT_TESTED = "holds", "fails", "not tested"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    """One claim's verdict."""

    claim: str
    source: str  # where the paper states it: paper, section / figure / table
    paper: str
    ours: str
    tolerance: str
    status: str
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What a build's report reads: stored runs per recipe (None: not in the store), the
    quant lab's table, the CE benchmark's output, and the store (fig7 reads teachers)."""

    scale: str  # 'quick' or 'full'
    recipes: Mapping[str, list[Run] | None] = dataclasses.field(default_factory=dict)
    quant: Mapping[str, Any] | None = None
    bench: Mapping[str, Any] | None = None
    store: Any = None

    def runs(self, recipe: str, full: bool = False) -> list[Run]:
        """The recipe's runs; [] when they are missing, or when `full` and this is quick."""
        if full and self.scale != "full":
            return []
        return self.recipes.get(recipe) or []

    def why(self, recipe: str, full: bool = False) -> str:
        """Why `runs(recipe, full)` may be empty, with the command that makes the runs."""
        from figures import registry  # it imports the figure modules, which import this one

        if recipe in registry.run_only():
            quick = " --quick" if self.scale == "quick" and not full else ""
            return f"no {recipe} runs of this scale in the store (`grokbench run {recipe}{quick}`)"
        figure = registry.figure_of().get(recipe, recipe)
        if full and self.scale != "full":
            return (
                f"needs the full-scale runs (`grokbench figures {figure} --full`); "
                "quick runs are shorter, with fewer seeds"
            )
        flag = "" if self.scale == "quick" else " --full"
        return f"no {recipe} runs in the store (`grokbench figures {figure}{flag}` makes them)"


def claim_row(
    *,
    claim: str,
    source: str,
    paper: str,
    tolerance: str,
    ours: Callable[[], str] | str,
    ok: Callable[[], bool] | bool | None,
    why: str = "",
) -> Row:
    """A claim's row. `ok` None (no measurement) gives `not tested` with `why`; otherwise
    `ok` (called if callable, so a check never runs on missing data) gives the verdict."""
    if ok is None:
        return Row(
            claim=claim,
            source=source,
            paper=paper,
            ours="-",
            tolerance=tolerance,
            status=NOT_TESTED,
            note=why,
        )
    verdict = ok() if callable(ok) else ok
    return Row(
        claim=claim,
        source=source,
        paper=paper,
        ours=ours() if callable(ours) else ours,
        tolerance=tolerance,
        status=HOLDS if verdict else FAILS,
    )


def mean_std(values: Iterable[float | None]) -> tuple[float, float] | None:
    """Mean and sample std of the values; None when there are none (or any is missing)."""
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    a = np.asarray(values, float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def pm(stat: tuple[float, float] | None, scale: float = 1.0, digits: int = 1) -> str:
    """'mean +- std' (scaled), or '-' without data."""
    if stat is None:
        return "-"
    mean, std = stat
    return f"{scale * mean:.{digits}f} +- {scale * std:.{digits}f}"


def seeds(runs: Sequence[Run]) -> str:
    """'N seeds, S steps' of a group of runs."""
    return f"{len(runs)} seeds, {runs[0].config.steps} steps" if runs else "no runs"


def finite(x: float | None) -> bool:
    """A measured value that exists and is finite."""
    return x is not None and math.isfinite(x)


def per_seed(runs: Sequence[Run], key: str) -> list | None:
    """Each run's summary value `key`; None when there are no runs or any run lacks it."""
    values = [r.summary.get(key) for r in runs]
    return values if runs and all(v is not None for v in values) else None


def spikes_row(
    *,
    claim: str,
    source: str,
    paper: str,
    groups: Mapping[str, tuple[Sequence[Run], int, int | None]],
    why: str,
) -> Row:
    """The spikes-per-seed row: for each group `label -> (runs, least, most)` every run has
    between `least` and `most` spikes (`most` None: no upper bound). `not tested` when a group
    has no runs or a run lacks its count. One group may have the empty label."""
    counts = {label: per_seed(runs, "spikes") for label, (runs, _, _) in groups.items()}

    def rule(least: int, most: int | None) -> str:
        if most is None:
            return f">= {least}"
        return f"{least}" if least == most else f"{least}-{most}"

    def named(label: str, text: str) -> str:
        return f"{label}: {text}" if label else text

    first = next(iter(groups.values()))[0]
    return claim_row(
        claim=claim,
        source=source,
        paper=paper,
        ours=lambda: (
            "spikes per seed "
            + "; ".join(named(label, str(c)) for label, c in counts.items())
            + f" ({seeds(first)})"
        ),
        tolerance="; ".join(
            named(label, f"{rule(least, most)} on every seed")
            for label, (_, least, most) in groups.items()
        ),
        ok=None
        if any(c is None for c in counts.values())
        else all(
            least <= n and (most is None or n <= most)
            for label, (_, least, most) in groups.items()
            for n in counts[label]
        ),
        why=why,
    )


def grok_rate(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The Clopper-Pearson (exact binomial) interval of a rate of k successes in n trials."""
    from scipy import stats  # jax's own dependency; the exact interval, not a normal guess

    interval = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)
