"""Run a list of configs through the store: load what is finished, batch and train the rest."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

from grokbench import engine, slingshot
from grokbench.config import RunConfig, group_key
from grokbench.store import Store, atomic_write_json, load_metrics

__all__ = ["format_table", "group_runs", "run_configs", "write_out"]


def group_runs(configs: Sequence[RunConfig]) -> list[list[RunConfig]]:
    """Split configs into shape groups (equal `group_key`), keeping first-seen order."""
    groups: dict[tuple, list[RunConfig]] = {}
    for cfg in configs:
        groups.setdefault(group_key(cfg), []).append(cfg)
    return list(groups.values())


def _describe(cfg: RunConfig, n: int) -> str:
    return f"{cfg.task} mod {cfg.p} {cfg.model} {cfg.precision} {cfg.loss} x{n}"


def run_configs(
    configs: Sequence[RunConfig],
    store: Store,
    *,
    progress: bool = True,
    chunk_steps: int = 1000,
    fast: bool = True,
) -> list[dict]:
    """Summaries of `configs` in order; finished runs are loaded, the others trained and saved.

    Each summary gets two extra keys that are not stored: `run_dir` and `cached` (whether it
    was loaded rather than trained by this call).
    """
    unique = list(dict.fromkeys(configs))
    done = {cfg: _load(store, cfg) for cfg in unique}
    todo = [cfg for cfg in unique if done[cfg] is None]
    trained = set()
    groups = group_runs(todo)
    for i, group in enumerate(groups):
        desc = f"[{i + 1}/{len(groups)}] {_describe(group[0], len(group))}"
        for out in engine.train(
            group, chunk_steps=chunk_steps, progress=progress, fast=fast, desc=desc
        ):
            summary = slingshot.summarize(out.config, out.metrics, out.seconds)
            store.save(out.config, out.metrics, summary)
            done[out.config] = summary
            trained.add(out.config)
    return [
        {**done[cfg], "run_dir": str(store.run_dir(cfg)), "cached": cfg not in trained}
        for cfg in configs
    ]


def _load(store: Store, cfg: RunConfig) -> dict | None:
    """A finished run's summary; one written by an older summary rule is rebuilt from metrics."""
    summary = store.load_summary(cfg)
    if summary is not None and summary.get("summary_version") != slingshot.SUMMARY_VERSION:
        metrics = load_metrics(store.run_dir(cfg))
        summary = slingshot.summarize(cfg, metrics, summary["seconds"])
        atomic_write_json(store.run_dir(cfg) / "summary.json", summary)
    return summary


def write_out(out_dir: pathlib.Path | str, summaries: Sequence[dict]) -> pathlib.Path:
    """Write OUT_DIR/summary.json as {"runs": [...]}, atomically; return its path."""
    path = pathlib.Path(out_dir) / "summary.json"
    atomic_write_json(path, {"runs": list(summaries)})
    return path


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_table(summaries: Sequence[dict]) -> str:
    """One line per run: the keys that vary across runs, then the headline numbers."""
    configs = [s["config"] for s in summaries]
    varying = [k for k in configs[0] if len({repr(c[k]) for c in configs}) > 1] if configs else []
    keys = [k for k in varying if k != "seed"] + ["seed"]
    header = [*keys, "test_acc", "train_acc", "margin", "max_loss_mem", "spikes", "sec"]
    rows = [
        [
            *(str(s["config"][k]) for k in keys),
            _fmt(s["test_accuracy"], ".4f"),
            _fmt(s["train_accuracy"], ".4f"),
            _fmt(s["final_margin"], ".2f"),
            _fmt(s["max_train_loss_after_memorization"], ".2e"),
            str(s["spikes"]),
            _fmt(s["seconds"], ".1f") + ("*" if s.get("cached") else ""),
        ]
        for s in summaries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    return "\n".join(lines)
