"""The `grokbench` console script: parse, dispatch, nothing else."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def _cliffs(args: argparse.Namespace) -> int:
    from grokbench import cliffs

    names = args.dtypes or list(cliffs.DTYPES)
    unknown = sorted(set(names) - set(cliffs.DTYPES))
    if unknown:
        print(f"grokbench cliffs: unknown dtype(s) {', '.join(unknown)}; "
              f"choose from {', '.join(cliffs.DTYPES)}", file=sys.stderr)
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="grokbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("cliffs", help="where standard vs fixed cross-entropy break, per dtype")
    p.add_argument("dtypes", nargs="*", help="bfloat16 float16 float32 float64 (default: all)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=_cliffs)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `grokbench` console script."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
