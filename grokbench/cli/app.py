"""Train the lab's experiments, sweep and analyze them, and rebuild the two papers' figures.

Every command trains through one cached store of runs: a run trained once is loaded, not
retrained, and an interrupted command resumes where it stopped when run again.

This module parses the arguments and dispatches to `grokbench.cli.commands`; `main` is the
`grokbench` console script (`grokbench.cli:main`, re-exported by the package).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import importlib
import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path

from grokbench import runtime
from grokbench.cli import commands

__all__ = ["main"]


@dataclasses.dataclass(frozen=True)
class _Command:
    """One subcommand of `grokbench`."""

    run: Callable[[argparse.Namespace], int]  # what it calls: its docstring is the help
    shared: tuple[str, ...] = ()  # the options of `_SHARED` it takes
    arguments: tuple[tuple[tuple[str, ...], dict], ...] = ()  # its own (`_arg`)
    rest: str | None = None  # the list positional that words after its options extend
    input_errors: tuple[type[Exception], ...] = ()  # besides ConfigError: one line, exit 2
    exclusive: tuple[str, ...] = ()  # options of which at most one may be given


def _arg(*names: str, **options: object) -> tuple[tuple[str, ...], dict]:
    """One `add_argument` call: its names and options."""
    return names, options


def _reads_dir(run: Callable[[argparse.Namespace], int], *arguments) -> _Command:
    """A command that analyzes the runs of a directory."""
    where = _arg("dir", type=Path, help="a sweep directory, a run --out directory or a store")
    return _Command(run, (), (where, *arguments), input_errors=(ValueError, FileNotFoundError))


def _late(module: str, name: str) -> Callable[[], list[str]]:
    """Choices read when the parser is built: their modules import jax (`main`)."""
    return lambda: list(getattr(importlib.import_module(module), name))


_DTYPES = "bf16 fp16 fp32 fp64 e4m3fn e5m2"
_COMMANDS: dict[str, _Command] = {
    "run": _Command(
        commands.run,
        ("recipe", "overrides", "quick", "results", "progress", "chunk"),
        (_arg("--out", type=Path, help="also write OUT/summary.json ({'runs': [...]})"),),
        rest="overrides",
    ),
    "sweep": _Command(
        commands.sweep,
        ("recipe", "overrides", "quick", "progress", "chunk"),
        (
            _arg("--out", type=Path, required=True, help="the sweep directory"),
            _arg(
                "--executor",
                choices=_late("grokbench.executors", "EXECUTORS"),
                default="local",
                help="where to train (default: local)",
            ),
            _arg(
                "--ray-address",
                default=None,
                help="Ray cluster to use (default: start a local one)",
            ),
            _arg("--batch", type=int, default=None, help="most runs per program (default: all)"),
        ),
        rest="overrides",
    ),
    "equilibrium": _reads_dir(
        commands.equilibrium,
        _arg("--out", type=Path, help="write OUT/equilibrium.json (default: none)"),
    ),
    "slingshot": _reads_dir(commands.slingshot),
    "progress": _reads_dir(commands.progress),
    "quant": _Command(
        commands.quant,
        ("overrides", "results", "progress"),
        (
            _arg("--quick", action="store_true", help="small models, minutes on a CPU"),
            _arg("--out", type=Path, required=True, help="output directory"),
            _arg("--recipe", default="quant", help="a quant-lab recipe (default: %(default)s)"),
            _arg(
                "--tap-costs",
                metavar="BITS",
                default="",
                help="also attribute the PTQ loss at these bit widths (e.g. W8A8,W6A6) to the "
                "quantized tensors: OUT/quant_tap_costs.{json,md}",
            ),
        ),
        rest="overrides",
    ),
    "figures": _Command(
        commands.figures,
        ("results", "progress"),
        (
            _arg("names", nargs="*", metavar="NAME", help="figures to build (default: all)"),
            _arg("--quick", action="store_true", help="reduced scale (the default)"),
            _arg("--full", action="store_true", help="the papers' scale"),
            _arg(
                "--out",
                type=Path,
                default=Path("out/figures"),
                help="where the images and reproduction.md go (default: %(default)s)",
            ),
            _arg(
                "--set",
                dest="overrides",
                action="append",
                default=[],
                metavar="key=value",
                help="override every recipe (repeatable; e.g. --set seeds=1)",
            ),
            _arg(
                "--jobs",
                type=int,
                default=None,
                metavar="N",
                help="train the figures' runs in up to N processes side by side (default: 2 "
                "where JAX runs on a CPU of 2 or more cores, else 1)",
            ),
        ),
        rest="names",
        input_errors=(ValueError,),
        exclusive=("--quick", "--full"),
    ),
    "recipes": _Command(commands.recipes),
    "keys": _Command(commands.keys),
    "cliffs": _Command(
        commands.cliffs,
        arguments=(
            _arg("dtypes", nargs="*", help=f"{_DTYPES} or NumPy names (default: all)"),
            _arg("--json", action="store_true", help="print the rows as JSON"),
        ),
        rest="dtypes",
    ),
    "audit": _Command(
        commands.audit,
        arguments=(
            _arg("function", metavar="MODULE:FUNCTION", help="e.g. numerics:cross_entropy"),
            _arg(
                "--kind",
                choices=_late("grokbench.audit", "KIND_CALLS"),
                default=None,
                help="what FUNCTION computes (default: guessed from its name, else ce)",
            ),
            _arg(
                "--dtypes",
                default="bf16,fp16,fp32,fp64",
                metavar="LIST",
                help="comma-separated dtypes, short or NumPy names, e4m3fn and e5m2 too "
                "(default: %(default)s)",
            ),
            _arg("--json", type=Path, metavar="FILE", help="also write the results"),
            _arg(
                "--max-ulps",
                type=float,
                default=None,
                metavar="N",
                help="one bound in ulps for values and gradients, instead of the lab's table",
            ),
            _arg(
                "--quick", action="store_true", help="fewer margins, K up to 100: seconds per dtype"
            ),
        ),
        input_errors=(ValueError,),
    ),
}
"""Every subcommand, in the order `grokbench --help` lists them."""

_SHARED: dict[str, tuple[tuple[str, ...], dict]] = {
    "recipe": _arg("recipe", help="a recipe name (`grokbench recipes` lists them)"),
    "overrides": _arg(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides; key=v1,v2 sweeps a key (`grokbench keys` lists the keys)",
    ),
    "quick": _arg("--quick", action="store_true", help="the recipe's minutes-on-a-CPU size"),
    "results": _arg(
        "--results",
        type=Path,
        default=None,
        help="results store (default: $GROKBENCH_RESULTS, else ./results)",
    ),
    "progress": _arg("--no-progress", action="store_true", help="no progress bars"),
    "chunk": _arg(
        "--chunk",
        type=int,
        default=1000,
        help="steps per compiled call; speed only (default: %(default)s)",
    ),
}
"""Options several commands take."""


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


def _build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand of `_COMMANDS`."""
    parser = _Parser(prog="grokbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", title="commands", parser_class=_Parser
    )
    for name, command in _COMMANDS.items():
        summary, _, description = inspect.getdoc(command.run).partition("\n\n")
        p = sub.add_parser(name, help=summary, description=" ".join(description.split()))
        group = p.add_mutually_exclusive_group() if command.exclusive else None
        for names, options in [_SHARED[k] for k in command.shared] + list(command.arguments):
            if callable(options.get("choices")):  # looked up late: the module imports jax
                options = {**options, "choices": options["choices"]()}
            (group if names[0] in command.exclusive else p).add_argument(*names, **options)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `grokbench` console script."""
    runtime.use_all_cores()  # before _build_parser, whose imports load jax
    parser = _build_parser()
    # Overrides may follow options (`run fig2-top --quick seeds=3`): argparse's nargs="*"
    # positional stops at the first option, so the rest comes back as unknown and is re-added.
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command = _COMMANDS[args.command]
    flags = [token for token in extra if token.startswith("-")]
    if flags or (extra and command.rest is None):
        parser.error(f"unrecognized arguments: {' '.join(flags or extra)}")
    if extra:
        setattr(args, command.rest, [*getattr(args, command.rest), *extra])
    return _dispatch(command, args)


def _dispatch(command: _Command, args: argparse.Namespace) -> int:
    """Run the command; every error a user can cause or mend is one line and a status."""
    from grokbench.config import ConfigError
    from grokbench.store import finished_since
    from grokbench.sweep import SweepBusy

    start, prog = time.time(), f"grokbench {args.command}"
    try:
        with runtime.compilation_cache():  # per user, per machine (GROKBENCH_COMPILATION_CACHE)
            return command.run(args)
    except (ConfigError, SweepBusy, *command.input_errors) as err:
        return _fail(prog, str(err), 1 if isinstance(err, SweepBusy) else 2)
    except KeyboardInterrupt:
        stored = finished_since(commands.store_root(args), start)
        resume = "Rerunning the same command resumes: finished runs are loaded, not retrained."
        print(f"{prog}: interrupted; {stored}. {resume}", file=sys.stderr)
        return 130
    except OSError as err:  # a write that failed mid-run (the paths were checked up front)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            what, fix = "the disk is full", "Free space and rerun"
        elif err.filename is not None:
            what, fix = f"cannot write {err.filename}", "Fix that and rerun"
        else:
            raise
        stored = finished_since(commands.store_root(args), start)
        message = f"{what} ({err.strerror}); {stored} intact. {fix} the same command to resume."
        return _fail(prog, message, 1)
    except Exception as err:  # XLA runtime errors have no stable class across jax versions
        if not runtime.is_float16_link_error(err):
            raise
        return _fail(prog, runtime.FLOAT16_UNSUPPORTED, 2)


def _fail(prog: str, message: str, status: int) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status
