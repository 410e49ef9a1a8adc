"""The repository's Python sources as syntax trees, each file parsed once per process.

tests/grokbench/test_imports.py (the layering) and tests/grokbench/test_surface.py (the
public names) walk the same packages; both read the trees and never change them.
"""

import ast
import functools
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def module_name(path: pathlib.Path) -> str:
    """The dotted module name of a file under ROOT (`tasks/quant/__init__.py` -> `tasks.quant`)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def tree(path: pathlib.Path) -> ast.Module:
    """The syntax tree of one file (shared: read it, do not change it)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def trees(*where: str) -> dict[str, ast.Module]:
    """Dotted name -> syntax tree of every module under `where` (directories or files, relative
    to ROOT), in sorted path order; a new dict each call."""
    out = {}
    for place in where:
        path = ROOT / place
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            out[module_name(file)] = tree(file)
    return out
