"""The phase table: when each run memorised, formed its Fourier circuit, cleaned up and grokked.

Nanda et al. ("Progress measures for grokking via mechanistic interpretability", ICLR 2023,
Sec. 5.2) split grokking into three phases, read off their progress measures
(`grokbench.fourier`): memorisation (train loss falls, the test loss does not), circuit
formation (the restricted loss falls and the excluded loss rises while test loss stays
high) and cleanup (weight decay removes the memorising components, test loss falls to the
restricted loss). The paper draws the boundaries by eye; the rules here make them steps.
Evaluation steps are `test_step`s (measured after that many updates).

- memorisation step: the first step with 100 % training accuracy
  (`grokbench.slingshot.memorization_step`, the rule the slingshot spikes count from).
- circuit-formation step: the first evaluation at or after memorisation at which the
  restricted loss (the key frequencies alone, on all p^2 pairs) is below `_CIRCUIT_LOSS`
  (1 nat): the Fourier circuit by itself puts a geometric mean of more than e^-1 = 37 % on
  the right residue of every pair, 11x the uniform 1/p at p = 31. (Below the test loss is
  no rule: a memorising network is overconfident on held-out pairs, its test loss exceeds
  log p, and the restricted loss of a network with no circuit, about log p, is below it.)
- cleanup step: the first evaluation at or after circuit formation at which the test loss
  is below `_CLEANUP_LOSS` (1 nat): the whole network now does on the held-out pairs what its
  circuit did on all pairs when it formed; what held the test loss up, the memorisation,
  is gone. (A rule relative to the restricted loss fails: once the circuit carries margins
  near 17 nats, the restricted loss is ~1e-7 and no test loss comes within a factor of it.)
- grok step: the first evaluation with test accuracy >= 99 % (the summary's `grok_step`).

A step is None ('-' in the table) when the run never meets its rule. `analyze_dir` reads a
`grokbench run --out` or sweep directory (`grokbench.sweep.dir_runs`); `phases` one run's
metrics, for figures.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from grokbench import fourier, slingshot
from grokbench.store import load_metrics
from grokbench.sweep import dir_runs
from grokbench.tables import align, fmt, run_keys

__all__ = ["analyze_dir", "format_table", "phases"]

_CIRCUIT_LOSS = 1.0
"""The circuit has formed once the restricted loss is below this (nats, all p^2 pairs)."""

_CLEANUP_LOSS = 1.0
"""Cleanup ends once the test loss is below this (nats, the test split)."""

_GROK_ACC = slingshot.GROK_ACC
"""A run has grokked at the first evaluation with at least this test accuracy (the
summary's rule, `grokbench.slingshot.grok_step`)."""


def _first(steps: np.ndarray, hits: np.ndarray, after: int | None) -> int | None:
    """The first of `steps` at or after `after` where `hits` holds (None if none, or no after)."""
    if after is None:
        return None
    found = np.flatnonzero(hits & (steps >= after))
    return int(steps[found[0]]) if found.size else None


def phases(metrics: Mapping[str, np.ndarray]) -> dict:
    """One run's phase steps (module docstring), its final key frequencies and losses.

    ValueError when the metrics hold no Fourier measures (`grokbench.fourier._has_fourier`).
    """
    if "restricted_loss" not in metrics:
        raise ValueError("no Fourier progress measures")
    steps = np.asarray(metrics["test_step"])
    restricted, test = metrics["restricted_loss"], metrics["test_loss"]
    memorised = slingshot.memorization_step(metrics["train_acc"])
    circuit = _first(steps, restricted < _CIRCUIT_LOSS, memorised)
    cleanup = _first(steps, test < _CLEANUP_LOSS, circuit)
    return {
        "memorization_step": memorised,
        "circuit_step": circuit,
        "cleanup_step": cleanup,
        "grok_step": slingshot.grok_step(steps, metrics["test_acc"]),
        **fourier.final_measures(metrics),
    }


def analyze_dir(path: pathlib.Path | str) -> list[dict]:
    """One row per run of a `grokbench run --out` or sweep directory: its config, spike
    steps, `phases`, or None phases for a run without Fourier measures.

    ValueError (one line) when DIR holds no runs or none of them has Fourier measures.
    """
    rows = []
    for summary, run_dir in dir_runs(path):
        metrics = load_metrics(run_dir)
        row = {"config": summary["config"], "spike_steps": summary.get("spike_steps", [])}
        row["phases"] = phases(metrics) if "restricted_loss" in metrics else None
        rows.append(row)
    if all(row["phases"] is None for row in rows):
        tasks = ", ".join(sorted({row["config"]["task"] for row in rows}))
        raise ValueError(
            f"no run in {path} has Fourier progress measures (task {tasks}): they are "
            f"recorded for {' and '.join(fourier.FOURIER_TASKS)} at odd p by runs trained "
            "with progress_measures=true (fig2-top, setup-study and orthograd set it)"
        )
    return rows


def format_table(rows: Sequence[dict]) -> str:
    """The phase table of `analyze_dir`'s rows, and what each column means."""
    keys = run_keys([row["config"] for row in rows])
    header = [*keys, "memorised", "circuit", "cleanup", "grokked", "spikes", "key_freqs"]
    header += ["restricted", "excluded"]
    lines = []
    for row in rows:
        ident = [str(row["config"][k]) for k in keys]
        ph = row["phases"]
        if ph is None:
            lines.append([*ident, *["-"] * (len(header) - len(ident))])
            continue
        cells = [ph[k] for k in ("memorization_step", "circuit_step", "cleanup_step", "grok_step")]
        freqs = ph["key_frequencies"]
        lines.append(
            [
                *ident,
                *("-" if c is None else str(c) for c in cells),
                str(len(row["spike_steps"])),
                ",".join(map(str, freqs)) if freqs else "-",
                fmt(ph["restricted_loss_final"], ".2e"),
                fmt(ph["excluded_loss_final"], ".2f"),
            ]
        )
    note = (
        "\nSteps (rules: grokbench.progress): memorised = 100 % train accuracy; circuit = "
        f"restricted loss below {_CIRCUIT_LOSS:g} nat; cleanup = then test loss below "
        f"{_CLEANUP_LOSS:g} nat; grokked = test accuracy >= {_GROK_ACC:.0%}. "
        "key_freqs, restricted (all pairs) and excluded (training pairs) loss at the last "
        "evaluation (grokbench.fourier). '-': never reached, or no Fourier measures."
    )
    return align([header, *lines]) + "\n" + note
