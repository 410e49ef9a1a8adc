"""The reference results bundle (`docs/data/`) and the doc blocks rendered from it.

Every measured number the README's headline results and the docs' measured tables quote
comes from here: the summaries of the runs they quote, the reproduction report's rows, the
quant lab's quick table and the cross-entropy benchmark's output, each with the command and
cache versions that made it (`docs/data/manifest.json`).

    python -m figures.report.bundle refresh  # remake the bundle (trains what its stores
                                             # lack), then render the docs
    python -m figures.report.bundle refresh --quick-only  # the quick half only
    python -m figures.report.bundle render   # rewrite the docs' bundle blocks from docs/data
    python -m figures.report.bundle check    # exit 1 when a doc block differs from the bundle

`refresh` runs the quick build (`grokbench figures --quick`), trains the full-scale recipes of
`FULL_RECIPES` (those that fit in about an hour and a half on a 2-core CPU; `--full-recipes`
changes the list, `--no-train` only reads the stores; the build trains them, as it trains
its figures' runs: `figures.build.train_recipe`), runs the benchmark, writes the
bundle and renders. A doc block is the text between `<!-- bundle:NAME -->` and
`<!-- /bundle:NAME -->`; `tests/test_docs.py` fails when one differs from what `render`
makes of the bundle.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

FULL_RECIPES = (
    "fig2-top",
    "fig2-top-seeds",
    "fig2-bottom",
    "fig2-bottom-cube",
    "eps-settle",
    "fig7",
    "fig4",
)
"""The full-scale recipes the bundle holds: those that train in about 90 minutes on a
2-core CPU. Table 1 (81 runs), orthograd, fig6 and the quant recipe take hours there."""

_BLOCK = "<!-- bundle:{} -->"
_END = "<!-- /bundle:{} -->"


# --- making the bundle -------------------------------------------------------------------------


# The manifest's key for each cache version of `grokbench.versions` (the two summary
# versions keep the keys of the modules that declared them before it held them all).
VERSION_KEYS = {
    "CONFIG_VERSION": "CONFIG_VERSION",
    "DISTILL_VERSION": "DISTILL_VERSION",
    "QUANT_VERSION": "QUANT_VERSION",
    "QUANT_EVAL_VERSION": "QUANT_EVAL_VERSION",
    "SUMMARY_VERSION (slingshot)": "SUMMARY_VERSION",
    "SUMMARY_VERSION (distill)": "DISTILL_SUMMARY_VERSION",
}


def _versions() -> dict[str, int]:
    """Every cache version the bundle's numbers depend on (`grokbench.versions`)."""
    from grokbench import versions

    return {key: getattr(versions, name) for key, name in VERSION_KEYS.items()}


def _machine() -> dict[str, Any]:
    import jax

    from figures.build import cpu_model

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
    }


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _summaries(runs) -> list[dict]:
    """Each run's stored summary (its config included), as summary.json has it."""
    return [dict(r.summary) for r in runs]


def _report_rows(sections) -> list[dict]:
    return [
        {"section": title, **{k: getattr(r, k) for k in ("claim", "status", "ours", "note")}}
        for title, _, rows in sections
        for r in rows
    ]


def _quant_table(path: pathlib.Path) -> dict | None:
    if not path.is_file():
        return None
    table = json.loads(path.read_text())
    for row in table["rows"]:
        row.pop("analysis", None)  # a path into the store that made it
    return table


def _write(name: str, data: Any) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)


def _bench(out: pathlib.Path) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_cross_entropy.py"), "--json", str(out)]
    load = _load()
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return {
        "command": "python benchmarks/bench_cross_entropy.py --json OUT",
        "seconds": round(time.perf_counter() - start, 1),
        "load_average_before": load,
    }


def refresh(
    quick_store: pathlib.Path,
    full_store: pathlib.Path,
    work: pathlib.Path,
    full_recipes: Sequence[str] = FULL_RECIPES,
    train: bool = True,
    bench: bool = True,
    progress: bool = True,
    full_scale: bool = True,
) -> None:
    """Make every file of the bundle (see the module docstring), then render the docs.
    `full_scale=False` remakes the quick half only (quick.json, the manifest's quick entry)
    and keeps full.json: after a change to the quick scales alone."""
    from figures import build, registry, report
    from figures._common import Context
    from figures.report import fig4, fig7
    from grokbench import equilibrium
    from grokbench.store import Store

    work.mkdir(parents=True, exist_ok=True)
    quick_out, full_out = work / "quick", work / "full"
    quick_out.mkdir(exist_ok=True)
    full_out.mkdir(exist_ok=True)
    entries = {}
    if bench:
        DATA.mkdir(parents=True, exist_ok=True)
        entries["bench"] = _bench(DATA / "bench_cross_entropy.json")
    bench_file = DATA / "bench_cross_entropy.json"
    for out in (quick_out, full_out):  # the report's Sec. 8 rows read it from the build
        if bench_file.is_file():
            (out / report.BENCH_FILE).write_text(bench_file.read_text())

    # The quick build: every figure, its runs trained where the store lacks them.
    load, start = _load(), time.perf_counter()
    build.build(quick=True, out=quick_out, store=Store(quick_store), progress=progress)
    entries["quick"] = {
        "command": "grokbench figures --quick --out OUT",
        "seconds": round(time.perf_counter() - start, 1),
        "load_average_before": load,
    }
    ctx = Context(quick=True, out=quick_out, store=Store(quick_store), progress=False)
    names = (*registry.figure_of(), *registry.run_only())
    quick_runs = {n: _summaries(ctx.stored(n) or []) for n in names}
    from grokbench import cliffs

    _write(
        "quick.json",
        {
            "cliffs": [dataclasses.asdict(cliffs.measure(d)) for d in cliffs.DTYPES],
            "runs": {n: r for n, r in quick_runs.items() if r},
            "report": _report_rows(report.evaluate(report.evidence(ctx))),
            "quant": _quant_table(quick_out / "quant_table.json"),
        },
    )

    if not full_scale:  # the full-scale lists stay the previous manifest's
        _write_manifest(entries)
        render()
        return

    # The full-scale recipes that fit, trained through the cached path.
    store = Store(full_store)
    full = Context(quick=False, out=full_out, store=store, progress=progress)
    timing = {}
    for name in full_recipes:
        load, start = _load(), time.perf_counter()
        if train:
            build.train_recipe(full, name)
        timing[name] = {"command": f"grokbench run {name}"}  # the same cached path
        if train:
            timing[name] |= {
                "seconds": round(time.perf_counter() - start, 1),
                "load_average_before": load,
            }
    entries["full"] = timing
    full = Context(quick=False, out=full_out, store=store, progress=False)
    runs = {n: full.stored(n) for n in names}
    fig4_runs = runs.get("fig4") or []
    fig7_runs = runs.get("fig7") or []
    _write(
        "full.json",
        {
            "runs": {n: _summaries(r) for n, r in runs.items() if r},
            "report": _report_rows(report.evaluate(report.evidence(full))),
            "equilibrium": equilibrium.group_rows(fig4.run_rows(fig4_runs)) if fig4_runs else [],
            "fig7_typical_residual": {
                r.config.precision: fig7.typical_residual(r, store)
                for r in fig7_runs
                if r.config.loss == "standard"
            },
        },
    )
    _write_manifest(
        entries,
        full_recipes=[n for n in names if runs.get(n)],
        recipes_not_in_the_bundle_at_full_scale=[n for n in names if not runs.get(n)],
    )
    render()


def _write_manifest(entries: dict[str, Any], **lists: list[str]) -> None:
    """manifest.json: today, the cache versions, the machine, the previous entries updated
    by `entries`, and `lists` (the previous manifest's where not given)."""
    previous = _read("manifest.json") or {}
    _write(
        "manifest.json",
        {
            **previous,
            "made": datetime.date.today().isoformat(),
            "versions": _versions(),
            "machine": _machine(),
            "entries": {**previous.get("entries", {}), **entries},
            **lists,
        },
    )


# --- reading it --------------------------------------------------------------------------------


def _read(name: str) -> Any:
    path = DATA / name
    return json.loads(path.read_text()) if path.is_file() else None


def load() -> dict[str, Any]:
    """The bundle: {'manifest', 'quick', 'full', 'bench'} (None where a file is missing)."""
    return {
        "manifest": _read("manifest.json"),
        "quick": _read("quick.json"),
        "full": _read("full.json"),
        "bench": _read("bench_cross_entropy.json"),
    }


# --- rendering ---------------------------------------------------------------------------------


def blocks(text: str) -> list[tuple[str, int, int]]:
    """The bundle blocks of a document: (name, start, end) of the text between the markers,
    each marker a line of its own (a marker quoted inside a sentence is not one)."""
    out = []
    for match in re.finditer(r"^<!-- bundle:([\w-]+) -->$", text, flags=re.M):
        name, start = match.group(1), match.end() + 1
        end = text.find("\n" + _END.format(name), match.end())
        if end < 0:
            raise ValueError(f"bundle block {name!r} has no {_END.format(name)} line")
        out.append((name, start, end + 1))
    return out


def rendered(text: str, bundle: dict[str, Any]) -> str:
    """`text` with every bundle block replaced by its rendering from `bundle`."""
    from figures.report import bundle_docs

    pieces, pos = [], 0
    for name, start, end in blocks(text):
        if name not in bundle_docs.BLOCKS:
            raise ValueError(f"unknown bundle block {name!r}")
        pieces += [text[pos:start], bundle_docs.BLOCKS[name](bundle).rstrip("\n") + "\n"]
        pos = end
    return "".join(pieces) + text[pos:]


def render(paths: Sequence[pathlib.Path] = DOCS) -> list[pathlib.Path]:
    """Rewrite the bundle blocks of `paths` from docs/data; return the files that changed."""
    bundle = load()
    changed = []
    for path in paths:
        text = path.read_text()
        new = rendered(text, bundle)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def check(paths: Sequence[pathlib.Path] = DOCS) -> list[str]:
    """The blocks whose text differs from what `render` makes of the bundle."""
    bundle = load()
    stale = []
    for path in paths:
        text = path.read_text()
        new = rendered(text, bundle)
        if new != text:
            want = {name: new[s:e] for name, s, e in blocks(new)}
            shown = path.relative_to(ROOT) if ROOT in path.parents else path
            stale += [
                f"{shown}: {name}" for name, s, e in blocks(text) if text[s:e] != want.get(name)
            ]
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m figures.report.bundle", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("refresh", help="remake docs/data, then render the docs")
    make.add_argument("--quick-store", type=pathlib.Path, default=pathlib.Path("results"))
    make.add_argument("--full-store", type=pathlib.Path, default=pathlib.Path("results"))
    make.add_argument("--work", type=pathlib.Path, default=pathlib.Path("out/bundle"))
    make.add_argument("--full-recipes", nargs="*", default=list(FULL_RECIPES))
    make.add_argument("--no-train", action="store_true", help="read the full store only")
    make.add_argument("--no-bench", action="store_true", help="keep the stored benchmark")
    make.add_argument("--no-progress", action="store_true")
    make.add_argument(
        "--quick-only", action="store_true", help="remake the quick half; keep full.json"
    )
    sub.add_parser("render", help="rewrite the docs' bundle blocks from docs/data")
    sub.add_parser("check", help="exit 1 when a doc block differs from the bundle")
    args = parser.parse_args(argv)
    if args.command == "refresh":
        refresh(
            args.quick_store,
            args.full_store,
            args.work,
            args.full_recipes,
            train=not args.no_train,
            bench=not args.no_bench,
            progress=not args.no_progress,
            full_scale=not args.quick_only,
        )
        return 0
    if args.command == "render":
        for path in render():
            print(f"rendered {path.relative_to(ROOT)}")
        return 0
    stale = check()
    for line in stale:
        print(f"differs from docs/data: {line}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
