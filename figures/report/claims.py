"""What every figure's `claims(evidence)` shares: the row, the evidence, and one verdict rule.

A claim's row says what the paper states (`figures.report.paper`), what we measured, the
tolerance, and a status:

- `holds` / `fails`: measured on this build's runs;
- `not tested`: no measurement, with the reason and the command that makes one. There is
  no verdict without data: a claim whose measurement is missing (an empty list of runs, a
  run that lacks a value) is `not tested`, never `holds`.

Each figure's claims module (`figures.report.figN`) builds its rows with `claim_row`, from
data or without it, so a claim that cannot be tested appears exactly as it does when tested,
only with its reason. Nothing here trains: `Evidence` holds what the store already has.

A verdict names the criteria that decided it. A row with one test has the one criterion
`TOLERANCE` (its stated tolerance); a row whose tolerance joins several tests ("> 0 on every
margin, within 16 eps of Eq. 4's value") passes `claim_row` a mapping of criterion -> passed,
and the row records every criterion (`Row.criteria`) and the ones that failed (`Row.failed`).
The report prints the failed ones, and the tests' must-fail cases assert which criterion each
one breaks (tests/figures/test_claims.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from figures._common import Run
from grokbench import recipes

Verdict = bool | Mapping[str, bool]
"""What a row's check returns: one test's outcome, or each named criterion's."""

__all__ = [
    "FAILS",
    "HOLDS",
    "NOT_TESTED",
    "TOLERANCE",
    "Evidence",
    "Row",
    "claim_row",
    "crossing",
    "finite",
    "grok_rate",
    "mean_std",
    "measured",
    "per_seed",
    "pm",
    "seeds",
    "spikes_row",
]

HOLDS, FAILS, NOT_TESTED = "holds", "fails", "not tested"

TOLERANCE = "tolerance"
"""The one criterion of a row whose verdict is a single test: its stated tolerance."""


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
    criteria: tuple[str, ...] = ()  # what the verdict tested; () when not tested
    failed: tuple[str, ...] = ()  # the criteria that failed; () unless the row fails


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
        from figures import registry  # it imports the claims modules, which import this one

        if recipe in registry.run_only():
            quick = " --quick" if self.scale == "quick" and not full else ""
            return f"no {recipe} runs of this scale in the store (`grokbench run {recipe}{quick}`)"
        figure = registry.figure_of().get(recipe, recipe)
        if full and self.scale != "full":
            return (
                f"needs the full-scale runs (`grokbench figures {figure} --full`); "
                "quick runs are shorter, with fewer seeds"
            )
        if self.scale == "quick" and recipe in recipes.RECIPES:
            if not recipes.expand(recipes.get_recipe(recipe), quick=True):
                return (
                    f"the quick build does not run {recipe} (`grokbench figures {figure} --full`)"
                )
        flag = "" if self.scale == "quick" else " --full"
        return f"no {recipe} runs in the store (`grokbench figures {figure}{flag}` makes them)"

    def decided_at(self, recipe: str, runs: Sequence[Run]) -> str:
        """The note of a row a quick build decides from `runs` of `recipe`: '' at full scale;
        at quick scale 'decided at quick scale (N seeds, S steps)' and the command for the
        paper's scale. Only claims about events a short run shows whole (a spike, a crossing,
        an overshoot that happened) are decided from quick runs: a quick run is the first
        steps of the full run of its seed (no setting depends on the step count)."""
        if self.scale == "full" or not runs:
            return ""
        from figures import registry

        figure = registry.figure_of().get(recipe, recipe)
        return (
            f"decided at quick scale ({seeds(runs)}); the paper's scale: "
            f"`grokbench figures {figure} --full`"
        )


def claim_row(
    *,
    claim: str,
    source: str,
    paper: str,
    tolerance: str,
    ours: Callable[[], str] | str,
    ok: Callable[[], Verdict] | Verdict | None,
    why: str = "",
    scale: str = "",
) -> Row:
    """A claim's row. `ok` None (no measurement) gives `not tested` with `why`; otherwise
    `ok` (called if callable, so a check never runs on missing data) gives the verdict: a
    bool (the one criterion `TOLERANCE`) or a mapping of criterion -> passed, every one
    evaluated, the row holding when all pass and naming in its note those that failed.
    `scale` (`Evidence.decided_at`) leads the note of a decided row."""
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
    checks = dict(verdict) if isinstance(verdict, Mapping) else {TOLERANCE: verdict}
    if not checks or not all(isinstance(v, (bool, np.bool_)) for v in checks.values()):
        raise TypeError(f"{claim!r}: a verdict is a bool or a mapping of criterion -> bool")
    failed = tuple(name for name, passed in checks.items() if not passed)
    return Row(
        claim=claim,
        source=source,
        paper=paper,
        ours=ours() if callable(ours) else ours,
        tolerance=tolerance,
        status=FAILS if failed else HOLDS,
        note="; ".join(
            part
            for part in (scale, "failed: " + "; ".join(failed) if len(checks) > 1 else "")
            if part and part != "failed: "
        ),
        criteria=tuple(checks),
        failed=failed,
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
    if not runs:
        return "no runs"
    return f"{len(runs)} seed{'' if len(runs) == 1 else 's'}, {runs[0].config.steps} steps"


def finite(x: float | None) -> bool:
    """A measured value that exists and is finite."""
    return x is not None and math.isfinite(x)


def per_seed(runs: Sequence[Run], key: str) -> list | None:
    """Each run's summary value `key`; None when there are no runs or any run lacks it."""
    values = [r.summary.get(key) for r in runs]
    return values if runs and all(v is not None for v in values) else None


def measured(summary: Mapping[str, Any] | None, *keys: str) -> Mapping[str, Any] | None:
    """`summary` when it holds a value for every key; None (so `not tested`) otherwise."""
    if summary is None or any(summary.get(k) is None for k in keys):
        return None
    return summary


def crossing(run: Run, level: float, column: str = "margin_mean") -> float | None:
    """The first step at which the stored metric `column` (the mean training margin) reaches
    `level`; inf when it never does; None when the run has no such column."""
    metrics = run.metrics
    if column not in metrics or "step" not in metrics:
        return None
    reached = np.flatnonzero(np.asarray(metrics[column], float) >= level)
    return float(metrics["step"][reached[0]]) if reached.size else math.inf


def spikes_row(
    *,
    claim: str,
    source: str,
    paper: str,
    groups: Mapping[str, tuple[Sequence[Run], int, int | None]],
    why: str,
    scale: str = "",
) -> Row:
    """The spikes-per-seed row: for each group `label -> (runs, least, most)` every run has
    between `least` and `most` spikes (`most` None: no upper bound), each group a criterion of
    its own where there are several. `not tested` when a group has no runs or a run lacks its
    count. One group may have the empty label."""
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
        else _per_group(
            {
                named(label, f"{rule(least, most)} on every seed"): all(
                    least <= n and (most is None or n <= most) for n in counts[label]
                )
                for label, (_, least, most) in groups.items()
            }
        ),
        why=why,
        scale=scale,
    )


def _per_group(checks: dict[str, bool]) -> Verdict:
    """One group's check is the row's one criterion; several groups are one criterion each."""
    return next(iter(checks.values())) if len(checks) == 1 else checks


def grok_rate(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The Clopper-Pearson (exact binomial) interval of a rate of k successes in n trials."""
    from scipy import stats  # jax's own dependency; the exact interval, not a normal guess

    interval = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)
