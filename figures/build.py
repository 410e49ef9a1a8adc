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

import argparse
import itertools
import json
import os
import pathlib
import platform
import subprocess
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
    "default_jobs",
    "forecast",
    "format_forecast",
    "lanes",
    "missing",
    "names",
    "resolve",
    "side_by_side",
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


def _cores() -> int:
    """The cores this process may use where the OS says, else all."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def _machine() -> str:
    """'2-core <cpu>': what a record's times were measured on."""
    return f"{_cores()}-core {cpu_model()}"


def default_jobs() -> int:
    """`grokbench figures`' lanes unless --jobs says: 2 where JAX runs on a CPU of 2 or more
    cores (the quick build's figures each keep about 1.6 of 2 cores busy: two lanes fill
    them), else 1 (on a GPU each process would claim most of its memory)."""
    import jax

    return 2 if jax.default_backend() == "cpu" and _cores() >= 2 else 1


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


def _figures() -> dict[str, registry.Figure]:
    """Each build name -> its figure."""
    return {build: f for f in registry.figures() for build in f.builds}


def _owner() -> dict[str, tuple[str, ...]]:
    """Each build name -> the recipes whose runs it trains (its figure's)."""
    return {build: f.recipes for build, f in _figures().items()}


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
    owner = _figures()
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


def lanes(
    todo: Sequence[str], plan: Mapping[str, tuple[int, int]], expected: Mapping, jobs: int
) -> list[list[str]]:
    """The builds of `todo` that train, split into at most `jobs` lanes that train side by
    side (the first in this process, each other in a process of its own), in build order
    within a lane. Builds whose figures need a common recipe share a lane (so no run trains
    twice); the groups go largest first to the lane with the least expected seconds so far
    (`forecast`'s, a build without a record weighing its run-steps / 100). A build trains
    when the store lacks runs of it or it makes the quant lab's tables."""
    owner = _figures()
    working = [
        n for n in todo if plan.get(n, (0, 0))[0] > 0 or (owner[n].quant_lab and expected.get(n))
    ]
    groups: list[tuple[set[str], list[str]]] = []  # (recipes, builds) sharing recipes
    for name in working:
        needs = set(owner[name].needs) | ({"quant lab"} if owner[name].quant_lab else set())
        joined = [g for g in groups if g[0] & needs]
        groups = [g for g in groups if not g[0] & needs]
        groups.append(
            (needs.union(*(r for r, _ in joined)), [*(b for _, bs in joined for b in bs), name])
        )

    def weight(name: str) -> float:
        seconds = expected.get(name)
        return seconds if seconds is not None else plan.get(name, (0, 0))[1] / 100

    sized = sorted(
        ((sum(weight(b) for b in builds), builds) for _, builds in groups), key=lambda g: -g[0]
    )
    n_lanes = max(1, jobs)
    lanes_: list[list[str]] = [[] for _ in range(n_lanes)]
    for (_, builds), lane in zip(sized, _balanced([s for s, _ in sized], n_lanes), strict=True):
        lanes_[lane].extend(builds)
    order = {n: i for i, n in enumerate(todo)}
    return [sorted(lane, key=order.__getitem__) for lane in lanes_ if lane]


_EXHAUSTIVE = 1 << 16
"""`_balanced` tries every assignment up to this many (2 lanes: up to 17 groups), else goes
greedy."""


def _balanced(sizes: Sequence[float], n_lanes: int) -> list[int]:
    """A lane per size (sizes largest first) that makes the largest lane total smallest: every
    assignment when there are few (the first group always in lane 0), else the largest first
    to the least loaded lane. A quick build has 6 groups; the greedy rule split them
    (191, 124, 112, 74, 65, 58 s) 344 / 310 s where 314 / 310 s was there."""
    greedy, totals = [], [0.0] * n_lanes
    for size in sizes:
        lane = totals.index(min(totals))
        greedy.append(lane)
        totals[lane] += size
    if len(sizes) < 2 or n_lanes ** (len(sizes) - 1) > _EXHAUSTIVE:
        return greedy
    best, best_max = greedy, max(totals)
    for rest in itertools.product(range(n_lanes), repeat=len(sizes) - 1):
        lanes = (0, *rest)
        totals = [0.0] * n_lanes
        for size, lane in zip(sizes, lanes, strict=True):
            totals[lane] += size
        if max(totals) < best_max - 1e-9:
            best, best_max = list(lanes), max(totals)
    return best


def _train_lane(
    ctx: Context, names: Sequence[str], done=lambda name: None, report: pathlib.Path | None = None
) -> dict[str, dict]:
    """Train what each build of `names` draws (`train`), then draw it; per build its
    `CompileMeter` reading and the files it wrote ("paths"), written to `report` after each
    build (so a lane that stops keeps what it finished), `done(name)` after each. A lane
    draws its own figures (they need only its recipes), so the drawing left after the lanes
    is the figures that train nothing, and the report."""
    spent: dict[str, dict] = {}
    for name in names:
        paths, reading = _train_and_draw(ctx, name)
        spent[name] = {**reading, "paths": [str(p) for p in paths]}
        if report is not None:
            atomic_write_json(report, spent)
        done(name)
    return spent


def _train_and_draw(ctx: Context, name: str) -> tuple[list[pathlib.Path], dict[str, float]]:
    """Train what build `name` draws and the store lacks (`train`), then draw it (drawing
    only reads): the files it wrote and the `CompileMeter` reading of both."""
    meter = CompileMeter()
    train(ctx, [name])
    paths = registry.builds()[name](ctx)
    return paths, meter.read()


def _spawn_lane(
    ctx: Context, names: Sequence[str], lane: int, warm: bool = False
) -> tuple[subprocess.Popen, pathlib.Path]:
    """Start `python -m figures.build --lane ...` training `names` into the build's store
    (and then warming the report, `_warm_report`, if `warm`); it writes its per-build
    readings to OUT/.lane-N.json and its output to OUT/.lane-N.log."""
    import jax

    env = dict(os.environ)
    cache = jax.config.jax_compilation_cache_dir
    if cache:  # the same persistent compilation cache as this process
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    report = ctx.out / f".lane-{lane}.json"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "figures.build", *_lane_args(ctx, names, report, warm)]
    with open(ctx.out / f".lane-{lane}.log", "w") as log:  # the child holds its own copy
        child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    return child, report


def _lane_args(
    ctx: Context, names: Sequence[str], report: pathlib.Path, warm: bool = False
) -> list[str]:
    """`_lane_main`'s arguments for a lane training `names` of `ctx`'s build."""
    overrides = {k: list(v) for k, v in ctx.overrides.items()}
    return [
        "--lane", *names, "--scale", ctx.scale, "--out", str(ctx.out),
        "--results", str(ctx.store.root), "--overrides", json.dumps(overrides),
        "--report", str(report), *(["--warm-report"] if warm else []),
    ]  # fmt: skip


def _warm_report(ctx: Context, log=tqdm.tqdm.write) -> None:
    """Evaluate the report's claims on what the store holds so far, and keep nothing: run in
    the lane expected to finish first, while the others still train, it compiles the
    report's own measurements (fig1's cliffs, fig7's residuals, ...) into the persistent
    compilation cache the lanes share, so the report after the lanes loads them instead
    (about 11 of its 12 s were compiling in a quick build). A failure here costs only that
    saving: the report after the lanes evaluates everything again and says what fails."""
    from figures import report

    try:
        report.evaluate(report.evidence(ctx))
    except Exception as err:  # the report after the lanes raises it again, with context
        log(f"[{ctx.scale}] warming the report stopped: {err!r}", file=sys.stderr)


def _lane_seconds(lane: Sequence[str], expected: Mapping[str, float | None]) -> float:
    """A lane's expected seconds alone: its builds' (0 for a build without a record)."""
    return sum(expected.get(n) or 0.0 for n in lane)


def _first_done(split: Sequence[Sequence[str]], expected: Mapping[str, float | None]) -> int:
    """The lane of `split` with the fewest expected seconds (the first of equals)."""
    totals = [_lane_seconds(lane, expected) for lane in split]
    return totals.index(min(totals))


def _train_side_by_side(
    ctx: Context,
    split: Sequence[Sequence[str]],
    log,
    done=lambda name: None,
    warm: int | None = None,
) -> dict[str, dict]:
    """Train and draw the lanes of `split` at once (the first here); per build its reading
    and files (`_train_lane`; `done(name)` as each finishes here, and for another lane's
    finished builds when its process ends); the lane `warm` (expected to finish first) then
    warms the report. An interrupt stops the other processes too; what they finished stays in
    the store."""
    log(
        f"[{ctx.scale}] training in {len(split)} processes: "
        + "; ".join(", ".join(lane) for lane in split),
        file=sys.stderr,
    )
    children = [_spawn_lane(ctx, lane, i, i == warm) for i, lane in enumerate(split[1:], 1)]
    trained: dict[str, dict] = {}
    try:
        trained.update(_train_lane(ctx, split[0], done))
        if warm == 0:
            _warm_report(ctx, log)
        for i, ((child, report), lane) in enumerate(zip(children, split[1:], strict=True), 1):
            code = child.wait()
            try:
                finished = json.loads(report.read_text())
            except (OSError, ValueError):
                finished = {}
            trained.update(finished)
            for name in lane:
                if name in finished:
                    done(name)
            if left := [name for name in lane if name not in finished]:
                log(
                    f"[{ctx.scale}] the process training {', '.join(lane)} stopped (exit "
                    f"{code}; {ctx.out / f'.lane-{i}.log'}) before {', '.join(left)}: what it "
                    "left untrained trains here",
                    file=sys.stderr,
                )
    finally:
        for child, _ in children:
            if child.poll() is None:
                child.terminate()
                child.wait()
    return trained


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The sum of two `CompileMeter` readings (the lanes' processes' and this one's)."""
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


def _reading(lane: Mapping[str, Any], wall: bool = True) -> dict[str, Any]:
    """A lane's record of one build as a `CompileMeter` reading (without its files; without
    its wall when summed into the build's total, whose wall is this process's)."""
    return {k: v for k, v in lane.items() if k != "paths" and (wall or k != "wall")}


def _lane_main(argv: Sequence[str] | None = None) -> int:
    """A lane of `build(..., jobs > 1)`: train the named builds' runs into the store and draw
    their figures into OUT."""
    parser = argparse.ArgumentParser(prog="python -m figures.build", description=_lane_main.__doc__)
    parser.add_argument("--lane", nargs="+", required=True)
    parser.add_argument("--scale", choices=("quick", "full"), required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--results", type=pathlib.Path, required=True)
    parser.add_argument("--overrides", default="{}")
    parser.add_argument("--report", type=pathlib.Path, required=True)
    parser.add_argument("--warm-report", action="store_true")
    args = parser.parse_args(argv)
    overrides = {k: tuple(v) for k, v in json.loads(args.overrides).items()}
    ctx = Context(
        quick=args.scale == "quick",
        out=args.out,
        store=Store(args.results),
        progress=False,
        overrides=overrides,
    )
    _train_lane(ctx, resolve(args.lane), report=args.report)
    if args.warm_report:
        _warm_report(ctx)
    return 0


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
    plan: Mapping[str, tuple[int, int]], record: Mapping[str, Mapping], key: str = "wall"
) -> dict[str, float | None]:
    """Expected seconds per build: the record's wall (or `key`: "cpu") for it scaled by the
    run-steps left to train (as recorded for a build that trains nothing of its own, such as
    the quant lab's, whose runs have their own store); None where the record lacks it."""
    expected: dict[str, float | None] = {}
    for name, (_, steps) in plan.items():
        past = record.get(name)
        if not past or key not in past:
            expected[name] = None
        elif past.get("run_steps"):
            share = min(1.0, steps / past["run_steps"])
            fixed = past[key] * 0.05  # drawing and loading stay when nothing trains
            expected[name] = fixed + (past[key] - fixed) * share
        else:
            expected[name] = past[key]
    return expected


def bar_weights(names: Sequence[str], expected: Mapping[str, float | None]) -> dict[str, int]:
    """Each build's share of the progress bar: its expected seconds in whole tenths (at least
    one; a build without a record counts one second). Integers, so the updates add up to the
    bar's total exactly: float shares rounded one by one can sum past a total rounded once,
    and tqdm then warns and shows a negative time left."""
    seconds = {n: 1.0 if expected.get(n) is None else expected[n] for n in names}
    return {n: max(1, round(10 * s)) for n, s in seconds.items()}


def side_by_side(
    split: Sequence[Sequence[str]],
    expected: Mapping[str, float | None],
    cpu: Mapping[str, float | None],
    cores: int,
) -> float:
    """Expected seconds of the lanes of `split` trained at once: the longest lane's, or the
    lanes' CPU seconds over the cores if more (lanes sharing the cores wait for them)."""
    longest = max(_lane_seconds(lane, expected) for lane in split)
    work = sum(cpu.get(n) or 0.0 for lane in split for n in lane)
    return max(longest, work / max(cores, 1))


def format_forecast(
    plan: Mapping[str, tuple[int, int]],
    expected: Mapping[str, float | None],
    source: str,
    split: Sequence[Sequence[str]] = (),
    together: float | None = None,
) -> str:
    """The table `grokbench figures` prints before it works; with lanes (`split` of more
    than one), `together` is their expected seconds at once (`side_by_side`)."""
    lines = [f"{'build':<14}{'runs to train':>14}{'run-steps':>12}{'expected':>10}"]
    for name, (runs, steps) in plan.items():
        seconds = expected.get(name)
        shown = "?" if seconds is None else f"{seconds:.0f} s"
        lines.append(f"{name:<14}{runs:>14,}{steps:>12,}{shown:>10}")
    known = [s for s in expected.values() if s is not None]
    total = sum(runs for runs, _ in plan.values())
    laned = {n for lane in split for n in lane} if len(split) > 1 and together else set()
    if known:
        rest = sum(s for n, s in expected.items() if s is not None and n not in laned)
        lines.append(
            f"about {duration(rest + (together or 0.0) if laned else sum(known))} for "
            f"{plural(total, 'run')} to train (scaled from {source}; '?': no record)"
        )
    else:
        lines.append(f"{plural(total, 'run')} to train (no record of an earlier build to time it)")
    if len(split) > 1:
        parts = []
        for lane in split:
            parts.append(f"{', '.join(lane)} (~{_lane_seconds(lane, expected):.0f} s)")
        lines.append(f"training in {len(split)} processes side by side: {'; '.join(parts)}")
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
    log=tqdm.tqdm.write,
    jobs: int = 1,
) -> dict[str, list[pathlib.Path]]:
    """Build figures `names` (all if empty) into `out`; return name -> written paths.

    `jobs` > 1: the builds that train go in up to `jobs` lanes (`lanes`) trained side by
    side, each lane after the first in a process of its own (`python -m figures.build
    --lane`, its output in OUT/.lane-N.log), before the figures are drawn in order. A run
    trains the same in either process (the bits do not depend on it); a lane that stops
    leaves its untrained runs to this process's drawing loop, which trains what is missing.
    `log` writes the build's lines: by default `tqdm.write`, which clears the bar first and
    draws it again after (`print` would run a line on from the bar's text).
    """
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
    split = lanes(todo, plan, expected, jobs) if jobs > 1 else []
    split = split if len(split) > 1 else []  # one lane: this process trains it, as without
    together = None
    if split:
        together = side_by_side(split, expected, forecast(plan, record, "cpu"), _cores())
    log(format_forecast(plan, expected, source, split, together), file=sys.stderr)
    # The build's bar counts expected tenths of seconds (a build without a record: one
    # second), so its 'left' is the forecast corrected by the pace so far.
    weights = bar_weights(todo, expected)
    overall = tqdm.tqdm(
        total=sum(weights.values()),
        desc=f"[{ctx.scale}] build",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} spent, ~{remaining} left",
        disable=not progress,
        file=sys.stderr,
    )
    start, whole = time.perf_counter(), CompileMeter()
    bar = lambda name: overall.update(weights[name])  # noqa: E731
    warm = _first_done(split, expected) if split and report else None
    drawn = _train_side_by_side(ctx, split, log, bar, warm) if split else {}
    lane_totals: dict[str, Any] = {}
    for name, reading in drawn.items():
        if name not in split[0]:  # another process's: not in this one's meter
            lane_totals = _merge(lane_totals, _reading(reading, wall=False))
    for name in todo:
        if name in drawn:  # trained and drawn in its lane
            written[name] = [pathlib.Path(p) for p in drawn[name]["paths"]]
            reading = _reading(drawn[name])
        else:
            log(f"[{ctx.scale}] {name} ...", file=sys.stderr)
            written[name], reading = _train_and_draw(ctx, name)
        times[name] = {**reading, "runs": plan[name][0], "run_steps": plan[name][1]}
        if name not in drawn:  # a lane's finished build counted as it trained
            overall.update(weights[name])
        files = ", ".join(p.name for p in written[name])
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
    times["total"] = _merge(whole.read(), lane_totals)  # CPU and programs of every process
    if split:
        times["lanes"] = [list(lane) for lane in split]
    # Where the build's time went, per figure: the tables of
    # docs/studies/build-and-suite-timing.md read it.
    atomic_write_json(ctx.out / TIMES_FILE, times)
    log(f"[{ctx.scale}] {CompileMeter.format(times['total'])}", file=sys.stderr)
    log(f"[{ctx.scale}] done in {time.perf_counter() - start:.1f} s -> {ctx.out}", file=sys.stderr)
    return written


if __name__ == "__main__":
    sys.exit(_lane_main())
