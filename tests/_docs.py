"""Helpers for the tests that check every public name is documented (docs/style.md 1)."""

import ast
import inspect
import itertools


def documented_constants(module) -> set[str]:
    """Names assigned at module level with a docstring literal right after them."""
    body = ast.parse(inspect.getsource(module)).body
    names = set()
    for stmt, nxt in itertools.pairwise(body):
        documented = isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
        if documented and isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names
