"""Train the lab's experiments, sweep and analyze them, and rebuild the two papers' figures.

Every command trains through one cached store of runs: a run trained once is loaded, not
retrained, and an interrupted command resumes where it stopped when run again.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import errno
import inspect
import json
import os
import pathlib
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence


class _Fail(Exception):
    """A one-line error: `main` prints `grokbench COMMAND: error: MESSAGE`, exits `status`."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def _use_all_cores() -> None:
    """Split the CPU into one JAX host device per core, unless XLA_FLAGS already chooses.

    Must run before jax is imported. The engine shards a batch of runs over the devices, so
    each core trains its share of the seeds (grokbench.engine.shard_runs).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" in sys.modules or "xla_force_host_platform_device_count" in flags:
        return
    count = f"--xla_force_host_platform_device_count={os.cpu_count() or 1}"
    os.environ["XLA_FLAGS"] = f"{flags} {count}".strip()


def _writable_dir(path: pathlib.Path, option: str) -> None:
    """Fail unless `path` is a directory this process can write, or one it can create.

    Probes with a real (anonymous) file, since permission bits say nothing for root, a
    read-only mount or /proc. Creates nothing: a missing directory is checked at the
    nearest ancestor that exists.
    """
    if path.exists() and not path.is_dir():
        raise _Fail(f"{option} {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise _Fail(f"{option} {path}: cannot be created, {probe} is a file")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        where = "not writable" if probe == path else f"cannot be created in {probe}"
        raise _Fail(f"{option} {path}: {where} ({err.strerror})") from None


def _store_root(args: argparse.Namespace) -> pathlib.Path | None:
    """The results store a command writes runs into (None: it writes none)."""
    if args.command == "sweep":
        return args.out
    if "results" not in args:
        return None
    from grokbench.store import default_root

    return default_root() if args.results is None else args.results


def _finished_since(args: argparse.Namespace, start: float) -> str:
    """'N runs finished and stored in ROOT' for the runs this command stored since `start`."""
    from grokbench.console import plural

    root = _store_root(args)
    if root is None:
        return "nothing was stored"
    done = sum(p.stat().st_mtime >= start for p in root.glob("**/summary.json"))
    return f"{plural(done, 'run')} finished and stored in {root}"


def _hint(name: str, choices: Sequence[str]) -> str:
    """'did you mean ...?': the choices NAME begins, else difflib's nearest; else all of them."""
    near = [c for c in choices if c.startswith(name)]
    near = near or difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    return f"did you mean {' or '.join(near)}?" if near else f"known: {', '.join(choices)}"


def _figure_names() -> list[str]:
    from figures import build

    return [*build.FIGURES, *build.ALIASES]


def _check_recipe(name: str) -> None:
    """Fail, with suggestions, unless `name` is a recipe."""
    from grokbench import recipes

    if name in recipes.RECIPES:
        return
    message = f"unknown recipe {name!r}; {_hint(name, list(recipes.RECIPES))}"
    if name in _figure_names():
        message += f" ({name} is a figure: grokbench figures {name})"
    raise _Fail(message)


def _check_figures(names: Sequence[str]) -> None:
    """Fail, with suggestions, unless every name is a figure; a recipe name gets its figure."""
    from grokbench import recipes

    known = _figure_names()
    for name in names:
        if name in known:
            continue
        if name in recipes.RECIPES:
            figure = name.split("-")[0]
            which = f"its figure is {figure}" if figure in known else f"figures: {', '.join(known)}"
            raise _Fail(f"{name} is a recipe (grokbench run {name}); {which}")
        raise _Fail(f"unknown figure(s) {name}; {_hint(name, known)}")


def _configs(args: argparse.Namespace) -> list:
    """The runs of `run`/`sweep` RECIPE key=value...; _Fail on any bad input."""
    from grokbench import sweep
    from grokbench.config import ConfigError

    _check_recipe(args.recipe)
    if args.chunk < 1:
        raise _Fail("--chunk must be >= 1")
    try:
        return sweep.expand_grid(args.recipe, args.overrides, quick=args.quick)
    except ConfigError as err:
        raise _Fail(str(err)) from None


def _print_runs(args: argparse.Namespace, summaries: Sequence[dict]) -> None:
    """The results table, the cache marker's footnote, and what --quick cannot show."""
    from grokbench import experiment, recipes
    from grokbench.console import plural

    print(experiment.format_table(summaries))
    if any(s.get("cached") for s in summaries):
        print("* loaded from the store, not trained now: sec is how long it took to train")
    # The summaries' 99% test accuracy is grokbench.slingshot's grok_step threshold.
    short = [s for s in summaries if (s["test_accuracy"] or 0.0) < 0.99]
    if args.quick and short:
        full = recipes.expand(recipes.get_recipe(args.recipe))
        steps = summaries[0]["config"]["steps"]
        print(
            f"note: {len(short)} of {plural(len(summaries), 'run')} ended below 99% test "
            f"accuracy: --quick ({steps:,} steps) is too short to grok. The full recipe, "
            f"`grokbench run {args.recipe}` ({plural(len(full), 'run')} of "
            f"{full[0].steps:,} steps), is what `grokbench recipes` describes."
        )


def _run(args: argparse.Namespace) -> int:
    from grokbench import experiment
    from grokbench.store import Store

    configs = _configs(args)
    _writable_dir(_store_root(args), "--results")
    if args.out is not None:
        _writable_dir(args.out, "--out")
    summaries = experiment.run_configs(
        configs, Store(args.results), progress=not args.no_progress, chunk_steps=args.chunk
    )
    _print_runs(args, summaries)
    if args.out is not None:
        print(f"wrote {experiment.write_out(args.out, summaries)}")
    return 0


def _unreachable(address: str, err: Exception) -> str:
    return (
        f"cannot reach the Ray cluster at {address} ({err}): `ray start --head` prints the "
        "address to use (on the head node, --ray-address auto finds it)"
    )


def _reachable(address: str) -> None:
    """Fail at once if nothing listens at a HOST:PORT Ray address (Ray would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # 'auto' and the like: Ray resolves them
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise _Fail(_unreachable(address, err.strerror or err)) from None


def _sweep(args: argparse.Namespace) -> int:
    from grokbench import executors, sweep

    configs = _configs(args)
    if args.batch is not None and args.batch < 1:
        raise _Fail("--batch must be >= 1")
    if args.executor != "ray" and args.ray_address is not None:
        raise _Fail("--ray-address needs --executor ray")
    executor = None
    if args.executor == "ray":
        if not executors.ray_available():
            raise _Fail("--executor ray needs Ray: pip install -e '.[ray]' in your clone")
        if args.ray_address is not None:
            _reachable(args.ray_address)
        executor = executors.RayExecutor(args.ray_address)
    _writable_dir(args.out, "--out")
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
        raise _Fail(str(err), status=1) from None
    except ConnectionError as err:
        if executor is None:
            raise
        if args.ray_address is None:
            raise _Fail(f"could not start a local Ray instance ({err})") from None
        raise _Fail(_unreachable(args.ray_address, err)) from None
    _print_runs(args, summaries)
    print(f"wrote {args.out / 'summary.json'} and {args.out / sweep.TABLE_FILE}")
    return 0


def _equilibrium(args: argparse.Namespace) -> int:
    from grokbench import equilibrium

    if args.out is not None:
        _writable_dir(args.out, "--out")
    try:
        rows, _ = equilibrium.analyze_dir(args.dir, out=args.out)
    except (ValueError, FileNotFoundError) as err:
        raise _Fail(str(err)) from None
    print(equilibrium.format_table(rows))
    if args.out is not None:
        print(f"wrote {args.out / equilibrium.OUTPUT_FILE}")
    return 0


def _slingshot(args: argparse.Namespace) -> int:
    from grokbench import slingshot, sweep
    from grokbench.store import load_metrics

    try:
        runs = sweep.dir_runs(args.dir)
    except (ValueError, FileNotFoundError) as err:
        raise _Fail(str(err)) from None
    print(slingshot.format_spikes([(s, load_metrics(d)) for s, d in runs]))
    return 0


def _progress(args: argparse.Namespace) -> int:
    from grokbench import progress

    try:
        rows = progress.analyze_dir(args.dir)
    except (ValueError, FileNotFoundError) as err:
        raise _Fail(str(err)) from None
    print(progress.format_table(rows))
    return 0


def _recipes(args: argparse.Namespace) -> int:
    from grokbench import recipes

    for recipe in recipes.RECIPES.values():
        runs = len(recipes.expand(recipe))
        quick = len(recipes.expand(recipe, quick=True))
        print(f"{recipe.name:<12} {runs:3d} runs ({quick} with --quick): {recipe.description}")
    return 0


def _field_meanings(cls: type) -> dict[str, str]:
    """Each dataclass field's trailing `# comment` in `cls`'s source: its documented meaning."""
    meanings = {}
    for line in inspect.getsource(cls).splitlines():
        match = re.match(r"\s+(\w+): [^#]+?=[^#]+#\s*(.+)$", line)
        if match:
            meanings[match[1]] = match[2]
    return meanings


def _keys(args: argparse.Namespace) -> int:
    from grokbench.config import RunConfig, field_types

    meanings, types = _field_meanings(RunConfig), field_types()
    rows = [
        (f.name, getattr(tp, "__name__", str(tp)), repr(f.default), meanings.get(f.name, ""))
        for f in dataclasses.fields(RunConfig)
        for tp in (types[f.name],)
    ]
    rows.append(("seeds", "int", "(recipe's)", "N runs, seeds seed .. seed + N - 1, batched"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print("Override keys of `grokbench run` and `sweep` (key=value; key=v1,v2 sweeps a key):")
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[3])
    return 0


def _quant(args: argparse.Namespace) -> int:
    from grokbench import quant
    from grokbench.config import ConfigError

    try:
        overrides = quant.parse_quant_overrides(args.overrides)
        if args.tap_costs:
            quant.parse_bit_list(args.tap_costs)  # a bad width fails before any training
    except ConfigError as err:
        raise _Fail(str(err)) from None
    _writable_dir(args.out, "--out")
    _writable_dir(_store_root(args), "--results")
    try:
        table = quant.run_quant(
            args.quick, args.out, overrides, results=args.results, progress=not args.no_progress
        )
        costs = None
        if args.tap_costs:
            costs = quant.run_tap_costs(
                args.quick, args.out, overrides, args.results, args.tap_costs, not args.no_progress
            )
    except ConfigError as err:
        raise _Fail(str(err)) from None
    from figures.quant import draw_quant_figures

    paths = draw_quant_figures(table, args.out)
    print(quant.format_markdown(table))
    print(f"wrote {args.out / 'quant_table.json'}, {args.out / 'quant_table.md'}, ", end="")
    print(", ".join(p.name for p in paths))
    if costs is not None:
        print(quant.format_tap_costs(costs))
        print(f"wrote {args.out / 'quant_tap_costs.json'}, {args.out / 'quant_tap_costs.md'}")
    return 0


def _figures(args: argparse.Namespace) -> int:
    from figures import build
    from grokbench.config import ConfigError, parse_overrides
    from grokbench.store import Store

    _check_figures(args.names)
    try:
        names = build.resolve(args.names)
        overrides = parse_overrides(args.overrides)
    except (ValueError, ConfigError) as err:
        raise _Fail(str(err)) from None
    _writable_dir(args.out, "--out")
    _writable_dir(_store_root(args), "--results")
    with _compilation_cache():
        build.build(
            names,
            quick=not args.full,
            out=args.out,
            store=Store(args.results),
            progress=not args.no_progress,
            overrides=overrides,
        )
    return 0


@contextlib.contextmanager
def _compilation_cache() -> Iterator[None]:
    """A persistent compilation cache for one build, unless JAX_COMPILATION_CACHE_DIR names one.

    Recipes whose programs differ in data only (fig2-bottom and its a^3+b twin, fig6-sq and
    fig6-cube, the setup study's split and init settings) then compile them once. A loaded
    program is the compiled one, bit for bit.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    if jax.config.jax_compilation_cache_dir:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="grokbench-jax-cache-") as path:
        compilation_cache.reset_cache()  # forget a "no cache" decided by an earlier compile
        compilation_cache.set_cache_dir(path)
        try:
            yield
        finally:
            compilation_cache.set_cache_dir(None)
            compilation_cache.reset_cache()


def _dtype_names(names: Sequence[str], default: Sequence[str] | None = None) -> list[str]:
    """`precision.dtype_names` (float8 too); _Fail on a name it does not know."""
    from grokbench import precision

    try:
        return precision.dtype_names(names, *([] if default is None else [default]))
    except ValueError as err:
        raise _Fail(str(err)) from None


def _cliffs(args: argparse.Namespace) -> int:
    from grokbench import cliffs

    rows = [cliffs.measure(name) for name in _dtype_names(args.dtypes, cliffs.DEFAULT_DTYPES)]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    else:
        print("Cross-entropy on logits [m, 0] with target 0, for every representable m > 0:")
        print(cliffs.format_table(rows))
        print("\nstd: numerics.standard (as optax); fixed: numerics.cross_entropy. The fixed")
        print("target gradient reaches 0 only where exp(-m) itself underflows.")
    return 0


def _audit(args: argparse.Namespace) -> int:
    from grokbench import audit
    from numerics.testing import SignatureError

    names = _dtype_names([n.strip() for n in args.dtypes.split(",") if n.strip()])
    if args.max_ulps is not None and not args.max_ulps > 0:
        raise _Fail(f"--max-ulps must be > 0; got {args.max_ulps}")
    if args.json is not None:
        _writable_dir(args.json.parent, "--json")
    try:
        fn = audit.load(args.function)
    except ValueError as err:
        raise _Fail(str(err)) from None
    kind = args.kind or audit.infer_kind(args.function)
    print(f"grokbench audit {args.function} as {kind} ({_KIND_CALLS[kind]}), bounds: ", end="")
    print("numerics.testing.ULPS" if args.max_ulps is None else f"{args.max_ulps:g} ulps")
    rows = []
    for name in names:
        try:
            rows.append(audit.audit(fn, kind, name, max_ulps=args.max_ulps, quick=args.quick))
        except SignatureError as err:
            from grokbench.runtime import FLOAT16_UNSUPPORTED, is_float16_link_error

            if is_float16_link_error(err):
                raise _Fail(f"{FLOAT16_UNSUPPORTED} (--dtypes {name})") from None
            raise _Fail(f"{err} (is --kind {kind} right?)") from None
        print(f"\n{audit.format_dtype(rows[-1])}", flush=True)
    failures = [line for row in rows for line in row.result.failures]
    if args.json is not None:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=2) + "\n")
        print(f"\nwrote {args.json}")
    print()
    for line in failures:
        print(f"FAIL {line}")
    print(f"{'FAIL' if failures else 'PASS'}: {args.function} as {kind} in {', '.join(names)}")
    return 1 if failures else 0


_KIND_CALLS = {
    "ce": "fn(logits, labels) -> per-row losses",
    "softmax": "fn(x) -> probabilities",
    "log_softmax": "fn(x) -> log-probabilities",
    "soft-target": "fn(student_logits, teacher_logits) -> per-row losses",
    "z-loss": "fn(logits, labels) -> per-row losses + 1e-4 logsumexp^2",
    "soft-cap": "fn(logits, labels) -> per-row losses of 30 tanh(logits / 30)",
    "label-smoothing": "fn(logits, labels) -> per-row losses, label smoothing 0.1",
    "linear-ce": "fn(hidden, weight, labels) -> per-row losses of hidden @ weight",
    "kl": "fn(student_logits, teacher_logits) -> per-row KL(p_teacher || q_student)",
    "reverse-kl": "fn(student_logits, teacher_logits) -> per-row KL(q_student || p_teacher)",
    "js": "fn(student_logits, teacher_logits) -> per-row Jensen-Shannon divergences",
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2, and help has room
    for the longest command name."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Formatter(argparse.HelpFormatter):
    """Help text that starts in one column, past the longest command name."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=28)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        # argparse measures the command names without the 2 extra spaces it indents them by.
        for sub in getattr(action, "_get_subactions", list)():
            width = len(self._format_action_invocation(sub)) + self._current_indent + 2
            self._action_max_length = max(self._action_max_length, width)


_RESULTS_HELP = "results store (default: $GROKBENCH_RESULTS, else ./results)"


def _shared() -> dict[str, argparse.ArgumentParser]:
    """Options several commands take, as argparse parent parsers (one option each)."""

    def parent(*names: str, **kwargs: object) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(add_help=False)
        p.add_argument(*names, **kwargs)
        return p

    return {
        "recipe": parent("recipe", help="a recipe name (`grokbench recipes` lists them)"),
        "overrides": parent(
            "overrides",
            nargs="*",
            metavar="key=value",
            help="config overrides; key=v1,v2 sweeps a key (`grokbench keys` lists the keys)",
        ),
        "quick": parent("--quick", action="store_true", help="the recipe's minutes-on-a-CPU size"),
        "results": parent("--results", type=pathlib.Path, default=None, help=_RESULTS_HELP),
        "progress": parent("--no-progress", action="store_true", help="no progress bars"),
        "chunk": parent(
            "--chunk",
            type=int,
            default=1000,
            help="steps per compiled call; speed only (default: %(default)s)",
        ),
        "dir": parent(
            "dir", type=pathlib.Path, help="a sweep directory, a run --out directory or a store"
        ),
    }


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    from grokbench.executors import EXECUTORS

    parser = _Parser(prog="grokbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", title="commands", parser_class=_Parser
    )
    shared = _shared()

    def command(name, func, help, description, parents=(), rest=None):
        """A subcommand; `rest`: the list positional that words after its options extend."""
        p = sub.add_parser(
            name, help=help, description=description, parents=[shared[k] for k in parents]
        )
        p.set_defaults(func=func, rest=rest)
        return p

    r = command(
        "run",
        _run,
        "train a recipe, cached per run config",
        "Train RECIPE with typed key=value overrides (key=v1,v2 sweeps a key; seeds=N runs N "
        "seeds, batched). Finished runs are loaded from the store, not retrained.",
        ("recipe", "overrides", "quick", "results", "progress", "chunk"),
        rest="overrides",
    )
    r.add_argument("--out", type=pathlib.Path, help="also write OUT/summary.json ({'runs': [...]})")
    w = command(
        "sweep",
        _sweep,
        "train a grid of a recipe into one resumable directory",
        "Train the cartesian product of RECIPE's grid and the key=v1,v2 overrides into OUT "
        "(OUT/runs/HASH per run, OUT/summary.json, OUT/sweep.csv). Runs that share shapes are "
        "trained as one vmapped program, the rest one after another. Safe to kill and rerun: "
        "finished runs are kept, unfinished ones redone. One sweep per OUT at once.",
        ("recipe", "overrides", "quick", "progress", "chunk"),
        rest="overrides",
    )
    w.add_argument("--out", type=pathlib.Path, required=True, help="the sweep directory")
    w.add_argument(
        "--executor", choices=EXECUTORS, default="local", help="where to train (default: local)"
    )
    w.add_argument(
        "--ray-address", default=None, help="Ray cluster to use (default: start a local one)"
    )
    w.add_argument("--batch", type=int, default=None, help="most runs per program (default: all)")
    e = command(
        "equilibrium",
        _equilibrium,
        "margin plateaus of a sweep's runs against log(1/eps)",
        "Find where each run's mean training margin levels off (the rule is in "
        "grokbench.equilibrium), group runs by eps and weight decay, compare with log(1/eps) "
        "and print the table; --out also writes OUT/equilibrium.json.",
        ("dir",),
    )
    e.add_argument("--out", type=pathlib.Path, help="write OUT/equilibrium.json (default: none)")
    command(
        "slingshot",
        _slingshot,
        "the slingshot spikes of each run in a directory",
        "Print every loss spike after memorization (rule: grokbench.slingshot): its step, peak "
        "loss, height, and the margins and past-cliff fraction just before.",
        ("dir",),
    )
    command(
        "progress",
        _progress,
        "the grokking phases of each run in a directory (Fourier progress measures)",
        "Print each run's memorisation, circuit-formation, cleanup and grok steps (rules: "
        "grokbench.progress), its key frequencies and its final restricted and excluded loss "
        "(Nanda et al.'s progress measures, grokbench.fourier).",
        ("dir",),
    )
    q = command(
        "quant",
        _quant,
        "quantization lab: outliers and W8A8 PTQ of attention variants",
        "Train (cached) the recipe's attention variants of the BERT-like encoder and the OPT-like "
        "decoder, measure outliers (max inf-norm, kurtosis, delimiter attention), simulate "
        "W8A8/W6A8/W4A8/W6A6 post-training quantization, and write OUT/quant_table.json, "
        "OUT/quant_table.md and OUT/quant_*.png. Overrides are grokbench.quant.QuantConfig "
        "fields, plus variants=... and families=... lists; a comma list for a numeric field "
        "sweeps it (alpha=2,4,8).",
        ("overrides", "results", "progress"),
        rest="overrides",
    )
    q.add_argument("--quick", action="store_true", help="small models, minutes on a CPU")
    q.add_argument("--out", type=pathlib.Path, required=True, help="output directory")
    q.add_argument(
        "--tap-costs",
        metavar="BITS",
        default="",
        help="also attribute the PTQ loss at these bit widths (e.g. W8A8,W6A6) to the "
        "quantized tensors: OUT/quant_tap_costs.{json,md}",
    )
    f = command(
        "figures",
        _figures,
        "the papers' figures and tables, and the reproduction report",
        "Build the named figures (default: all) into OUT, training only the runs the store "
        "lacks (through the cached `grokbench run` path), then write OUT/reproduction.md. "
        "--quick (default): every figure at reduced scale, minutes on a CPU. --full: the "
        "papers' scale (hours on a 2-core CPU, minutes on a GPU).",
        ("results", "progress"),
        rest="names",
    )
    f.add_argument("names", nargs="*", metavar="NAME", help="figures to build (default: all)")
    scale = f.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="reduced scale (the default)")
    scale.add_argument("--full", action="store_true", help="the papers' scale")
    f.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path("out/figures"),
        help="where the images and reproduction.md go (default: %(default)s)",
    )
    f.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="key=value",
        help="override every recipe (repeatable; e.g. --set seeds=1)",
    )
    command(
        "recipes",
        _recipes,
        "list the recipes",
        "List every recipe: its name, how many runs it trains (and with --quick), and what "
        "the paper reports for it.",
    )
    command(
        "keys",
        _keys,
        "list the override keys, with defaults and meanings",
        "List every key=value override key of `run` and `sweep` (the fields of "
        "grokbench.config.RunConfig, plus seeds): its type, default and meaning.",
    )
    p = command(
        "cliffs",
        _cliffs,
        "where standard vs fixed cross-entropy break, per dtype",
        "Measure, for each float dtype, the margin from which standard cross-entropy's loss "
        "and gradient are exactly 0 (the precision cliff p ln 2) and how far the fixed one "
        "lasts, against mpmath.",
        rest="dtypes",
    )
    p.add_argument(
        "dtypes", nargs="*", help="bf16 fp16 fp32 fp64 e4m3fn e5m2 or NumPy names (default: all)"
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = command(
        "audit",
        _audit,
        "check anyone's softmax or cross-entropy against mpmath, per dtype",
        "Import MODULE:FUNCTION and check it as numerics.testing does: values and gradients "
        "in ulps against the mpmath oracle on margins around the precision cliff and up to "
        "underflow, K up to 50,000, ties, huge and tiny logits, NaN; where the target "
        "gradient and the loss become 0; gradient sums; student = teacher; and speed against "
        "optax's function of the same kind. Exit 0: within the lab's own bounds "
        "(numerics.testing.ULPS, the table of tests/tolerances.py) or --max-ulps; 1: not, one "
        "FAIL line per failure; 2: bad input.",
    )
    a.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. numerics:cross_entropy")
    a.add_argument(
        "--kind",
        choices=list(_KIND_CALLS),
        default=None,
        help="what FUNCTION computes (default: guessed from its name, else ce)",
    )
    a.add_argument(
        "--dtypes",
        default="bf16,fp16,fp32,fp64",
        metavar="LIST",
        help="comma-separated dtypes, short or NumPy names, e4m3fn and e5m2 too "
        "(default: %(default)s)",
    )
    a.add_argument("--json", type=pathlib.Path, metavar="FILE", help="also write the results")
    a.add_argument(
        "--max-ulps",
        type=float,
        default=None,
        metavar="N",
        help="one bound in ulps for values and gradients, instead of the lab's table",
    )
    a.add_argument(
        "--quick", action="store_true", help="fewer margins, K up to 100: seconds per dtype"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `grokbench` console script."""
    _use_all_cores()  # before build_parser, whose imports load jax
    parser = build_parser()
    # Overrides may follow options (`run fig2-top --quick seeds=3`): argparse's nargs="*"
    # positional stops at the first option, so the rest comes back as unknown and is re-added.
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    flags = [token for token in extra if token.startswith("-")]
    if flags or (extra and args.rest is None):
        parser.error(f"unrecognized arguments: {' '.join(flags or extra)}")
    if extra:
        setattr(args, args.rest, [*getattr(args, args.rest), *extra])
    start = time.time()
    prog = f"grokbench {args.command}"
    try:
        return args.func(args)
    except _Fail as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return err.status
    except KeyboardInterrupt:
        print(
            f"{prog}: interrupted; {_finished_since(args, start)}. Rerunning the same command "
            "resumes: finished runs are loaded, not retrained.",
            file=sys.stderr,
        )
        return 130
    except OSError as err:  # a write that failed mid-run (the paths were checked up front)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            what, fix = "the disk is full", "Free space and rerun"
        elif err.filename is not None:
            what, fix = f"cannot write {err.filename}", "Fix that and rerun"
        else:
            raise
        print(
            f"{prog}: error: {what} ({err.strerror}); {_finished_since(args, start)} intact. "
            f"{fix} the same command to resume.",
            file=sys.stderr,
        )
        return 1
    except Exception as err:  # XLA runtime errors have no stable class across jax versions
        from grokbench.runtime import FLOAT16_UNSUPPORTED, is_float16_link_error

        if not is_float16_link_error(err):
            raise
        print(f"{prog}: error: {FLOAT16_UNSUPPORTED}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
