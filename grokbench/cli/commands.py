"""What each `grokbench` command does: one function per command, calling the module that owns
the work. A function's docstring is the command's help: its first line the one-line help,
the rest the description `grokbench COMMAND --help` prints. `grokbench.cli.app` parses the
arguments and calls these; every input error is a `ConfigError` (one line, exit status 2).
This module is the face's (`grokbench.cli`): the only one that imports `figures`.
"""

from __future__ import annotations

import argparse
import pathlib

# Nothing here imports jax at import time: `grokbench.cli.app` splits the CPU into devices
# first.

__all__ = []  # package-internal: `grokbench.cli.app` dispatches to these functions


def store_root(args: argparse.Namespace) -> pathlib.Path | None:
    """The results store a command writes runs into (None: it writes none)."""
    from grokbench.store import default_root

    if args.command == "sweep":
        return args.out
    if "results" not in args:
        return None
    return default_root() if args.results is None else args.results


def _writable(args: argparse.Namespace, *options: str) -> None:
    """Each named option's directory (`results`: the store; `json`: its file's) can be
    written, before any work."""
    from grokbench.store import check_writable_dir

    for option in options:
        path = store_root(args) if option == "results" else getattr(args, option)
        if path is not None:
            check_writable_dir(path.parent if option == "json" else path, f"--{option}")


def _configs(args: argparse.Namespace) -> tuple:
    """The lab of `run`/`sweep` RECIPE (`grokbench.labs`) and its runs with the key=value
    overrides."""
    from grokbench import labs
    from grokbench.config import ConfigError

    if args.recipe not in labs.recipe_names():
        from figures import build

        labs.lab_for(args.recipe, build.names())
    lab = labs.lab_for(args.recipe)
    for option in ("chunk", "batch"):
        if getattr(args, option, None) is not None and getattr(args, option) < 1:
            raise ConfigError(f"--{option} must be >= 1")
    return lab, lab.configs(args.recipe, quick=args.quick, overrides=args.overrides)


def _draw_quant(table: dict, out: pathlib.Path) -> list[pathlib.Path]:
    from figures.quant import draw_quant_figures

    return draw_quant_figures(table, out)


_DRAW = {"quant": _draw_quant}
"""The figures a lab's runs draw into OUT beside its files (the face's: only it imports
`figures`)."""


def _wrote(lab, runs: object, out: pathlib.Path, files: list[pathlib.Path]) -> str:
    """Draw the lab's figures into OUT; the 'wrote ...' line naming `files` and them."""
    images = _DRAW[lab.name](runs, out) if lab.name in _DRAW else []
    if not images:
        return f"wrote {' and '.join(str(f) for f in files)}"
    return "wrote " + ", ".join([*(str(f) for f in files), *(p.name for p in images)])


def run(args: argparse.Namespace) -> int:
    """train a recipe, cached per run config

    Train RECIPE with typed key=value overrides (key=v1,v2 sweeps a key; seeds=N runs N
    seeds, batched). Finished runs are loaded from the store, not retrained. A quant-lab
    recipe prints, and with --out writes, what `grokbench quant` does.
    """
    from grokbench.store import Store

    lab, configs = _configs(args)
    _writable(args, "results", "out")
    runs = lab.train(
        configs,
        Store(args.results),
        quick=args.quick,
        progress=not args.no_progress,
        chunk_steps=args.chunk,
    )
    print(lab.summarise(runs, args.recipe, args.quick))
    if args.out is not None:
        print(_wrote(lab, runs, args.out, lab.write(args.out, runs)))
    return 0


def sweep(args: argparse.Namespace) -> int:
    """train a grid of a recipe into one resumable directory

    Train the cartesian product of RECIPE's grid and the key=v1,v2 overrides into OUT
    (OUT/runs/HASH per run, OUT/summary.json, OUT/sweep.csv). Runs that share shapes are
    trained as one vmapped program, the rest one after another. Safe to kill and rerun:
    finished runs are kept, unfinished ones redone. One sweep per OUT at once. A quant-lab
    recipe stores its runs under OUT/quant/ and writes `grokbench quant`'s table and figures.
    """
    from grokbench import executors

    lab, configs = _configs(args)
    executor = executors.from_options(args.executor, args.ray_address)
    _writable(args, "out")
    with executors.ray_errors(executor):
        runs = lab.sweep(
            configs,
            args.out,
            quick=args.quick,
            executor=executor,
            max_batch=args.batch,
            chunk_steps=args.chunk,
            progress=not args.no_progress,
        )
    print(lab.summarise(runs, args.recipe, args.quick))
    print(_wrote(lab, runs, args.out, [args.out / name for name in lab.sweep_files]))
    return 0


def equilibrium(args: argparse.Namespace) -> int:
    """margin plateaus of a sweep's runs against log(1/eps)

    Find where each run's mean training margin levels off (the rule is in
    grokbench.equilibrium), group runs by eps and weight decay, compare with log(1/eps)
    and print the table; --out also writes OUT/equilibrium.json.
    """
    from grokbench import equilibrium as lib

    _writable(args, "out")
    rows, _ = lib.analyze_dir(args.dir, out=args.out)
    print(lib.format_table(rows))
    if args.out is not None:
        print(f"wrote {args.out / lib.OUTPUT_FILE}")
    return 0


def slingshot(args: argparse.Namespace) -> int:
    """the slingshot spikes of each run in a directory

    Print every loss spike after memorization (rule: grokbench.slingshot): its step, peak
    loss, height, and the margins and past-cliff fraction just before.
    """
    from grokbench import slingshot as lib
    from grokbench import sweep as sweeps
    from grokbench.store import load_metrics

    runs = sweeps.dir_runs(args.dir)
    print(lib.format_spikes([(s, load_metrics(d)) for s, d in runs]))
    return 0


def progress(args: argparse.Namespace) -> int:
    """the grokking phases of each run in a directory (Fourier progress measures)

    Print each run's memorisation, circuit-formation, cleanup and grok steps (rules:
    grokbench.progress), its key frequencies and its final restricted and excluded loss
    (Nanda et al.'s progress measures, grokbench.fourier).
    """
    from grokbench import progress as lib

    print(lib.format_table(lib.analyze_dir(args.dir)))
    return 0


def quant(args: argparse.Namespace) -> int:
    """quantization lab: outliers and W8A8 PTQ of attention variants

    Train (cached) the recipe's attention variants of the BERT-like encoder and the OPT-like
    decoder, measure outliers (max inf-norm, kurtosis, delimiter attention), simulate
    W8A8/W6A8/W4A8/W6A6 post-training quantization, and write OUT/quant_table.json,
    OUT/quant_table.md and OUT/quant_*.png. Overrides are grokbench.quant.QuantConfig
    fields, plus variants=... and families=... lists; a comma list for a numeric field
    sweeps it (alpha=2,4,8). --recipe picks one of the lab's recipes (`grokbench recipes`):
    the paper's ablations are recipes of their own. The same as `grokbench run RECIPE
    --out OUT` on a quant-lab recipe, plus --tap-costs.
    """
    from grokbench import labs
    from grokbench import quant as lib
    from grokbench.store import Store

    lab = labs.QUANT
    if args.recipe not in lab.recipes:
        from grokbench.config import ConfigError, did_you_mean

        hint = did_you_mean(args.recipe, list(lab.recipes))
        raise ConfigError(f"unknown quant recipe {args.recipe!r}; {hint}")
    configs = lab.configs(args.recipe, quick=args.quick, overrides=args.overrides)
    if args.tap_costs:
        lib.parse_bit_list(args.tap_costs)  # a bad width fails before any training
    _writable(args, "out", "results")
    progress = not args.no_progress
    table = lab.train(configs, Store(args.results), quick=args.quick, progress=progress)
    files = lab.write(args.out, table)
    costs = None
    if args.tap_costs:
        costs = lib.run_tap_costs(
            quick=args.quick,
            out=args.out,
            overrides=args.overrides,
            results=args.results,
            bits=args.tap_costs,
            progress=progress,
            recipe=lab.recipes[args.recipe],
        )
    print(lab.summarise(table, args.recipe, args.quick))
    print(_wrote(lab, table, args.out, files))
    if costs is not None:
        print(lib.format_tap_costs(costs))
        print(f"wrote {args.out / 'quant_tap_costs.json'}, {args.out / 'quant_tap_costs.md'}")
    return 0


def figures(args: argparse.Namespace) -> int:
    """the papers' figures and tables, and the reproduction report

    Build the named figures (default: all) into OUT, training only the runs the store
    lacks (through the cached `grokbench run` path), then write OUT/reproduction.md.
    --quick (default): every figure at reduced scale, minutes on a CPU. --full: the
    papers' scale (hours on a 2-core CPU, minutes on a GPU).
    """
    from figures import build
    from grokbench.config import ConfigError, parse_overrides
    from grokbench.store import Store

    build.check_names(args.names)
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1; got {args.jobs}")
    jobs = build.default_jobs() if args.jobs is None else args.jobs
    names, overrides = build.resolve(args.names), parse_overrides(args.overrides)
    _writable(args, "out", "results")
    build.build(
        names,
        quick=not args.full,
        out=args.out,
        store=Store(args.results),
        progress=not args.no_progress,
        overrides=overrides,
        jobs=jobs,
    )
    return 0


def recipes(args: argparse.Namespace) -> int:
    """list the recipes

    List every recipe of both labs: its name, how many runs it trains (and with --quick),
    and what the paper reports for it.
    """
    from grokbench import recipes as lib
    from grokbench.quant.recipes import QUANT_RECIPES

    print(lib.format_list(lib.RECIPES))
    print("\nThe quantization lab (grokbench run NAME; grokbench quant --recipe NAME --out DIR):")
    print(lib.format_list(QUANT_RECIPES))
    return 0


def keys(args: argparse.Namespace) -> int:
    """list the override keys, with defaults and meanings

    List every key=value override key of `run` and `sweep` (the fields of
    grokbench.config.RunConfig, plus seeds) and of `quant` (grokbench.quant.QuantConfig,
    plus variants and families): its type, default and meaning.
    """
    from grokbench import config
    from grokbench.quant import QuantConfig

    seeds = ("seeds", "int", "(recipe's)", "N runs, seeds seed .. seed + N - 1, batched")
    print("Override keys of `grokbench run` and `sweep` (key=value; key=v1,v2 sweeps a key):")
    print(config.format_keys([*config.describe(config.RunConfig), seeds]))
    lists = [
        ("variants", "str", "(per family)", "comma list of the variants to train"),
        ("families", "str", "encoder,decoder", "comma list of the model families to train"),
    ]
    print(
        "\nOverride keys of `grokbench quant`, and of `run` and `sweep` on its recipes "
        "(key=value; a comma list sweeps a number):"
    )
    fields = [r for r in config.describe(QuantConfig) if r[0] not in ("family", "variant")]
    print(config.format_keys([*fields, *lists]))
    return 0


def cliffs(args: argparse.Namespace) -> int:
    """where standard vs fixed cross-entropy break, per dtype

    Measure, for each float dtype, the margin from which standard cross-entropy's loss
    and gradient are exactly 0 (the precision cliff p ln 2) and how far the fixed one
    lasts, against mpmath.
    """
    from grokbench import cliffs as lib
    from grokbench import precision

    print(lib.report(precision.dtype_names(args.dtypes, lib.DEFAULT_DTYPES), as_json=args.json))
    return 0


def audit(args: argparse.Namespace) -> int:
    """check anyone's softmax or cross-entropy against mpmath, per dtype

    Import MODULE:FUNCTION and check it as numerics.testing does: values and gradients
    in ulps against the mpmath oracle on margins around the precision cliff and up to
    underflow, K up to 50,000, ties, huge and tiny logits, NaN; where the target
    gradient and the loss become 0; gradient sums; student = teacher; and speed against
    optax's function of the same kind. Exit 0: within the lab's own bounds
    (numerics.testing.ULPS, the table of tests/tolerances.py) or --max-ulps; 1: not, one
    FAIL line per failure; 2: bad input.
    """
    from grokbench import audit as lib
    from grokbench import precision

    names = precision.dtype_names([n.strip() for n in args.dtypes.split(",") if n.strip()])
    _writable(args, "json")
    return lib.run(
        args.function,
        args.kind,
        names,
        max_ulps=args.max_ulps,
        quick=args.quick,
        json_path=args.json,
    )
