"""`grokbench figures`: build the named figures (all by default), then the reproduction report.

Every figure reads its runs through `figures._common.Context.runs`, which trains only what
the store lacks (through `grokbench.experiment.run_configs`, as `grokbench run` does), so a
second build is seconds. `--quick` (the default) builds every figure at the recipes' quick
scale; `--full` at the papers'. The report (`reproduction.md`) is written after the figures,
from whatever finished runs of this scale the store holds.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Mapping, Sequence

from figures import registry
from figures._common import Context
from grokbench.config import ConfigError, did_you_mean
from grokbench.runtime import CompileMeter
from grokbench.store import Store, atomic_write_json

__all__ = ["TIMES_FILE", "build", "check_names", "names", "resolve"]

TIMES_FILE = "build_times.json"
"""Per figure and in total: wall, CPU and compile seconds, programs compiled and loaded."""


def names() -> list[str]:
    """Every name `grokbench figures` takes: each build, then the aliases (fig1)."""
    return [*registry.builds(), *registry.aliases()]


def resolve(wanted_names: Sequence[str]) -> list[str]:
    """Figure names in canonical order (all if none given); ValueError names unknown ones."""
    builds, aliases = registry.builds(), registry.aliases()
    wanted: list[str] = []
    for name in wanted_names:
        wanted.extend(aliases.get(name, (name,)))
    unknown = sorted(set(wanted) - set(builds))
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(names())}")
    return [n for n in builds if not wanted or n in wanted]


def check_names(wanted: Sequence[str]) -> None:
    """ConfigError, with suggestions, unless every name is a figure; a recipe gets its figure."""
    from grokbench import recipes

    known = names()
    for name in wanted:
        if name in known:
            continue
        if name in recipes.RECIPES:
            figure = registry.figure_of().get(name)
            which = f"its figure is {figure}" if figure else f"figures: {', '.join(known)}"
            raise ConfigError(f"{name} is a recipe (grokbench run {name}); {which}")
        raise ConfigError(f"unknown figure(s) {name}; {did_you_mean(name, known)}")


def build(
    names: Sequence[str] = (),
    *,
    quick: bool = True,
    out: pathlib.Path | str = "out/figures",
    store: Store | None = None,
    progress: bool = True,
    overrides: Mapping[str, tuple] | None = None,
    report: bool = True,
    log=print,
) -> dict[str, list[pathlib.Path]]:
    """Build figures `names` (all if empty) into `out`; return name -> written paths."""
    ctx = Context(
        quick=quick,
        out=pathlib.Path(out),
        store=store or Store(),
        progress=progress,
        overrides=dict(overrides or {}),
    )
    ctx.out.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[pathlib.Path]] = {}
    times: dict[str, dict[str, float]] = {}
    start, whole = time.perf_counter(), CompileMeter()
    for name in resolve(names):
        meter = CompileMeter()
        log(f"[{ctx.scale}] {name} ...", file=sys.stderr)
        written[name] = registry.builds()[name](ctx)
        files = ", ".join(p.name for p in written[name])
        times[name] = meter.read()
        log(f"[{ctx.scale}] {name}: {files} ({CompileMeter.format(times[name])})", file=sys.stderr)
    if report:
        from figures import report as report_lib

        meter = CompileMeter()
        path, rows = report_lib.write(ctx)
        times["reproduction"] = meter.read()
        counts = report_lib.count(rows)
        written["reproduction"] = [path]
        log(f"[{ctx.scale}] {path.name}: {report_lib.format_counts(counts)}", file=sys.stderr)
    times["total"] = whole.read()
    # Where the build's time went, per figure: docs/benchmarks.md's table reads it.
    atomic_write_json(ctx.out / TIMES_FILE, times)
    log(f"[{ctx.scale}] {CompileMeter.format(times['total'])}", file=sys.stderr)
    log(f"[{ctx.scale}] done in {time.perf_counter() - start:.1f} s -> {ctx.out}", file=sys.stderr)
    return written
