"""`grokbench figures`: build the named figures (all by default), then the reproduction report.

This is the one place figures train. Before drawing a figure, the build asks it which runs
it needs (`figures.registry.Figure.needs`, and the quant lab's tables for the quant figure)
and trains only what the store lacks (`train`: through each recipe's lab,
`grokbench.labs.lab_for(recipe).train`, as `grokbench run` does; the quant lab's tables
through `grokbench.labs.QUANT`), so a second build is seconds. The figures then only
read: each gets its runs through `figures._common.Context.runs`, which never trains.
`--quick` (the default) builds every figure at the recipes' quick scale; `--full` at the
papers'. The report (`reproduction.md`) is written after the figures, from whatever
finished runs of this scale the store holds.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import tqdm

from figures import registry
from figures._common import ABLATIONS_FILE, CONSTANT_LR_FILE, Context
from grokbench import labs
from grokbench.config import ConfigError, did_you_mean
from grokbench.console import duration, plural
from grokbench.runtime import CompileMeter
from grokbench.store import Store, atomic_write_json

__all__ = [
    "REFERENCE_TIMES",
    "TIMES_FILE",
    "build",
    "check_names",
    "cpu_model",
    "forecast",
    "format_forecast",
    "missing",
    "names",
    "resolve",
    "train",
    "train_recipe",
]

TIMES_FILE = "build_times.json"
"""Per figure and in total: wall, CPU and compile seconds, programs compiled and loaded, and
the runs and run-steps (steps x runs) it trained; `forecast` reads it at the next build."""

REFERENCE_TIMES = pathlib.Path(__file__).with_name("reference_build_times.json")
"""A quick build's `TIMES_FILE` from a fresh 2-core CPU (its machine and date inside): the
forecast's record when OUT holds none of this scale yet."""


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's, else what `platform` knows)."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _machine() -> str:
    """'2-core <cpu>': what a record's times were measured on (the cores this process may
    use where the OS says, else all)."""
    cpu = cpu_model()
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else os.cpu_count()
    return f"{cores}-core {cpu}"


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


def _owner() -> dict[str, tuple[str, ...]]:
    """Each build name -> the recipes whose runs it trains (its figure's)."""
    return {build: f.recipes for f in registry.figures() for build in f.builds}


def missing(ctx: Context, names: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Per build, in build order: (runs, run-steps) it will train, those the store lacks
    (a run shared by two builds counts at the first)."""
    seen: set = set()
    plan = {}
    for name in names:
        runs = steps = 0
        for recipe in _owner().get(name, ()):
            for cfg in ctx.configs(recipe):
                if cfg in seen or ctx.store.load_summary(cfg) is not None:
                    continue
                seen.add(cfg)
                runs, steps = runs + 1, steps + cfg.steps
        plan[name] = (runs, steps)
    return plan


def train_recipe(ctx: Context, recipe: str) -> None:
    """Train the recipe's runs of this build's scale that the store lacks (the others are
    loaded), through the recipe's lab (`grokbench.labs`, the path `grokbench run` takes),
    and hold them all in `ctx`."""
    lab = labs.lab_for(recipe)
    summaries = lab.train(ctx.configs(recipe), ctx.store, quick=ctx.quick, progress=ctx.progress)
    ctx.keep(recipe, summaries)


def train(ctx: Context, names: Sequence[str]) -> None:
    """Train what the builds `names` draw that the store lacks, before they are drawn: the
    runs of every recipe their figures need (those `ctx` holds already are not asked for
    again), and for the quant figure the quant lab's tables (`_make_quant`)."""
    owner = {build: f for f in registry.figures() for build in f.builds}
    made: set[str] = set()
    for name in names:
        figure = owner[name]
        for recipe in figure.needs:
            if not ctx.kept(recipe):
                train_recipe(ctx, recipe)
        if figure.quant_lab and figure.name not in made:
            _make_quant(ctx)
        made.add(figure.name)


def _make_quant(ctx: Context) -> None:
    """The quant lab at the build's scale (cached in its own store, under the build's store
    root): OUT/quant_table.json and quant_table.md. The full build adds the paper's
    ablations (`grokbench.quant.ABLATIONS`: the encoder's at its recipe's setting, 13 runs
    of 6,000 steps beside the recipe's own, the decoder's LayerNorm sweep at the quick
    scale), stored as OUT/quant_ablations.json, and the encoder recipe at a constant lr
    (`grokbench.quant.recipes.CONSTANT_LR`, three more 6,000-step runs), stored as
    OUT/quant_constant_lr.json. The quick build makes neither (it stays within its budget)."""
    from grokbench import quant
    from grokbench.quant.recipes import CONSTANT_LR, QUANT

    lab = labs.QUANT  # the path of `grokbench run quant`
    table = lab.train(
        lab.expand(QUANT, [], ctx.quick), ctx.store, quick=ctx.quick, progress=ctx.progress
    )
    lab.write(ctx.out, table)
    if not ctx.quick:
        tables = quant.run_ablations(results=ctx.store.root, progress=ctx.progress)
        atomic_write_json(ctx.out / ABLATIONS_FILE, tables)
        constant = lab.train(
            lab.expand(CONSTANT_LR, [], False), ctx.store, quick=False, progress=ctx.progress
        )
        atomic_write_json(ctx.out / CONSTANT_LR_FILE, constant)


def _record(out: pathlib.Path, scale: str) -> tuple[dict, str]:
    """The per-build record the forecast scales: OUT's last build of this scale, else the
    reference quick build; ({}, '') when neither fits."""
    for path, where in ((out / TIMES_FILE, "this OUT's last build"), (REFERENCE_TIMES, None)):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("scale", "quick") != scale:
            continue
        return record, where or f"a build on {record.get('machine', 'another machine')}"
    return {}, ""


def forecast(
    plan: Mapping[str, tuple[int, int]], record: Mapping[str, Mapping]
) -> dict[str, float | None]:
    """Expected seconds per build: the record's wall for it scaled by the run-steps left to
    train (its wall as recorded for a build that trains nothing of its own, such as the quant
    lab's, whose runs have their own store); None where the record lacks the build."""
    expected: dict[str, float | None] = {}
    for name, (_, steps) in plan.items():
        past = record.get(name)
        if not past:
            expected[name] = None
        elif past.get("run_steps"):
            share = min(1.0, steps / past["run_steps"])
            fixed = past["wall"] * 0.05  # drawing and loading stay when nothing trains
            expected[name] = fixed + (past["wall"] - fixed) * share
        else:
            expected[name] = past["wall"]
    return expected


def format_forecast(
    plan: Mapping[str, tuple[int, int]], expected: Mapping[str, float | None], source: str
) -> str:
    """The table `grokbench figures` prints before it works."""
    lines = [f"{'build':<14}{'runs to train':>14}{'run-steps':>12}{'expected':>10}"]
    for name, (runs, steps) in plan.items():
        seconds = expected.get(name)
        shown = "?" if seconds is None else f"{seconds:.0f} s"
        lines.append(f"{name:<14}{runs:>14,}{steps:>12,}{shown:>10}")
    known = [s for s in expected.values() if s is not None]
    total = sum(runs for runs, _ in plan.values())
    if known:
        lines.append(
            f"about {duration(sum(known))} for {plural(total, 'run')} to train "
            f"(scaled from {source}; '?': no record)"
        )
    else:
        lines.append(f"{plural(total, 'run')} to train (no record of an earlier build to time it)")
    return "\n".join(lines)


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
    times: dict[str, Any] = {"scale": ctx.scale, "machine": _machine()}
    todo = resolve(names)
    plan = missing(ctx, todo)
    record, source = _record(ctx.out, ctx.scale)
    expected = forecast(plan, record)
    log(format_forecast(plan, expected, source), file=sys.stderr)
    # The build's bar counts expected seconds (a build without a record: one per build), so
    # its 'left' is the forecast corrected by the pace so far.
    weights = {n: expected[n] if expected[n] is not None else 1.0 for n in todo}
    overall = tqdm.tqdm(
        total=round(sum(weights.values()), 1),
        desc=f"[{ctx.scale}] build",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} spent, ~{remaining} left",
        disable=not progress,
        file=sys.stderr,
    )
    start, whole = time.perf_counter(), CompileMeter()
    for name in todo:
        meter = CompileMeter()
        log(f"[{ctx.scale}] {name} ...", file=sys.stderr)
        train(ctx, [name])  # what the figure draws and the store lacks; drawing only reads
        written[name] = registry.builds()[name](ctx)
        files = ", ".join(p.name for p in written[name])
        times[name] = {**meter.read(), "runs": plan[name][0], "run_steps": plan[name][1]}
        overall.update(round(weights[name], 1))
        log(f"[{ctx.scale}] {name}: {files} ({CompileMeter.format(times[name])})", file=sys.stderr)
    overall.close()
    if report:
        from figures import report as report_lib

        meter = CompileMeter()
        path, rows = report_lib.write(ctx)
        times["reproduction"] = meter.read()
        counts = report_lib.count(rows)
        written["reproduction"] = [path]
        log(f"[{ctx.scale}] {path.name}: {report_lib.format_counts(counts)}", file=sys.stderr)
    times["total"] = whole.read()
    # Where the build's time went, per figure: the tables of
    # docs/studies/build-and-suite-timing.md read it.
    atomic_write_json(ctx.out / TIMES_FILE, times)
    log(f"[{ctx.scale}] {CompileMeter.format(times['total'])}", file=sys.stderr)
    log(f"[{ctx.scale}] done in {time.perf_counter() - start:.1f} s -> {ctx.out}", file=sys.stderr)
    return written
