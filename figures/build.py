"""`grokbench figures`: build the named figures (all by default), then the reproduction report.

Every figure reads its runs through `figures._common.Context.runs`, which trains only what
the store lacks (through `grokbench.experiment.run_configs`, as `grokbench run` does), so a
second build is seconds. `--quick` (the default) builds every figure at the recipes' quick
scale; `--full` at the papers'. The report (`reproduction.md`) is written after the figures,
from whatever finished runs of this scale the store holds.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from figures._common import Context
from grokbench.store import Store

__all__ = ["ALIASES", "FIGURES", "build", "resolve"]

FIGURES: dict[str, tuple[str, str]] = {
    "fig1a": ("figures.fig1", "draw_fig1a"),
    "fig1b": ("figures.fig1", "draw_fig1b"),
    "fig2": ("figures.fig2", "draw"),
    "fig3": ("figures.fig3", "draw"),
    "fig4": ("figures.fig4", "draw"),
    "fig5": ("figures.table1", "draw_fig5"),
    "table1": ("figures.table1", "write_table"),
    "fig6": ("figures.fig6", "draw"),
    "fig7": ("figures.fig7", "draw"),
    "quant": ("figures.quant", "draw"),
    "setup_study": ("figures.setup_study", "draw"),
    "progress": ("figures.progress", "draw"),
}
"""Every figure/table by name -> (module, function taking a Context, returning paths)."""

ALIASES: dict[str, tuple[str, ...]] = {"fig1": ("fig1a", "fig1b")}
"""Names that stand for several figures."""


def resolve(names: Sequence[str]) -> list[str]:
    """Figure names in canonical order (all if none given); ValueError names unknown ones."""
    wanted: list[str] = []
    for name in names:
        wanted.extend(ALIASES.get(name, (name,)))
    unknown = sorted(set(wanted) - set(FIGURES))
    if unknown:
        known = ", ".join([*FIGURES, *ALIASES])
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; known: {known}")
    return [n for n in FIGURES if not wanted or n in wanted]


def _function(name: str) -> Callable[[Context], list[pathlib.Path]]:
    module, attr = FIGURES[name]
    return getattr(importlib.import_module(module), attr)


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
    start = time.perf_counter()
    for name in resolve(names):
        t0 = time.perf_counter()
        log(f"[{ctx.scale}] {name} ...", file=sys.stderr)
        written[name] = _function(name)(ctx)
        files = ", ".join(p.name for p in written[name])
        log(f"[{ctx.scale}] {name}: {files} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if report:
        from figures import report as report_lib

        path, rows = report_lib.write(ctx)
        counts = report_lib.count(rows)
        written["reproduction"] = [path]
        log(f"[{ctx.scale}] {path.name}: {report_lib.format_counts(counts)}", file=sys.stderr)
    log(f"[{ctx.scale}] done in {time.perf_counter() - start:.1f} s -> {ctx.out}", file=sys.stderr)
    return written
