"""Sweeps: a recipe's grid trained into one directory, resumable and safe to interrupt.

Layout of a sweep directory DIR:

- DIR/runs/HASH/{config.json, metrics.npz, summary.json}: one run per config, the store
  format of `grokbench run` (`grokbench.store`), so DIR is also a results store.
- DIR/summary.json: {"runs": [...]}, as `grokbench run --out` writes it.
- DIR/sweep.csv: one row per run, config columns then summary columns (lists joined by
  spaces, None empty): `pandas.read_csv(DIR / "sweep.csv")`.
- DIR/sweep.lock: held (fcntl.flock) while a sweep writes DIR; a second sweep on the same
  DIR is refused at once (`SweepBusy`). The kernel drops the lock when its holder dies.

Resuming: every file is written atomically and a run's summary.json last, so a sweep
killed at any moment (SIGKILL included) leaves finished runs, which the next invocation
loads after checking that summary.json and metrics.npz read back whole, and unfinished
ones, which it trains again. Units are planned over the whole grid and retrained whole
(`experiment.run_configs(whole_units=True)`), so a resumed sweep stores bit for bit what
an uninterrupted one would. Temporary files of interrupted writes are removed on start.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import pathlib
from collections.abc import Iterator, Sequence

from grokbench import executors, experiment, recipes
from grokbench.config import ConfigError, RunConfig, config_hash, from_stored, parse_overrides
from grokbench.store import Store, atomic_write_bytes

__all__ = ["SweepBusy", "dir_runs", "expand_grid", "lock"]

_LOCK_FILE = "sweep.lock"
"""The lock file in a sweep directory."""

TABLE_FILE = "sweep.csv"
"""The sweep-level table in a sweep directory (one row per run)."""


class SweepBusy(RuntimeError):
    """Another process holds the sweep directory's lock."""


@contextlib.contextmanager
def lock(out_dir: pathlib.Path | str) -> Iterator[None]:
    """Hold OUT_DIR/sweep.lock exclusively, or raise `SweepBusy` at once."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / _LOCK_FILE
    with open(path, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise SweepBusy(
                f"{out} is in use by another sweep (pid {holder} holds {path}); "
                "wait for it or choose another --out"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def expand_grid(recipe: str, tokens: Sequence[str], quick: bool = False) -> list[RunConfig]:
    """The runs of RECIPE with `key=v1,v2` tokens (the cartesian product); ConfigError if bad
    (`key=` and a list with an empty value too: `parse_overrides`' `check_lists`)."""
    requested = parse_overrides(tokens, check_lists=True)
    configs = recipes.expand(recipes.get_recipe(recipe), requested, quick=quick)
    if not configs:
        raise ConfigError(f"the grid of {recipe} is empty")
    return configs


def run_sweep(
    configs: Sequence[RunConfig],
    out_dir: pathlib.Path | str,
    *,
    executor: executors.Executor | None = None,
    max_batch: int | None = None,
    chunk_steps: int = 1000,
    progress: bool = True,
) -> list[dict]:
    """Train what DIR lacks of `configs` under DIR's lock; write the tables; the summaries."""
    out = pathlib.Path(out_dir)
    with lock(out):
        store = Store(out)
        store.remove_temporaries()
        summaries = experiment.run_configs(
            configs,
            store,
            progress=progress,
            chunk_steps=chunk_steps,
            executor=executor,
            max_batch=max_batch,
            whole_units=True,
        )
        experiment.write_out(out, summaries)
        _write_table(out, summaries)
    return summaries


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return value


def _table_rows(summaries: Sequence[dict], out_dir: pathlib.Path | str) -> list[dict]:
    """One flat row per run: config_hash, run_dir (relative to DIR), config, then summary."""
    out = pathlib.Path(out_dir)
    rows = []
    for s in summaries:
        cfg = from_stored(s["config"])
        run_dir = pathlib.Path(s.get("run_dir", out / "runs" / config_hash(cfg)))
        with contextlib.suppress(ValueError):
            run_dir = run_dir.relative_to(out)
        row = {"config_hash": config_hash(cfg), "run_dir": str(run_dir), **s["config"]}
        skip = {"config", "run_dir", "summary_version"}
        row.update({k: v for k, v in s.items() if k not in skip and k not in row})
        rows.append({k: _cell(v) for k, v in row.items()})
    return rows


def _write_table(out_dir: pathlib.Path | str, summaries: Sequence[dict]) -> pathlib.Path:
    """Write DIR/sweep.csv atomically; return its path."""
    rows = _table_rows(summaries, out_dir)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path = pathlib.Path(out_dir) / TABLE_FILE
    atomic_write_bytes(path, buf.getvalue().encode())
    return path


def _config_order(config: dict) -> tuple:
    """A sort key over a stored config's fields, in field order (None before any value)."""
    return tuple((v is not None, v) for v in config.values())


def dir_runs(path: pathlib.Path | str) -> list[tuple[dict, pathlib.Path]]:
    """(summary, run directory) of each run of a sweep or `grokbench run --out` directory.

    Reads DIR/summary.json when there is one (its runs, in its order; each run's files are
    looked up in DIR/runs/HASH first, then at its recorded `run_dir`), else every finished
    DIR/runs/*/summary.json, sorted by config (field by field). ValueError if DIR holds no
    runs.
    """
    root = pathlib.Path(path)
    index = root / "summary.json"
    out = []
    if index.is_file():
        for summary in json.loads(index.read_text())["runs"]:
            own = root / "runs" / config_hash(from_stored(summary["config"]))
            places = [own, pathlib.Path(summary.get("run_dir", own))]
            found = next((p for p in places if (p / "metrics.npz").is_file()), None)
            if found is None:
                raise ValueError(f"{index} lists a run whose metrics are missing: {own}")
            out.append((summary, found))
    else:
        for file in sorted(root.glob("runs/*/summary.json")):
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                out.append((json.loads(file.read_text()), file.parent))
        out.sort(key=lambda run: _config_order(run[0]["config"]))
    if not out:
        raise ValueError(
            f"no runs in {root}: expected {root}/summary.json (from grokbench sweep or "
            f"grokbench run --out) or {root}/runs/*/summary.json"
        )
    return out
