"""Slingshot spikes: a documented counting rule, the steps a run memorizes and groks at.

The rule (`spike_steps`) reads the true training cross-entropy `train_ce` (mean
softplus(-m): accurate past the cliff, so standard CE's collapsed loss of exactly 0 hides
nothing) and the training accuracy:

1. Memorization is the first step with training accuracy 100%. Only later steps count.
2. r(t) is the running minimum of the loss from memorization up to step t - 1, and the
   threshold is T(t) = max(_SPIKE_FACTOR * r(t), _SPIKE_FLOOR): at least 10x the best loss
   reached since memorization, and visible in absolute terms.
3. A spike starts at step t (when none is open) if loss(t) >= T(t) and the loss rose at
   least _SPIKE_FACTOR-fold within the last _SPIKE_WINDOW steps (loss(t) >= 10 min of the
   window): sudden, unlike the slow drift of a margin shrinking under weight decay.
4. An open spike closes once the loss has stayed below T / _SPIKE_HYSTERESIS for
   _SPIKE_QUIET consecutive steps, so the few-step oscillation a spike triggers (loss
   bouncing between 1e-4 and 1e0 while Adam's second moment recovers) is one spike.

On fig2-top (fp32, eps 1e-8) this counts one spike per slingshot cycle of standard CE
(about every 1,300 steps, loss from ~3e-7 to 1e-2 .. 1e0) and none for fixed CE, whose
loss settles near 5e-8 and wobbles by less than 2x.

Each spike is described (`describe_spikes`) by its start step, its peak loss (the largest
loss while it is open), its height in decades (log10 of the peak over the loss at launch),
and the state at launch: the last step before the start whose loss is still within
_LAUNCH_FACTOR of the lowest loss of the _SPIKE_WINDOW steps before it (the floor the spike
rose from), with its mean and median margin and the fraction of training examples whose
margin is past the compute dtype's cliff there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import numerics
from grokbench.precision import get_precision
from grokbench.tables import align, run_keys

__all__ = ["describe_spikes", "format_spikes", "grok_step", "spike_steps"]

_SPIKE_FACTOR = 10.0
"""A spike's loss is at least this multiple of the running minimum since memorization."""

_SPIKE_FLOOR = 1e-3
"""...and at least this absolute training loss (mean CE, nats): below it nothing visible moves."""

_SPIKE_WINDOW = 50
"""...reached by a _SPIKE_FACTOR-fold rise within this many steps (sudden, not a drift)."""

_SPIKE_HYSTERESIS = 2.0
"""An open spike closes when the loss stays below threshold / _SPIKE_HYSTERESIS..."""

_SPIKE_QUIET = 50
"""...for this many consecutive steps."""

_LAUNCH_FACTOR = 2.0
"""A spike launches from the last step before it within this factor of the window's minimum."""


def memorization_step(train_acc: np.ndarray) -> int | None:
    """Index of the first step with training accuracy 1 (100%), or None."""
    hits = np.flatnonzero(np.asarray(train_acc) >= 1.0)
    return int(hits[0]) if hits.size else None


GROK_ACC = 0.99
"""A run has grokked at the first evaluation with at least this test accuracy."""


def grok_step(test_step: np.ndarray, test_acc: np.ndarray) -> int | None:
    """The first evaluation step with test accuracy >= `GROK_ACC`, or None."""
    hits = np.flatnonzero(np.asarray(test_acc) >= GROK_ACC)
    return int(np.asarray(test_step)[hits[0]]) if hits.size else None


def spike_steps(
    train_loss: np.ndarray,
    train_acc: np.ndarray,
    factor: float = _SPIKE_FACTOR,
    floor: float = _SPIKE_FLOOR,
    window: int = _SPIKE_WINDOW,
    hysteresis: float = _SPIKE_HYSTERESIS,
    quiet: int = _SPIKE_QUIET,
) -> list[int]:
    """The step at which each spike starts, by the module's rule."""
    rule = {"factor": factor, "floor": floor, "window": window}
    return [s for s, _ in _spike_spans(train_loss, train_acc, hysteresis, quiet, **rule)]


def _spike_spans(
    train_loss: np.ndarray,
    train_acc: np.ndarray,
    hysteresis: float,
    quiet: int,
    *,
    factor: float,
    floor: float,
    window: int,
) -> list[tuple[int, int]]:
    """(start, end) of each spike, end exclusive: the steps while it is open."""
    loss = np.asarray(train_loss, dtype=np.float64)
    start = memorization_step(train_acc)
    if start is None:
        return []
    out, running_min, open_at, calm = [], loss[start], None, 0
    t = start + 1
    for t in range(start + 1, len(loss)):
        value = loss[t]
        if np.isnan(value):
            break  # a diverged run: nothing after NaN is meaningful
        threshold = max(factor * running_min, floor)
        if open_at is None:
            recent_min = loss[max(start, t - window) : t].min()
            if value >= threshold and value >= factor * recent_min:
                open_at, calm = t, 0
        else:
            calm = calm + 1 if value < threshold / hysteresis else 0
            if calm >= quiet:
                out.append((open_at, t - quiet + 1))
                open_at = None
        running_min = min(running_min, value)
    if open_at is not None:
        out.append((open_at, t + 1))
    return out


@dataclasses.dataclass(frozen=True)
class _Spike:
    """One slingshot spike: where it starts, how high it goes, the state it launched from."""

    step: int  # first step at or past the threshold
    peak_loss: float  # largest training CE while the spike is open (nats)
    height: float  # log10(peak_loss / launch loss): decades the loss jumped
    launch_step: int  # last step before `step` still on the loss floor (module docstring)
    margin_before: float  # mean margin at launch_step
    median_margin_before: float  # median margin at launch_step
    past_cliff_before: float  # fraction of training examples past the cliff at launch_step


def describe_spikes(metrics: Mapping[str, np.ndarray], window: int = _SPIKE_WINDOW) -> list[_Spike]:
    """Every spike of a run's metrics (`train_ce`, `train_acc`, margins, `frac_past_cliff`)."""
    loss = np.asarray(metrics["train_ce"], dtype=np.float64)
    mem = memorization_step(metrics["train_acc"])
    spans = _spike_spans(
        loss,
        metrics["train_acc"],
        _SPIKE_HYSTERESIS,
        _SPIKE_QUIET,
        factor=_SPIKE_FACTOR,
        floor=_SPIKE_FLOOR,
        window=window,
    )
    out = []
    for start, end in spans:
        lo = max(mem if mem is not None else 0, start - window)
        floor_ = loss[lo:start].min()
        launch = lo + int(np.flatnonzero(loss[lo:start] <= _LAUNCH_FACTOR * floor_)[-1])
        peak = float(np.nanmax(loss[start:end]))
        out.append(
            _Spike(
                step=start,
                peak_loss=peak,
                height=math.log10(peak / loss[launch]) if loss[launch] > 0 else math.inf,
                launch_step=launch,
                margin_before=float(metrics["margin_mean"][launch]),
                median_margin_before=float(metrics["margin_median"][launch]),
                past_cliff_before=float(metrics["frac_past_cliff"][launch]),
            )
        )
    return out


def _count_spikes(train_loss: np.ndarray, train_acc: np.ndarray, **rule: float) -> int:
    """Number of slingshot spikes after memorization (see the module docstring)."""
    return len(spike_steps(train_loss, train_acc, **rule))


def format_spikes(runs: Sequence[tuple[Mapping[str, Any], Mapping[str, np.ndarray]]]) -> str:
    """A table of every spike of (summary, metrics) runs; a run without spikes gets one row."""
    configs = [summary["config"] for summary, _ in runs]
    keys = run_keys(configs)
    header = [*keys, "spike", "step", "peak_loss", "decades", "margin", "median", "past_cliff"]
    header.append("cliff")
    rows = []
    for (_, metrics), cfg in zip(runs, configs, strict=True):
        compute = get_precision(cfg["precision"]).compute_dtype
        ident = [str(cfg[k]) for k in keys]
        cliff = f"{numerics.precision_cliff(compute):.2f}"
        spikes = describe_spikes(metrics)
        if not spikes:
            rows.append([*ident, "0", "-", "-", "-", "-", "-", "-", cliff])
        for i, spike in enumerate(spikes, 1):
            rows.append(
                [
                    *ident,
                    f"{i}/{len(spikes)}",
                    str(spike.step),
                    f"{spike.peak_loss:.2e}",
                    f"{spike.height:.1f}",
                    f"{spike.margin_before:.2f}",
                    f"{spike.median_margin_before:.2f}",
                    f"{spike.past_cliff_before:.3f}",
                    cliff,
                ]
            )
    lines = [align([header, *rows])]
    total = sum(r[len(keys)] != "0" for r in rows)
    lines.append(
        f"\n{total} spikes in {len(runs)} runs. margin, median and past_cliff: mean and median "
        "training margin and the fraction of examples past the cliff at the step the spike "
        "launched from; decades: log10(peak / loss at launch)."
    )
    return "\n".join(lines)
