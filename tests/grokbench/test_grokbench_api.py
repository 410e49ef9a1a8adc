"""Every public name of the grokbench modules is documented (docs/style.md 1)."""

import importlib
import inspect
import pathlib

import pytest

from tests._docs import documented_constants

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts[1:])
    for p in (ROOT / "grokbench").rglob("*.py")
    if p.name != "__init__.py" and "__all__ =" in p.read_text()
)
"""Every module of the harness with an `__all__` (tests/grokbench/test_surface.py checks that
each has one and what may be in it)."""
MODULES = tuple(importlib.import_module(f"grokbench.{name}") for name in NAMES)


@pytest.mark.parametrize("module, name", [(m, n) for m in MODULES for n in m.__all__])
def test_public_name_has_docstring(module, name):
    obj = getattr(module, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert inspect.getdoc(obj), name
        for attr, member in vars(obj).items():
            if not attr.startswith("_") and inspect.isfunction(member):
                assert inspect.getdoc(member), f"{name}.{attr}"
    else:
        assert name in documented_constants(module), name
