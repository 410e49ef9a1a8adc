"""Run a list of configs through the store: load what is finished, batch and train the rest.

A finished run is one whose summary.json and metrics.npz both read back whole
(`grokbench.summary.load`, which also rebuilds a summary written by an older rule); anything
else (never started, killed mid-training, a truncated file) is trained again. Training
happens in units (`_plan_units`): batches of one shape group, one compiled program each,
handed to an executor (`grokbench.executors`: this process, or Ray).
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

from grokbench import console, distill, executors, summary
from grokbench.config import RunConfig, group_runs
from grokbench.store import Store, atomic_write_json
from grokbench.tables import summary_table

__all__ = []  # every name here is the harness's own (grokbench.labs calls run_configs)


def _plan_units(
    configs: Sequence[RunConfig], max_batch: int | None = None
) -> list[list[RunConfig]]:
    """Shape groups split into consecutive batches of at most `max_batch` runs (None: whole)."""
    units = []
    for group in group_runs(configs):
        size = len(group) if max_batch is None else max_batch
        units.extend(group[i : i + size] for i in range(0, len(group), size))
    return units


def run_configs(
    configs: Sequence[RunConfig],
    store: Store,
    *,
    progress: bool = True,
    chunk_steps: int = 1000,
    fast: bool = True,
    executor: executors.Executor | None = None,
    max_batch: int | None = None,
    whole_units: bool = False,
) -> list[dict]:
    """Summaries of `configs` in order; finished runs are loaded, the others trained and saved.

    Each summary gets two extra keys that are not stored: `run_dir` and `cached` (whether it
    was loaded rather than trained by this call). `whole_units=True` plans units over all of
    `configs`, finished or not, and retrains a unit whole if any of its runs is missing: a
    run's last bits depend on the batch it shares (XLA picks kernels by batch shape), so a
    resumed sweep then stores exactly what an uninterrupted one would.
    """
    unique = list(dict.fromkeys(configs))
    done = {cfg: summary.load(store, cfg) for cfg in unique}
    loop = {"progress": progress, "chunk_steps": chunk_steps, "fast": fast}
    # The one place runs split by kind: distillation runs have their own loop, in this
    # process, teachers first (grokbench.distill); every other run goes through the engine.
    students = [cfg for cfg in unique if cfg.teacher_steps]
    others = [cfg for cfg in unique if not cfg.teacher_steps]
    trained = _distill(students, done, store, **loop)
    batching = {"executor": executor, "max_batch": max_batch, "whole_units": whole_units}
    trained |= _train(others, done, store, **batching, **loop)
    return [
        {**done[cfg], "run_dir": str(store.run_dir(cfg)), "cached": cfg not in trained}
        for cfg in configs
    ]


def _distill(configs: Sequence[RunConfig], done: dict, store: Store, **loop: Any) -> set[RunConfig]:
    """Train and store the distillation runs of `configs` not `done` yet; record their
    summaries in `done` and return those runs."""
    students = distill.run_students([cfg for cfg in configs if done[cfg] is None], store, **loop)
    done.update(students)
    return set(students)


def _train(
    configs: Sequence[RunConfig],
    done: dict,
    store: Store,
    *,
    executor: executors.Executor | None,
    max_batch: int | None,
    whole_units: bool,
    progress: bool,
    chunk_steps: int,
    fast: bool,
) -> set[RunConfig]:
    """Train the engine's runs of `configs` not `done` yet, in units on `executor`, and store
    them (`run_configs`' docstring); record their summaries in `done` and return those runs."""
    todo = [cfg for cfg in configs if done[cfg] is None]
    units = [
        unit
        for unit in _plan_units(configs if whole_units else todo, max_batch)
        if any(done[cfg] is None for cfg in unit)
    ]
    trained = set()
    total = sum(cfg.steps for unit in units for cfg in unit)
    desc = f"{console.plural(len(todo), 'run')} in {console.plural(len(units), 'program')}"
    with console.bar(total, desc, progress) as bar:
        runner = executor or executors.LocalExecutor()
        for outputs in runner.map(units, chunk_steps=chunk_steps, fast=fast, on_steps=bar.update):
            for out in outputs:
                if done[out.config] is not None:
                    continue  # stored by an earlier, interrupted call: the same numbers
                new = summary.summarize(
                    out.config, out.metrics, out.seconds, out.backend, out.params
                )
                store.save(out.config, out.metrics, new)
                done[out.config] = new
                trained.add(out.config)
    return trained


def write_out(out_dir: pathlib.Path | str, summaries: Sequence[dict]) -> pathlib.Path:
    """Write OUT_DIR/summary.json as {"runs": [...]}, atomically; return its path."""
    path = pathlib.Path(out_dir) / "summary.json"
    atomic_write_json(path, {"runs": list(summaries)})
    return path


def _format_table(summaries: Sequence[dict]) -> str:
    """One line per run: the keys that vary across runs, then the headline numbers."""
    if summaries and all("kl_final" in s for s in summaries):
        return distill.format_table(summaries)  # distillation runs: residual, KL and drift
    return summary_table(
        summaries,
        [
            ("test_acc", "test_accuracy", ".4f"),
            ("train_acc", "train_accuracy", ".4f"),
            ("margin", "final_margin", ".2f"),
            ("max_loss_mem", "max_train_loss_after_memorization", ".2e"),
            ("spikes", "spikes", None),
        ],
    )


def format_results(summaries: Sequence[dict], recipe: str, quick: bool) -> str:
    """What `grokbench run` and `sweep` print: the results table, the cache marker's
    footnote, and, for a quick run, what it is too short to show."""
    from grokbench import recipes  # it builds configs; this module only runs them

    lines = [_format_table(summaries)]
    if any(s.get("cached") for s in summaries):
        lines.append("* loaded from the store, not trained now: sec is how long it took to train")
    # The summaries' 99% test accuracy is grokbench.slingshot's grok_step threshold.
    short = [s for s in summaries if (s["test_accuracy"] or 0.0) < 0.99]
    if quick and short:
        full = recipes.expand(recipes.get_recipe(recipe))
        steps = summaries[0]["config"]["steps"]
        lines.append(
            f"note: {len(short)} of {console.plural(len(summaries), 'run')} ended below 99% "
            f"test accuracy: --quick ({steps:,} steps) is too short to grok. The full recipe, "
            f"`grokbench run {recipe}` ({console.plural(len(full), 'run')} of "
            f"{full[0].steps:,} steps), is what `grokbench recipes` describes."
        )
    return "\n".join(lines)
