"""The package layering: no import cycles, no private names taken from another module, and
only the face (`grokbench.cli`, the `grokbench` command) imports `figures`."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("numerics", "tasks", "grokbench")
FACE = "grokbench.cli"
"""The top layer: the only package that may import both the harness and `figures`."""


def _modules() -> dict[str, ast.Module]:
    """Dotted name -> syntax tree of every module, subpackages (`tasks.quant`) included."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = ast.parse(path.read_text(), str(path))
    return out


def _packages() -> set[str]:
    return {
        ".".join(p.relative_to(ROOT).parent.parts)
        for k in PACKAGES
        for p in (ROOT / k).rglob("__init__.py")
    }


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
        package = name.rsplit(".", 1)[0] if name not in _packages() else name
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
    for package in _packages():
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


def _figures_imports(modules: dict[str, ast.Module]) -> list[str]:
    """'MODULE: import figures...' for each import of `figures` outside the face."""
    return [
        f"{name}: import {module}" + (f" ({imported})" if imported else "")
        for name, tree in modules.items()
        if name != FACE and not name.startswith(FACE + ".")
        for module, imported in _imports(tree)
        if module == "figures" or module.startswith("figures.")
    ]


def test_only_the_face_imports_figures():
    modules = _modules()
    assert FACE in modules and f"{FACE}.commands" in modules
    assert not _figures_imports(modules), _figures_imports(modules)
    # ... and the face does (the check above would pass vacuously if it saw no imports).
    face = {k: v for k, v in modules.items() if k.startswith(FACE)}
    assert any(m.startswith("figures") for tree in face.values() for m, _ in _imports(tree))


def test_a_harness_module_importing_figures_is_caught():
    harness = ast.parse("def f():\n    from figures import build\n    import figures.quant\n")
    found = _figures_imports({"grokbench.sweep": harness})
    assert found == [
        "grokbench.sweep: import figures (build)",
        "grokbench.sweep: import figures.quant",
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_were_found(package):
    assert any(name.startswith(package) for name in _modules())
