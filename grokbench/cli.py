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


def _recipes(args: argparse.Namespace) -> int:
    from grokbench import recipes

    for recipe in recipes.RECIPES.values():
        runs = len(recipes.expand(recipe))
        quick = len(recipes.expand(recipe, quick=True))
        print(f"{recipe.name:<12} {runs:3d} runs ({quick} with --quick): {recipe.description}")
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
    if flags or (extra and args.command != "run"):
        parser.error(f"unrecognized arguments: {' '.join(flags or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
