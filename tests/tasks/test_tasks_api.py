"""Every name `tasks` exports is documented (STYLE.md 1)."""

import ast
import importlib
import inspect
import itertools

import pytest

import tasks

# Submodules are private (`tasks._modular`, ...), so every public attribute is an export.
_EXPORTED = sorted(name for name in vars(tasks) if not name.startswith("_"))


def _documented_constants(module) -> set[str]:
    """Names assigned at module level with a docstring literal right after them."""
    body = ast.parse(inspect.getsource(module)).body
    names = set()
    for stmt, nxt in itertools.pairwise(body):
        documented = isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
        if documented and isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_no_public_submodules():
    assert not [n for n in _EXPORTED if inspect.ismodule(getattr(tasks, n))]


@pytest.mark.parametrize("name", _EXPORTED)
def test_exported_name_has_docstring(name):
    obj = getattr(tasks, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert obj.__module__.startswith("tasks._"), name
        assert inspect.getdoc(obj), name
    else:
        defining = [
            importlib.import_module(f"tasks.{m}")
            for m in ("_common", "_mlp", "_models", "_modular", "_transformer")
        ]
        assert any(name in _documented_constants(m) for m in defining), name
