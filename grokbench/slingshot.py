"""Slingshot spikes: a documented counting rule, and the per-run summary built on it.

The rule (`spike_steps`) reads the true training cross-entropy `train_ce` (mean
softplus(-m): accurate past the cliff, so standard CE's collapsed loss of exactly 0 hides
nothing) and the training accuracy:

1. Memorization is the first step with training accuracy 100%. Only later steps count.
2. r(t) is the running minimum of the loss from memorization up to step t - 1, and the
   threshold is T(t) = max(SPIKE_FACTOR * r(t), SPIKE_FLOOR): at least 10x the best loss
   reached since memorization, and visible in absolute terms.
3. A spike starts at step t (when none is open) if loss(t) >= T(t) and the loss rose at
   least SPIKE_FACTOR-fold within the last SPIKE_WINDOW steps (loss(t) >= 10 min of the
   window): sudden, unlike the slow drift of a margin shrinking under weight decay.
4. An open spike closes once the loss has stayed below T / SPIKE_HYSTERESIS for
   SPIKE_QUIET consecutive steps, so the few-step oscillation a spike triggers (loss
   bouncing between 1e-4 and 1e0 while Adam's second moment recovers) is one spike.

On fig2-top (fp32, eps 1e-8) this counts one spike per slingshot cycle of standard CE
(about every 1,300 steps, loss from ~3e-7 to 1e-2 .. 1e0) and none for fixed CE, whose
loss settles near 5e-8 and wobbles by less than 2x.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

import numerics
from grokbench.config import RunConfig
from grokbench.precision import get_precision

__all__ = [
    "SPIKE_FACTOR",
    "SPIKE_FLOOR",
    "SPIKE_HYSTERESIS",
    "SPIKE_QUIET",
    "SPIKE_WINDOW",
    "SUMMARY_VERSION",
    "count_spikes",
    "memorization_step",
    "spike_steps",
    "summarize",
]

SUMMARY_VERSION = 1
"""Bumped when the summary's fields or the spike rule change: stored summaries are then rebuilt."""

SPIKE_FACTOR = 10.0
"""A spike's loss is at least this multiple of the running minimum since memorization."""

SPIKE_FLOOR = 1e-3
"""...and at least this absolute training loss (mean CE, nats): below it nothing visible moves."""

SPIKE_WINDOW = 50
"""...reached by a SPIKE_FACTOR-fold rise within this many steps (sudden, not a drift)."""

SPIKE_HYSTERESIS = 2.0
"""An open spike closes when the loss stays below threshold / SPIKE_HYSTERESIS..."""

SPIKE_QUIET = 50
"""...for this many consecutive steps."""


def memorization_step(train_acc: np.ndarray) -> int | None:
    """Index of the first step with training accuracy 1 (100%), or None."""
    hits = np.flatnonzero(np.asarray(train_acc) >= 1.0)
    return int(hits[0]) if hits.size else None


def spike_steps(
    train_loss: np.ndarray,
    train_acc: np.ndarray,
    factor: float = SPIKE_FACTOR,
    floor: float = SPIKE_FLOOR,
    window: int = SPIKE_WINDOW,
    hysteresis: float = SPIKE_HYSTERESIS,
    quiet: int = SPIKE_QUIET,
) -> list[int]:
    """The step at which each spike starts, by the module's rule."""
    loss = np.asarray(train_loss, dtype=np.float64)
    start = memorization_step(train_acc)
    if start is None:
        return []
    out, running_min, open_spike, calm = [], loss[start], False, 0
    for t in range(start + 1, len(loss)):
        value = loss[t]
        if np.isnan(value):
            break  # a diverged run: nothing after NaN is meaningful
        threshold = max(factor * running_min, floor)
        if not open_spike:
            recent_min = loss[max(start, t - window) : t].min()
            if value >= threshold and value >= factor * recent_min:
                out.append(t)
                open_spike, calm = True, 0
        else:
            calm = calm + 1 if value < threshold / hysteresis else 0
            open_spike = calm < quiet
        running_min = min(running_min, value)
    return out


def count_spikes(train_loss: np.ndarray, train_acc: np.ndarray, **rule: float) -> int:
    """Number of slingshot spikes after memorization (see the module docstring)."""
    return len(spike_steps(train_loss, train_acc, **rule))


def _num(x: Any) -> float | None:
    """A JSON-safe float: NaN/inf become None."""
    x = float(x)
    return x if math.isfinite(x) else None


def summarize(cfg: RunConfig, metrics: Mapping[str, np.ndarray], seconds: float) -> dict:
    """The run's `summary.json` (fractions in [0, 1], margins in nats)."""
    acc, ce = metrics["train_acc"], metrics["train_ce"]
    mem = memorization_step(acc)
    after = ce[mem + 1 :] if mem is not None else ce[:0]
    test_acc, test_step = metrics["test_acc"], metrics["test_step"]
    grokked = np.flatnonzero(test_acc >= 0.99)
    spikes = spike_steps(ce, acc)
    compute = get_precision(cfg.precision).compute_dtype
    return {
        "config": cfg.to_dict(),
        "test_accuracy": _num(test_acc[-1]),
        "train_accuracy": _num(acc[-1]),
        "final_margin": _num(metrics["margin_mean"][-1]),
        "max_train_loss_after_memorization": _num(after.max()) if after.size else None,
        "spikes": len(spikes),
        "steps": int(cfg.steps),
        "seconds": float(seconds),
        # Extras for analysis; the fields above are the CLI contract.
        "spike_steps": spikes,
        "memorization_step": mem,
        "grok_step": int(test_step[grokked[0]]) if grokked.size else None,
        "final_train_loss": _num(metrics["train_loss"][-1]),
        "final_train_ce": _num(ce[-1]),
        "final_test_loss": _num(metrics["test_loss"][-1]),
        "final_min_margin": _num(metrics["margin_min"][-1]),
        "final_frac_past_cliff": _num(metrics["frac_past_cliff"][-1]),
        "precision_cliff": numerics.precision_cliff(compute),
        "equilibrium_margin": _num(numerics.equilibrium_margin(cfg.eps)),
        "summary_version": SUMMARY_VERSION,
    }
