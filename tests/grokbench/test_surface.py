"""The harness's public surface stays narrow (issue 45, item 5).

A name in a `grokbench` module's `__all__` (or re-exported as `X as X` by a package's
`__init__`, as `grokbench.quant` does) is public: another layer uses it (`figures`,
`benchmarks`, `examples`, the root `conftest.py`, or the face `grokbench.cli` for the rest of
the harness), or a user's page names it (`grokbench.store.metrics_frame`). A name that only
other harness modules use is package-internal: left out of `__all__`, its name kept (no module
imports another's underscored names, tests/grokbench/test_imports.py). Any other name is
private to its module and starts with an underscore. Tests count for neither: they may test
internals.
"""

import ast
import pathlib
import re

from tests import _sources as sources

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = "grokbench"
FACE = "grokbench.cli"
LAYERS = ("figures", "benchmarks", "examples", "conftest.py")
"""The layers above the harness whose uses make a harness name public."""

USER_PAGES = sorted(
    {ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "studies").glob("*.md")}
    - {ROOT / "docs" / "architecture.md", ROOT / "docs" / "style.md"}
)
"""The pages a user reads. docs/architecture.md and docs/style.md describe the internals
to contributors, so naming a name there does not make it public."""


def _all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return list(ast.literal_eval(node.value))
    return None


def _reexports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """`from M import X as X` at a package's top level: X -> (M, X)."""
    return {
        a.name: (node.module, a.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for a in node.names
        if a.asname == a.name
    }


def _exports(harness: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Module -> its public names: its `__all__`, or for a package without one, the names
    its `__init__` re-exports."""
    out = {}
    for name, tree in harness.items():
        names = _all(tree)
        if names is None and (ROOT / name.replace(".", "/") / "__init__.py").exists():
            names = list(_reexports(tree)) or None
        if names is not None:
            out[name] = names
    return out


def _own_nodes(scope: ast.AST):
    """The nodes of one scope, without those of the functions defined in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _references(tree: ast.Module, modules: set[str]) -> set[tuple[str, str]]:
    """(module, name) of every harness name `tree` uses: `from M import name`, `alias.name`
    where `alias` is M (imported in that function or around it, `import grokbench.x as y`
    and `from grokbench import x` included), and string constants equal to a public name of
    a module that `tree` imports or names in a string (`getattr(versions, "CONFIG_VERSION")`,
    `_late("grokbench.audit", "KIND_CALLS")`)."""
    found, named, strings = set(), set(), set()

    def visit(scope: ast.AST, outer: dict[str, str]) -> None:
        aliases = dict(outer)
        nodes = list(_own_nodes(scope))
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules:
                        aliases[a.asname or a.name.split(".")[0]] = (
                            a.name if a.asname else a.name.split(".")[0]
                        )
                        named.add(a.name)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if f"{node.module}.{a.name}" in modules:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                        named.add(f"{node.module}.{a.name}")
                    elif node.module in modules:
                        found.add((node.module, a.name))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
                named.add(node.value)
        for node in nodes:
            if isinstance(node, ast.Attribute):
                chain, base = [], node
                while isinstance(base, ast.Attribute):
                    chain.insert(0, base.attr)
                    base = base.value
                if isinstance(base, ast.Name) and base.id in aliases:
                    module = aliases[base.id]
                    while chain and f"{module}.{chain[0]}" in modules:
                        module = f"{module}.{chain.pop(0)}"
                    if chain:
                        found.add((module, chain[0]))
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(node, aliases)

    visit(tree, {})
    found |= {(m, s) for m in named & modules for s in strings}
    return found


def _through_reexports(refs: set[tuple[str, str]], harness: dict[str, ast.Module]) -> set:
    """`refs` plus, for each use of a package's re-export, the use of the name it re-exports."""
    out = set(refs)
    for package, tree in harness.items():
        for name, source in _reexports(tree).items():
            if (package, name) in refs:
                out.add(source)
    return out


def _documented(module: str, name: str, text: str, harness: dict[str, ast.Module]) -> bool:
    """`text` names `module.name` in full (`grokbench.store.metrics_frame`) or from the
    harness (`store.metrics_frame`), or through a package that re-exports it."""
    spellings = [module] + [
        package for package, tree in harness.items() if _reexports(tree).get(name) == (module, name)
    ]
    return any(
        re.search(
            rf"(?<![\w.])(grokbench\.)?{re.escape(m.removeprefix('grokbench.'))}"
            rf"\.{re.escape(name)}(?!\w)",
            text,
        )
        for m in spellings
    )


def _unused_exports(harness, layers, pages) -> list[str]:
    """'module.name' for every public name that no other layer uses and no page names."""
    modules = set(harness)
    face = {k: v for k, v in harness.items() if k == FACE or k.startswith(FACE + ".")}
    text = "\n".join(pages)
    above = set()
    for tree in layers.values():
        above |= _references(tree, modules)
    by_face = set()
    for tree in face.values():
        by_face |= _references(tree, modules)
    above, by_face = _through_reexports(above, harness), _through_reexports(by_face, harness)
    bad = []
    for module, names in _exports(harness).items():
        in_face = module == FACE or module.startswith(FACE + ".")
        users = above if in_face else above | by_face
        for name in names:
            if (module, name) not in users and not _documented(module, name, text, harness):
                bad.append(f"{module}.{name}")
    return bad


def _defined(tree: ast.Module) -> list[str]:
    """The names a module defines at its top level (functions, classes, assignments)."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def _stray_names(harness: dict[str, ast.Module]) -> list[str]:
    """'module.name' for every name defined without an underscore, left out of `__all__`,
    that no other harness module uses: it should be exported or start with an underscore."""
    modules = set(harness)
    used = {}
    for user, tree in harness.items():
        for ref in _references(tree, modules):
            used.setdefault(ref, set()).add(user)
    used = {
        ref: users
        for ref, users in used.items()
        if users - {ref[0]}  # a module's strings naming its own names are not a use
    }
    bad = []
    for module, tree in harness.items():
        exported = set(_all(tree) or ())
        for name in _defined(tree):
            if name not in exported and name != "__all__" and (module, name) not in used:
                bad.append(f"{module}.{name}")
    return bad


def test_every_harness_module_declares_its_surface():
    """Each module of the harness lists its public names in `__all__` (a package's
    `__init__` may instead re-export them as `X as X`); `__main__` modules are scripts."""
    harness = sources.trees(HARNESS)
    missing = [
        name
        for name, tree in harness.items()
        if not name.endswith("__main__") and name not in _exports(harness) and _defined(tree)
    ]
    assert not missing, missing


def test_every_public_name_is_used_above_the_harness_or_documented():
    harness = sources.trees(HARNESS)
    pages = [p.read_text() for p in USER_PAGES]
    bad = _unused_exports(harness, sources.trees(*LAYERS), pages)
    assert not bad, (
        "public names no other layer uses and no user page names: drop them from __all__ "
        f"(package-internal) or start them with an underscore (module-private): {bad}"
    )


def test_every_other_name_is_package_internal_or_private():
    bad = _stray_names(sources.trees(HARNESS))
    assert not bad, f"export these or start them with an underscore: {bad}"


def test_the_checks_see_uses_and_catch_an_unused_export():
    """The checks are not vacuous: they see figures' use of `Store` and the face's of
    `KIND_CALLS` (named by string), and catch a name exported or left public for nobody."""
    harness = sources.trees(HARNESS)
    layers = sources.trees(*LAYERS)
    refs = set().union(*(_references(t, set(harness)) for t in layers.values()))
    assert ("grokbench.store", "Store") in refs
    face = _references(harness["grokbench.cli.app"], set(harness))
    assert ("grokbench.audit", "KIND_CALLS") in face
    fake = dict(harness)
    fake["grokbench.tables"] = ast.parse(
        '__all__ = ["widget"]\ndef widget(): ...\ndef gadget(): ...\n'
    )
    assert "grokbench.tables.widget" in _unused_exports(fake, layers, [])
    assert "grokbench.tables.gadget" in _stray_names(fake)
    # ... and a page naming it in full makes it public.
    assert "grokbench.tables.widget" not in _unused_exports(
        fake, layers, ["`grokbench.tables.widget`"]
    )
