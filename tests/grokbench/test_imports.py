"""The package layering: no import cycles, no private names taken from another module, and
only the face (`grokbench.cli`, the `grokbench` command) imports `figures`."""

import ast
import pathlib

import pytest

from tests import _sources as sources

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("numerics", "tasks", "grokbench")
FACE = "grokbench.cli"
"""The top layer: the only package that may import both the harness and `figures`."""


def _modules() -> dict[str, ast.Module]:
    """Dotted name -> syntax tree of every module, subpackages (`tasks.quant`) included (a new
    dict each call; the trees, parsed once per process by tests/_sources.py, are only read)."""
    return sources.trees(*PACKAGES)


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


# --- figures: the figure scripts draw, the report (figures/report/) claims, the build trains ---

FIGURES = ROOT / "figures"
TRAINS = ("figures/build.py",)
"""The one module of `figures` outside the report that trains: the build, before drawing."""

TRAINING_MODULES = {"grokbench.engine", "grokbench.experiment", "grokbench.distill"}
"""Modules whose import means training (`grokbench.quant.train` too: any `*.train`)."""

TRAINING_CALLS = {"run_configs", "run_quant", "run_ablations", "run_tap_costs", "run_students"}
"""Functions that train what the store lacks (the harness's and the quant lab's)."""

CLAIM_CALLS = {"claim_row", "spikes_row", "Row", "Claims"}
"""What builds a claim's row or declares a figure's claims."""


def _figures_modules() -> dict[str, ast.Module]:
    """'figures/...py' -> syntax tree of every module of `figures`, the report's included."""
    return {
        path.relative_to(ROOT).as_posix(): sources.tree(path)
        for path in sorted(FIGURES.rglob("*.py"))
    }


def _figure_scripts() -> set[str]:
    """The figure scripts: the public modules of `figures` (but the registry and the build)."""
    return {p.stem for p in FIGURES.glob("*.py") if not p.stem.startswith("_")} - {
        "registry",
        "build",
    }


def _targets(tree: ast.Module) -> list[str]:
    """Every module an import names, then `module.name` for a name imported from one."""
    found = [[m] if n is None else [m, f"{m}.{n}"] for m, n in _imports(tree)]
    return list(dict.fromkeys(t for pair in found for t in pair))


def _called(tree: ast.Module) -> set[str]:
    """The names of every function called (`f(...)`, `x.f(...)`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
    return names


def _layering(modules: dict[str, ast.Module]) -> list[str]:
    """'PATH: what' for each module of `figures` that breaks the split: outside
    figures/report/, a module that claims (imports the report, builds a row, declares
    CLAIMS) or trains (imports or calls a training function; the build, which writes the
    report too, may train and import it); inside it, a module that imports a figure script
    (the registry links figures and claims)."""
    scripts = {f"figures.{name}" for name in _figure_scripts()}
    bad = []
    for path, tree in modules.items():
        targets = _targets(tree)
        if path.startswith("figures/report/"):
            bad += [f"{path}: imports the figure script {t}" for t in targets if t in scripts]
            continue
        if path not in TRAINS:
            trains = [
                t
                for t in targets
                if t in TRAINING_MODULES
                or t.endswith(".train")
                or t.split(".")[-1] in TRAINING_CALLS
            ]
            trains += sorted(_called(tree) & TRAINING_CALLS)
            bad += [f"{path}: trains ({t})" for t in dict.fromkeys(trains)]
            bad += [
                f"{path}: claims (imports {t})"
                for t in targets
                if t == "figures.report" or t.startswith("figures.report.")
            ]
        bad += [f"{path}: claims ({name}(...))" for name in sorted(_called(tree) & CLAIM_CALLS)]
        assigned = {
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        bad += [f"{path}: claims (declares CLAIMS)"] if "CLAIMS" in assigned else []
    return bad


def test_figures_draw_the_report_claims_and_only_the_build_trains():
    modules = _figures_modules()
    assert "figures/report/fig2.py" in modules and "figures/fig2.py" in modules
    assert not _layering(modules), _layering(modules)


def test_a_figure_that_claims_or_trains_is_caught():
    script = ast.parse(
        "from grokbench import experiment\n"
        "from figures.report.claims import claim_row\n"
        "def draw(ctx):\n"
        "    experiment.run_configs([], ctx.store)\n"
        "    return [claim_row(claim='c', source='', paper='', tolerance='', ours='', ok=None)]\n"
        "CLAIMS = None\n"
    )
    report = ast.parse("from figures import fig2\nfrom figures._common import select\n")
    found = _layering({"figures/fig9.py": script, "figures/report/fig9.py": report})
    assert found == [
        "figures/fig9.py: trains (grokbench.experiment)",
        "figures/fig9.py: trains (run_configs)",
        "figures/fig9.py: claims (imports figures.report.claims)",
        "figures/fig9.py: claims (imports figures.report.claims.claim_row)",
        "figures/fig9.py: claims (claim_row(...))",
        "figures/fig9.py: claims (declares CLAIMS)",
        "figures/report/fig9.py: imports the figure script figures.fig2",
    ]
    # The build trains, and only the build.
    assert _layering({"figures/build.py": script})[:1] == [
        "figures/build.py: claims (claim_row(...))"
    ]
