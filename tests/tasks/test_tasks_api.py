"""Every name `tasks` exports is documented (docs/style.md 1)."""

import importlib
import inspect

import pytest

import tasks
from tests._docs import documented_constants

# Submodules are private (`tasks._modular`, ...), so every public attribute is an export.
_EXPORTED = sorted(name for name in vars(tasks) if not name.startswith("_"))


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
            for m in (
                "_common",
                "_distill",
                "_mlp",
                "_models",
                "_modular",
                "_quant_models",
                "_transformer",
            )
        ]
        assert any(name in documented_constants(m) for m in defining), name
