"""The `grokbench` console script: parse, dispatch, nothing else."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys


def _cliffs(args: argparse.Namespace) -> int:
    from grokbench import cliffs

    names = args.dtypes or list(cliffs.DTYPES)
    unknown = sorted(set(names) - set(cliffs.DTYPES))
    if unknown:
        print(
            f"grokbench cliffs: unknown dtype(s) {', '.join(unknown)}; "
            f"choose from {', '.join(cliffs.DTYPES)}",
            file=sys.stderr,
        )
        return 2
    rows = [cliffs.measure(name) for name in names]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    else:
        print("Cross-entropy on logits [m, 0] with target 0, for every representable m > 0:")
        print(cliffs.format_table(rows))
        print("\nstd: numerics.standard (as optax); fixed: numerics.cross_entropy. The fixed")
        print("target gradient reaches 0 only where exp(-m) itself underflows.")
    return 0


def _use_all_cores() -> None:
    """Split the CPU into one JAX host device per core, unless XLA_FLAGS already chooses.

    Must run before jax is imported. The engine shards a batch of runs over the devices, so
    each core trains its share of the seeds (grokbench.engine._place).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" in sys.modules or "xla_force_host_platform_device_count" in flags:
        return
    count = f"--xla_force_host_platform_device_count={os.cpu_count() or 1}"
    os.environ["XLA_FLAGS"] = f"{flags} {count}".strip()


def _run(args: argparse.Namespace) -> int:
    _use_all_cores()
    from grokbench import experiment, recipes
    from grokbench.config import ConfigError, parse_overrides
    from grokbench.store import Store

    try:
        recipe = recipes.get_recipe(args.recipe)
        configs = recipes.expand(recipe, parse_overrides(args.overrides), quick=args.quick)
    except ConfigError as err:
        print(f"grokbench run: error: {err}", file=sys.stderr)
        return 2
    if args.chunk < 1:
        print("grokbench run: error: --chunk must be >= 1", file=sys.stderr)
        return 2
    summaries = experiment.run_configs(
        configs, Store(args.results), progress=not args.no_progress, chunk_steps=args.chunk
    )
    print(experiment.format_table(summaries))
    if args.out is not None:
        print(f"wrote {experiment.write_out(args.out, summaries)}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    _use_all_cores()
    from grokbench import executors, experiment, sweep
    from grokbench.config import ConfigError

    def fail(message: str, status: int = 2) -> int:
        print(f"grokbench sweep: error: {message}", file=sys.stderr)
        return status

    try:
        configs = sweep.expand_grid(args.recipe, args.overrides, quick=args.quick)
    except ConfigError as err:
        return fail(str(err))
    if args.chunk < 1:
        return fail("--chunk must be >= 1")
    if args.batch is not None and args.batch < 1:
        return fail("--batch must be >= 1")
    if args.executor != "ray" and args.ray_address is not None:
        return fail("--ray-address needs --executor ray")
    executor = None
    if args.executor == "ray":
        if not executors.ray_available():
            return fail("--executor ray needs Ray: pip install 'grokbench[ray]'")
        executor = executors.RayExecutor(args.ray_address)
    try:
        summaries = sweep.run_sweep(
            configs,
            args.out,
            executor=executor,
            max_batch=args.batch,
            chunk_steps=args.chunk,
            progress=not args.no_progress,
        )
    except sweep.SweepBusy as err:
        return fail(str(err), status=1)
    print(experiment.format_table(summaries))
    print(f"wrote {args.out / 'summary.json'} and {args.out / sweep.TABLE_FILE}")
    return 0


def _equilibrium(args: argparse.Namespace) -> int:
    from grokbench import equilibrium

    try:
        rows, _ = equilibrium.analyze_dir(args.dir)
    except (ValueError, FileNotFoundError) as err:
        print(f"grokbench equilibrium: error: {err}", file=sys.stderr)
        return 2
    print(equilibrium.format_table(rows))
    print(f"wrote {args.dir / equilibrium.OUTPUT_FILE}")
    return 0


def _slingshot(args: argparse.Namespace) -> int:
    from grokbench import slingshot, sweep
    from grokbench.store import load_metrics

    try:
        runs = sweep.dir_runs(args.dir)
    except (ValueError, FileNotFoundError) as err:
        print(f"grokbench slingshot: error: {err}", file=sys.stderr)
        return 2
    print(slingshot.format_spikes([(s, load_metrics(d)) for s, d in runs]))
    return 0


def _recipes(args: argparse.Namespace) -> int:
    from grokbench import recipes

    for recipe in recipes.RECIPES.values():
        runs = len(recipes.expand(recipe))
        quick = len(recipes.expand(recipe, quick=True))
        print(f"{recipe.name:<12} {runs:3d} runs ({quick} with --quick): {recipe.description}")
    return 0


def _quant(args: argparse.Namespace) -> int:
    from grokbench import quant
    from grokbench.config import ConfigError

    try:
        overrides = quant.parse_quant_overrides(args.overrides)
        table = quant.run_quant(
            args.quick, args.out, overrides, results=args.results, progress=not args.no_progress
        )
    except ConfigError as err:
        print(f"grokbench quant: error: {err}", file=sys.stderr)
        return 2
    from figures.quant import draw_quant_figures

    paths = draw_quant_figures(table, args.out)
    print(quant.format_markdown(table))
    print(f"wrote {args.out / 'quant_table.json'}, {args.out / 'quant_table.md'}, ", end="")
    print(", ".join(p.name for p in paths))
    return 0


def _figures(args: argparse.Namespace) -> int:
    _use_all_cores()
    from figures import build
    from grokbench.config import ConfigError, parse_overrides
    from grokbench.store import Store

    try:
        names = build.resolve(args.names)
        overrides = parse_overrides(args.overrides)
    except (ValueError, ConfigError) as err:
        print(f"grokbench figures: error: {err}", file=sys.stderr)
        return 2
    build.build(
        names,
        quick=not args.full,
        out=args.out,
        store=Store(args.results),
        progress=not args.no_progress,
        overrides=overrides,
    )
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = _Parser(prog="grokbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser(
        "run",
        help="train a recipe (see `grokbench recipes`), cached per run config",
        description="Train RECIPE with typed key=value overrides (key=v1,v2 sweeps a key; "
        "seeds=N runs N seeds, batched). Finished runs are loaded from the store, not "
        "retrained.",
    )
    r.add_argument("recipe", help="recipe name, e.g. fig2-top")
    r.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    r.add_argument("--quick", action="store_true", help="the recipe's minutes-on-a-CPU variant")
    r.add_argument("--out", type=pathlib.Path, help="write OUT/summary.json ({'runs': [...]})")
    r.add_argument(
        "--results",
        type=pathlib.Path,
        default=None,
        help="store root (default: $GROKBENCH_RESULTS or ./results)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--chunk", type=int, default=1000, help="steps per compiled call (speed only)")
    r.set_defaults(func=_run)
    w = sub.add_parser(
        "sweep",
        help="train a grid of a recipe into one resumable directory",
        description="Train the cartesian product of RECIPE's grid and the key=v1,v2 overrides "
        "into DIR (DIR/runs/HASH per run, DIR/summary.json, DIR/sweep.csv). Runs that share "
        "shapes are trained as one vmapped program, the rest one after another. Safe to kill "
        "and rerun: finished runs are kept, unfinished ones redone. One sweep per DIR at once.",
    )
    w.add_argument("recipe", help="recipe name, e.g. fig4")
    w.add_argument("overrides", nargs="*", metavar="key=value", help="key=v1,v2 sweeps a key")
    w.add_argument("--out", type=pathlib.Path, required=True, help="the sweep directory")
    w.add_argument("--quick", action="store_true", help="the recipe's minutes-on-a-CPU variant")
    w.add_argument("--executor", choices=("local", "ray"), default="local", help="where to train")
    w.add_argument(
        "--ray-address", default=None, help="Ray cluster to use (default: start a local one)"
    )
    w.add_argument("--batch", type=int, default=None, help="most runs per program (default: all)")
    w.add_argument("--no-progress", action="store_true", help="no progress bar")
    w.add_argument("--chunk", type=int, default=1000, help="steps per compiled call (speed only)")
    w.set_defaults(func=_sweep)
    e = sub.add_parser(
        "equilibrium",
        help="margin plateaus of a sweep vs log(1/eps), per eps and weight decay",
        description="Find where each run's mean training margin levels off (the rule is in "
        "grokbench.equilibrium), group runs by eps and weight decay, compare with "
        "log(1/eps), print the table and write DIR/equilibrium.json.",
    )
    e.add_argument("dir", type=pathlib.Path, help="a sweep directory or a run --out directory")
    e.set_defaults(func=_equilibrium)
    s = sub.add_parser(
        "slingshot",
        help="the slingshot spikes of each run in a directory",
        description="Print every loss spike after memorization (rule: grokbench.slingshot): "
        "its step, peak loss, height, and the margins and past-cliff fraction just before.",
    )
    s.add_argument("dir", type=pathlib.Path, help="a sweep directory or a run --out directory")
    s.set_defaults(func=_slingshot)
    q = sub.add_parser(
        "quant",
        help="quantization lab: clipped softmax and gated attention, outliers, W8A8 PTQ",
        description="Train (cached) every attention variant of the BERT-like encoder and the "
        "OPT-like decoder, measure outliers (max inf-norm, kurtosis, delimiter attention), "
        "simulate W8A8/W6A8/W4A8/W6A6 post-training quantization, and write "
        "OUT/quant_table.json, OUT/quant_table.md and OUT/quant_*.png. Overrides are "
        "grokbench.quant.QuantConfig fields, plus variants=... and families=... lists.",
    )
    q.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    q.add_argument("--quick", action="store_true", help="small models, minutes on a CPU")
    q.add_argument("--out", type=pathlib.Path, required=True, help="output directory")
    q.add_argument(
        "--results",
        type=pathlib.Path,
        default=None,
        help="store root (default: $GROKBENCH_RESULTS or ./results)",
    )
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=_quant)
    f = sub.add_parser(
        "figures",
        help="regenerate the papers' figures and tables, and the reproduction report",
        description="Build the named figures (default: all) into OUT, training only the runs "
        "the store lacks (through the cached `grokbench run` path), then write "
        "OUT/reproduction.md. --quick (default): every figure at reduced scale, minutes on a "
        "CPU. --full: the papers' scale (hours on a 2-core CPU, minutes on a GPU).",
    )
    f.add_argument("names", nargs="*", metavar="NAME", help="fig1 fig1a fig1b fig2 ... quant")
    scale = f.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="reduced scale (the default)")
    scale.add_argument("--full", action="store_true", help="the papers' scale")
    f.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out/figures"))
    f.add_argument(
        "--results",
        type=pathlib.Path,
        default=None,
        help="store root (default: $GROKBENCH_RESULTS or ./results)",
    )
    f.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="key=value",
        help="override every recipe (repeatable; e.g. --set seeds=1)",
    )
    f.add_argument("--no-progress", action="store_true", help="no progress bars")
    f.set_defaults(func=_figures)
    rs = sub.add_parser("recipes", help="list the recipes")
    rs.set_defaults(func=_recipes)
    p = sub.add_parser("cliffs", help="where standard vs fixed cross-entropy break, per dtype")
    p.add_argument("dtypes", nargs="*", help="bfloat16 float16 float32 float64 (default: all)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=_cliffs)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `grokbench` console script."""
    parser = build_parser()
    # Overrides may follow options (`run fig2-top --quick seeds=3`): argparse's nargs="*"
    # positional stops at the first option, so the rest comes back as unknown and is re-added.
    args, extra = parser.parse_known_args(argv)
    flags = [token for token in extra if token.startswith("-")]
    if flags or (extra and args.command not in ("run", "sweep", "quant")):
        parser.error(f"unrecognized arguments: {' '.join(flags or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
