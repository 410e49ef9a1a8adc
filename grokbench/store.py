"""The results store: one directory per resolved run config, written atomically.

Layout: ROOT/runs/HASH/{config.json, metrics.npz, summary.json}, HASH = `config_hash`, plus
params.npz (the final parameters, one array per name) for runs saved with them (teachers).
Every file is written to a temporary name in the same directory and `os.replace`d into
place, and summary.json is written last: a run directory with a summary.json is complete,
anything else is an interrupted run and is retrained. metrics.npz is columnar: one 1-D
array per metric (`step`-indexed columns and `test_step`-indexed ones); `metrics_frame`
turns it into a pandas DataFrame (pandas is optional, imported only there). Other records
(the quant lab's ROOT/quant/{train,eval}/HASH) go through `Store.write_record`/`read_record`.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pathlib
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grokbench.config import ConfigError, RunConfig, config_hash, from_stored, identity
from grokbench.metrics import STEP_METRICS

__all__ = [
    "Store",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_writable_dir",
    "default_root",
    "finished_since",
    "load_metrics",
    "metrics_frame",
]


_log = logging.getLogger(__name__)


def default_root() -> pathlib.Path:
    """Where runs go unless told otherwise: $GROKBENCH_RESULTS, else ./results (git-ignored)."""
    return pathlib.Path(os.environ.get("GROKBENCH_RESULTS", "results"))


def check_writable_dir(path: pathlib.Path, option: str) -> None:
    """ConfigError unless `path` is a directory this process can write, or one it can create.

    Probes with a real (anonymous) file, since permission bits say nothing for root, a
    read-only mount or /proc. Creates nothing: a missing directory is checked at the
    nearest ancestor that exists. `option` names it in the message (`--out`).
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{option} {path}: cannot be created, {probe} is a file")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        where = "not writable" if probe == path else f"cannot be created in {probe}"
        raise ConfigError(f"{option} {path}: {where} ({err.strerror})") from None


def finished_since(root: pathlib.Path | None, start: float) -> str:
    """'N runs finished and stored in ROOT': the runs stored under `root` since `start` (a
    `time.time()`); 'nothing was stored' without a root."""
    from grokbench.console import plural

    if root is None:
        return "nothing was stored"
    done = sum(p.stat().st_mtime >= start for p in root.glob("**/summary.json"))
    return f"{plural(done, 'run')} finished and stored in {root}"


def _umask() -> int:
    """The process's umask (read by setting it, so briefly 0o077: nothing is more open)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` so readers see the old file or the whole new one, never a part.

    The file gets the mode `open` would give a new file (0o666 less the umask: 0644 under
    the usual 022), not mkstemp's private 0600, so a shared store stays readable.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: pathlib.Path, obj: Any) -> None:
    """`atomic_write_bytes` of indented JSON (NaN is rejected: write None instead)."""
    text = json.dumps(obj, indent=2, allow_nan=False) + "\n"
    atomic_write_bytes(path, text.encode())


def _atomic_write_npz(path: pathlib.Path, arrays: Mapping[str, Any]) -> None:
    """`atomic_write_bytes` of an uncompressed .npz: one array per name."""
    buf = io.BytesIO()
    np.savez(buf, **{name: np.asarray(x) for name, x in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def load_metrics(run_dir: pathlib.Path) -> dict[str, np.ndarray]:
    """A run's metric columns, as NumPy arrays."""
    with np.load(pathlib.Path(run_dir) / "metrics.npz") as npz:
        return {name: npz[name] for name in npz.files}


def metrics_frame(run_dir: pathlib.Path) -> Any:
    """A run's metrics as a pandas DataFrame indexed by step; the columns taken every
    `eval_every` steps (test metrics, progress measures) are NaN off-cadence, and a per-frequency
    column NAME (evaluations x F) becomes the columns NAME_1 .. NAME_F."""
    import pandas as pd  # optional dependency, only for analysis

    cols = load_metrics(run_dir)
    per_step = ("step", *STEP_METRICS)
    frame = pd.DataFrame({k: cols[k] for k in per_step if k in cols}).set_index("step")
    evals = {}
    for name, col in cols.items():
        if name in per_step:
            continue
        if col.ndim == 1:
            evals[name] = col
        else:
            evals.update({f"{name}_{j + 1}": col[:, j] for j in range(col.shape[1])})
    tests = pd.DataFrame(evals)
    # Test metrics are taken after `test_step` updates: the state train step `test_step` sees.
    return frame.join(tests.set_index("test_step"), how="left")


class Store:
    """Run directories under `root`, keyed by the hash of the resolved config."""

    def __init__(self, root: pathlib.Path | str | None = None) -> None:
        self.root = default_root() if root is None else pathlib.Path(root)

    def run_dir(self, cfg: RunConfig) -> pathlib.Path:
        """The directory of `cfg`'s run (it may not exist yet)."""
        return self.root / "runs" / config_hash(cfg)

    def load_summary(self, cfg: RunConfig) -> dict | None:
        """The stored summary of a finished run of `cfg`, or None if there is none.

        A summary whose config no longer fits `RunConfig` (a field removed or renamed since
        it was written) is stale: one warning line is logged and None returned, so the run
        is trained again.
        """
        path = self.run_dir(cfg) / "summary.json"
        if not path.is_file():
            return None
        try:
            summary = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None  # truncated or garbled (not by this store's atomic writes): redo the run
        stored = summary.get("config") if isinstance(summary, dict) else None
        try:
            old = from_stored(stored)
        except ConfigError as err:
            # Written under another RunConfig schema: stale, so the run is trained again.
            _log.warning("stale run %s (%s): training it again", path.parent, err)
            return None
        if identity(old) != identity(cfg):
            # A hash collision or a hand-edited file.
            raise RuntimeError(f"{path} holds a different config than its hash says")
        return summary

    def metrics_ok(self, cfg: RunConfig, required: Sequence[str] = ()) -> bool:
        """Whether `cfg`'s metrics.npz reads back whole: every column, `cfg.steps` steps long,
        and the `required` ones among them (a run stored before a metric existed lacks it)."""
        try:
            # An open file of our own: np.load leaks its handle when the zip is unreadable.
            with open(self.run_dir(cfg) / "metrics.npz", "rb") as f, np.load(f) as npz:
                cols = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
            return False  # missing, truncated, or a member failing its CRC
        n_steps, n_tests = len(cols.get("step", ())), len(cols.get("test_step", ()))
        lengths_ok = all(len(v) in (n_steps, n_tests) for v in cols.values())
        has_all = all(name in cols for name in required)
        return n_steps == cfg.steps and n_tests > 0 and lengths_ok and has_all

    def remove_temporaries(self) -> int:
        """Delete the temporary files of writes a kill interrupted; only while no one writes."""
        stale = list((self.root / "runs").glob("*/.*.tmp"))
        for path in stale:
            path.unlink(missing_ok=True)
        return len(stale)

    def save(
        self,
        cfg: RunConfig,
        metrics: Mapping[str, np.ndarray],
        summary: dict,
        params: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Write config.json, metrics.npz, params.npz if given, then summary.json (run finished)."""
        arrays = {"metrics": metrics} | ({} if params is None else {"params": params})
        self.write_record(self.run_dir(cfg), cfg.to_dict(), arrays, summary)

    def write_record(
        self,
        run_dir: pathlib.Path,
        config: dict,
        arrays: Mapping[str, Mapping[str, Any]],
        summary: dict,
    ) -> None:
        """Any run's directory: config.json, NAME.npz for each of `arrays`, then summary.json.

        The summary goes last and carries `config`, so `read_record` finds only finished runs.
        Other record kinds (the quant lab's) keep their own hashes and folders under `root`.
        """
        # An old summary.json would vouch for the files rewritten below until the new one lands.
        (run_dir / "summary.json").unlink(missing_ok=True)
        atomic_write_json(run_dir / "config.json", config)
        for name, columns in arrays.items():
            _atomic_write_npz(run_dir / f"{name}.npz", columns)
        atomic_write_json(run_dir / "summary.json", {**summary, "config": config})

    def read_record(
        self, run_dir: pathlib.Path, config: dict, arrays: tuple[str, ...] = ()
    ) -> tuple[dict, dict[str, dict[str, np.ndarray]]] | None:
        """(summary, {name: columns}) of a finished record written with `config`, or None when
        it is missing or damaged (a garbled summary, an unreadable NAME.npz): the caller redoes
        it. A summary naming another config raises (a hash collision or a hand-edited file)."""
        path = pathlib.Path(run_dir) / "summary.json"
        try:
            summary = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(summary, dict) or summary.get("config") != config:
            if isinstance(summary, dict) and isinstance(summary.get("config"), dict):
                raise RuntimeError(f"{path} holds a different config than its hash says")
            return None
        loaded = {}
        for name in arrays:
            columns = _read_npz(pathlib.Path(run_dir) / f"{name}.npz")
            if columns is None:
                return None
            loaded[name] = columns
        return summary, loaded

    def load_params(self, cfg: RunConfig) -> dict[str, np.ndarray] | None:
        """A finished run's final parameters, or None if it was not saved with them."""
        if self.load_summary(cfg) is None:
            return None
        return _read_npz(self.run_dir(cfg) / "params.npz")  # None if damaged: retrain


def _read_npz(path: pathlib.Path) -> dict[str, np.ndarray] | None:
    """Every array of an .npz, or None if it is missing or damaged (truncated, a bad CRC)."""
    try:
        # An open file of our own: np.load leaks its handle when the zip is unreadable.
        with open(path, "rb") as f, np.load(f) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None
