"""The package layering: no import cycles, no private names taken from another module."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("numerics", "tasks", "grokbench")


def _modules() -> dict[str, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            out[name] = ast.parse(path.read_text(), str(path))
    return out


def _imports(tree: ast.Module) -> list[tuple[str, str | None]]:
    """(module, name) of every import, TYPE_CHECKING and function-level ones included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.module, a.name) for a in node.names]
    return found


def test_no_private_names_from_another_module():
    modules = _modules()
    bad = []
    for name, tree in modules.items():
        package = name.split(".")[0]
        for module, imported in _imports(tree):
            private = imported is not None and imported.startswith("_")
            submodule = f"{module}.{imported}" in modules and module == package
            if private and not submodule:
                bad.append(f"{name}: from {module} import {imported}")
    assert not bad, bad


def test_no_import_cycles():
    modules = _modules()
    graph = {name: set() for name in modules}
    for name, tree in modules.items():
        for module, imported in _imports(tree):
            target = f"{module}.{imported}" if f"{module}.{imported}" in modules else module
            if target in modules and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    # A package's __init__ re-exports its private modules: treat the package as its members.
    for package in PACKAGES:
        graph[package] = {t for t in graph[package] if not t.startswith(package + ".")}

    def cycle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = [c for c in (cycle_from(m) for m in graph) if c]
    assert not cycles, cycles[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_were_found(package):
    assert any(name.startswith(package) for name in _modules())
