"""Every public name of the grokbench modules is documented (docs/style.md 1)."""

import importlib
import inspect

import pytest

from tests._docs import documented_constants

NAMES = (
    "audit",
    "cli.app",
    "cli.commands",
    "config",
    "console",
    "distill",
    "engine",
    "equilibrium",
    "executors",
    "experiment",
    "metrics",
    "optimizers",
    "overrides",
    "precision",
    "quant.config",
    "quant.evaluate",
    "quant.table",
    "quant.train",
    "recipes",
    "runtime",
    "slingshot",
    "store",
    "summary",
    "sweep",
    "tables",
    "versions",
)
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


def test_all_lists_every_public_name():
    for module in MODULES:
        public = {
            n
            for n, v in vars(module).items()
            if not n.startswith("_")
            and getattr(v, "__module__", None) == module.__name__
            and (inspect.isclass(v) or inspect.isfunction(v))
        }
        assert public <= set(module.__all__), public - set(module.__all__)
