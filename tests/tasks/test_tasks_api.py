"""Every name `tasks` and `tasks.quant` export is documented (docs/style.md 1)."""

import importlib
import inspect
import pkgutil

import pytest

import tasks
import tasks.quant
from tests._docs import documented_constants

SUBPACKAGES = ("quant",)
"""Public subpackages of `tasks`; every other submodule is private (`tasks._modular`, ...)."""

_EXPORTED = [
    (package, name)
    for package in (tasks, tasks.quant)
    for name in sorted(vars(package))
    if not name.startswith("_") and not (package is tasks and name in SUBPACKAGES)
]


@pytest.mark.parametrize("package", [tasks, tasks.quant])
def test_no_other_public_submodules(package):
    assert not [
        n
        for n, v in vars(package).items()
        if not n.startswith("_") and inspect.ismodule(v) and n not in SUBPACKAGES
    ]


def test_tasks_exports_nothing_of_the_quant_lab():
    public = {n for n in vars(tasks.quant) if not n.startswith("_")}
    assert not public & set(vars(tasks))


@pytest.mark.parametrize(
    "package, name", _EXPORTED, ids=[f"{p.__name__}.{n}" for p, n in _EXPORTED]
)
def test_exported_name_has_docstring(package, name):
    obj = getattr(package, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert obj.__module__.startswith(package.__name__ + "._"), name
        assert inspect.getdoc(obj), name
    else:
        defining = [
            importlib.import_module(f"{package.__name__}.{m.name}")
            for m in pkgutil.iter_modules(package.__path__)
            if m.name.startswith("_")
        ]
        assert any(name in documented_constants(m) for m in defining), name
