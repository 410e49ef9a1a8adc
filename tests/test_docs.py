"""The documentation matches the repository: links resolve, examples run, tables match the code.

The README and docs/ are what a newcomer reads first; these checks keep them from drifting:
every relative link (and its #anchor) resolves, no file points outside the repository, the
README's set-up commands are the ones CI runs, the override-key table of docs/run.md is
RunConfig's, every command is in the README's table, and the numerics examples run.
"""

import argparse
import dataclasses
import pathlib
import re

import pytest

from grokbench.cli import app
from grokbench.config import RunConfig, _parse_value

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
STUDIES = sorted((ROOT / "docs" / "studies").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *DOCS, *STUDIES]
# The Python blocks that are complete programs (others show a line of a larger session).
RUNNABLE = [
    ROOT / "README.md",
    *(
        ROOT / "docs" / f"{name}.md"
        for name in ("numerics", "lm-losses", "divergences", "sink-softmax")
    ),
    ROOT / "docs" / "collapse-monitor.md",
]
SOURCE_DIRS = ("numerics", "tasks", "grokbench", "figures", "tests", "benchmarks", "docs", ".ci")

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def _links(page: pathlib.Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    for link in _links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link} does not exist"
        assert ROOT in target.parents, f"{page.name}: {link} points outside the repository"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page.name}: no heading for #{anchor}"


# --- reference pages and studies (issue 45, item 4) -----------------------------------------

REFERENCE_MAX_LINES = 300
"""The longest a reference page may be: it says what a command or module does, its options,
one measured figure with its command, and links; the experiments are studies."""

STUDY_SECTIONS = ("Question", "Settings", "Commands", "Results", "Conclusion")
"""The `## ` headings every study has, in this order."""

PREREGISTERED = {"matmul-precision.md": ("The question",)}
"""Studies written before their runs, with the sections they must already have: the
matmul-precision study is a pre-registration whose results are pending (another author
fills them in), so it keeps its own headings and is checked only for its question."""


def test_no_reference_page_is_over_300_lines():
    """Every reference page, docs/*.md, is at most REFERENCE_MAX_LINES lines. Counted:
    every .md directly in docs/, the generated gallery (audit-gallery.md, written by
    benchmarks/audit_gallery.py) included; not counted: docs/studies/ (the experiments,
    as long as their results need) and docs/data/ (the results bundle, no Markdown)."""
    lines = {p.name: len(p.read_text().splitlines()) for p in DOCS}
    long = {name: n for name, n in lines.items() if n > REFERENCE_MAX_LINES}
    assert not long, f"over {REFERENCE_MAX_LINES} lines (move experiments to docs/studies/): {long}"


def _sections(page: pathlib.Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return re.findall(r"^## (.+?)\s*$", text, flags=re.M)


def test_every_study_has_its_sections():
    """Every docs/studies/*.md page but the index (README.md) has the headings
    `## Question`, `## Settings`, `## Commands`, `## Results` and `## Conclusion`, in that
    order (subsections of Results are `###`); a pre-registered study (PREREGISTERED) has
    the sections listed for it, and is listed in the index like every other study."""
    assert STUDIES, "no docs/studies/"
    index = (ROOT / "docs" / "studies" / "README.md").read_text()
    for page in STUDIES:
        if page.name == "README.md":
            continue
        assert f"]({page.name})" in index, f"docs/studies/README.md does not list {page.name}"
        headings = _sections(page)
        wanted = PREREGISTERED.get(page.name, STUDY_SECTIONS)
        found = [h for h in headings if h in wanted]
        assert found == list(wanted), f"{page.name}: sections {headings}, want {list(wanted)}"


def _source_files():
    yield from (p for p in ROOT.iterdir() if p.is_file() and p.suffix in (".md", ".toml", ".py"))
    for name in SOURCE_DIRS:
        files = (ROOT / name).rglob("*")
        yield from (p for p in files if p.is_file() and "__pycache__" not in p.parts)


def test_no_file_refers_outside_the_repository():
    # Built from parts, so this file does not match itself.
    notes = ["../" + "shared", *(name + ".md" for name in ("RECIPES", "STYLE", "DESIGN"))]
    for path in _source_files():
        data = path.read_bytes()
        for note in notes:
            assert note.encode() not in data, f"{path.relative_to(ROOT)} refers to {note}"


def test_readme_setup_commands_are_the_ones_ci_runs():
    readme = (ROOT / "README.md").read_text()
    lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    # The README's test command (the fast tier) and the slow tier CI runs after it.
    (fast,) = [line for line in lines if line.startswith("python3 -m venv")]
    assert fast in readme
    assert lines[-1] == "pytest -n 2 -m slow" and lines[-1] in readme
    main_job = "pip install -e . && grokbench figures --quick"
    assert f"python3 -m venv .venv && . .venv/bin/activate && {main_job}" in readme


def _key_rows() -> dict[str, str]:
    """docs/run.md's override-key tables: key -> default cell (backticks stripped)."""
    section = (ROOT / "docs" / "run.md").read_text().split("## Override keys", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|", section, flags=re.M)
    return {key: default.strip().strip("`") for key, default in rows}


def test_key_table_lists_every_runconfig_field_with_its_default():
    rows = _key_rows()
    fields = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert set(rows) == {*fields, "seeds"}, "docs/run.md's key table is not RunConfig's fields"
    for name, default in fields.items():
        assert _parse_value(name, rows[name]) == default, f"docs/run.md: default of {name}"


def test_every_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    parser = app._build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [name for name in sub.choices if f"`grokbench {name}" not in readme]
    assert not missing, f"commands missing from the README's table: {missing}"


def _python_blocks(page: pathlib.Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


# Each page's first example runs in the fast tier and its others in the slow one (CONTRIBUTING.md,
# "Running the tests"): the later examples call functions whose code paths fast numerics tests
# run (docs/lm-losses.md's sharded loss: tests/numerics/test_vocab_parallel.py; its per-token
# outputs: tests/numerics/test_per_token.py; docs/divergences.md's fused divergences:
# tests/numerics/test_linear_divergence.py), and an eager example compiles one program per
# operation (3.7-8.4 s each here), so CI's slow tier checks the page as written.
@pytest.mark.parametrize(
    "page, index",
    [
        pytest.param(p, i, marks=[pytest.mark.slow] if i else [])
        for p in RUNNABLE
        for i in range(len(_python_blocks(p)))
    ],
    ids=lambda x: x.name if isinstance(x, pathlib.Path) else str(x),
)
def test_python_examples_run(page, index):
    exec(compile(_python_blocks(page)[index], f"{page.name}[{index}]", "exec"), {})


def _doctest_examples() -> list[tuple[str, str, dict]]:
    """(where, source, globals) of every example in the numerics package's docstrings: the
    doctests `pytest --doctest-modules` collects (testpaths), each with its module's names."""
    import doctest
    import importlib
    import pkgutil

    import numerics

    for flag in ("ALLOW_UNICODE", "ALLOW_BYTES", "NUMBER"):  # pytest's own option flags
        doctest.register_optionflag(flag)
    out = []
    finder = doctest.DocTestFinder()
    for info in pkgutil.iter_modules(numerics.__path__):
        module = importlib.import_module(f"numerics.{info.name}")
        for test in finder.find(module):
            source = "".join(example.source for example in test.examples)
            if source:
                out.append((test.name, source, dict(module.__dict__)))
    return out


def _unknown_names(source: str, where: str, names: dict) -> list[str]:
    """What `source` names that does not exist: a module it imports, an attribute of a module
    or class it reaches by a dotted name, a keyword (or one positional argument too many) of
    a function it calls by such a name. Names an example binds itself (variables) are not
    followed. A statically resolvable call is checked with `inspect.Signature.bind_partial`,
    so a renamed function or keyword in the library fails here before the example runs."""
    import ast
    import importlib
    import inspect
    import types

    tree = ast.parse(source, where)  # a syntax error fails here too
    names = dict(names)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                try:
                    module = importlib.import_module(alias.name)
                except ImportError as e:
                    problems.append(f"{where}: import {alias.name}: {e}")
                    continue
                if alias.asname:
                    names[alias.asname] = module
                else:
                    names[alias.name.split(".")[0]] = importlib.import_module(
                        alias.name.split(".")[0]
                    )
        elif isinstance(node, ast.ImportFrom) and node.module:
            try:
                module = importlib.import_module(node.module)
            except ImportError as e:
                problems.append(f"{where}: from {node.module}: {e}")
                continue
            for alias in node.names:
                if not hasattr(module, alias.name):
                    problems.append(f"{where}: {node.module} has no {alias.name}")
                else:
                    names[alias.asname or alias.name] = getattr(module, alias.name)

    resolved: dict[int, object] = {}  # each node once: a missing name is reported once

    def resolve(expr):
        """The object a dotted name rooted in a module or class stands for, else None."""
        if id(expr) not in resolved:
            resolved[id(expr)] = _resolve(expr)
        return resolved[id(expr)]

    def _resolve(expr):
        if isinstance(expr, ast.Name):
            value = names.get(expr.id)
            return value if isinstance(value, (types.ModuleType, type)) or callable(value) else None
        if isinstance(expr, ast.Attribute):
            base = resolve(expr.value)
            if not isinstance(base, (types.ModuleType, type)):
                return None
            if not hasattr(base, expr.attr):
                problems.append(f"{where}: {ast.unparse(expr)} does not exist")
                return None
            return getattr(base, expr.attr)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            resolve(node)
        if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
            continue
        fn = resolve(node.func)
        if fn is None or isinstance(fn, type):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            continue
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin or C function without one
            continue
        try:
            signature.bind_partial(*node.args, **{k.arg: None for k in node.keywords})
        except TypeError as e:
            problems.append(f"{where}: {ast.unparse(node.func)}(...): {e}")
    return problems


def _page_examples() -> list[tuple[str, str, dict]]:
    return [
        (f"{p.name}[{i}]", block, {}) for p in RUNNABLE for i, block in enumerate(_python_blocks(p))
    ]


def test_every_example_names_what_exists():
    """Every example of the docs pages and the numerics docstrings parses and names only
    modules, functions and keywords that exist: in the fast tier for the examples that only
    the slow tier runs (each page's later ones), and with a message that names the missing
    name for the others."""
    examples = [*_page_examples(), *_doctest_examples()]
    assert len(examples) >= 40 and any(w.startswith("numerics.") for w, _, _ in examples)
    problems = [
        p for where, source, names in examples for p in _unknown_names(source, where, names)
    ]
    assert not problems, "\n".join(problems)


def test_a_renamed_function_or_keyword_fails_the_example_check():
    import numerics

    names = {"numerics": numerics}
    assert _unknown_names("numerics.cross_entropy(x, y, axis=-1)", "ok", names) == []
    assert _unknown_names("numerics.cross_entropy(x, y, no_such_option=1)", "kw", names)
    assert _unknown_names("numerics.cross_entropy_renamed(x, y)", "name", names)
    assert _unknown_names("from numerics import cross_entropy_renamed", "import", {})
    assert _unknown_names("import numerics.no_such_module", "module", {})
    assert _unknown_names("numerics.logit_margin(x, y, z, w, v, u, t, s)", "positional", names)
    with pytest.raises(SyntaxError):
        _unknown_names("numerics.cross_entropy(x,", "syntax", names)


# --- the numbers the docs quote come from the results bundle (docs/data) ----------------------


def test_docs_agree_with_the_results_bundle():
    """Every bundle block of the README and docs/ is what `python -m figures.report.bundle render`
    makes of docs/data: a number edited by hand, or a bundle refreshed without rendering,
    fails here (`python -m figures.report.bundle refresh` remakes both)."""
    from figures.report import bundle

    assert bundle.load()["quick"] is not None, "no results bundle in docs/data"
    assert bundle.check() == []


def test_a_number_changed_in_a_bundle_block_fails_the_check(tmp_path):
    from figures.report import bundle

    readme = (ROOT / "README.md").read_text()
    (name, start, end), *_ = bundle.blocks(readme)
    block = readme[start:end]
    digit = re.search(r"\d", block)
    assert digit, f"no number in the README's {name} block"
    i = start + digit.start()
    changed = readme[:i] + str((int(readme[i]) + 1) % 10) + readme[i + 1 :]
    page = tmp_path / "README.md"
    page.write_text(changed)
    assert bundle.check([page]) == [f"{page}: {name}"]
    page.write_text(readme)
    assert bundle.check([page]) == []


def test_bundle_blocks_are_known_and_closed():
    from figures.report import bundle, bundle_docs

    for page in PAGES:
        for name, _, _ in bundle.blocks(page.read_text()):
            assert name in bundle_docs.BLOCKS, f"{page.name}: unknown bundle block {name!r}"


def test_the_bundle_manifest_names_every_cache_version():
    """The manifest records the versions its numbers were made at (`grokbench.versions`),
    and the stored manifest is at today's versions: a bump needs a refreshed bundle."""
    from figures.report import bundle
    from grokbench import versions

    declared = [n for n in versions.__all__ if n.endswith("_VERSION")]
    assert sorted(bundle.VERSION_KEYS.values()) == sorted(declared)
    assert bundle._versions() == bundle.load()["manifest"]["versions"]


def test_the_distillation_table_names_each_run_once():
    """Each row of docs/distillation.md's bundle table is one run: the fixed students with
    soft-target CE and with KL as the loss are told apart (precision and loss label)."""
    from figures.report import bundle, bundle_docs

    table = bundle_docs.distillation_measured(bundle.load()).splitlines()
    rows = [tuple(c.strip() for c in line.split("|")[1:3]) for line in table[2:] if "|" in line]
    assert len(rows) == len(set(rows)) == 9


def test_no_quick_verdict_contradicts_the_full_build():
    """A row the quick build decides must not contradict the full build's verdict on the same
    row (issue 46): in the bundle, no row holds at quick scale and fails at full, or fails
    at quick scale and holds at full, among the rows both builds decided."""
    from figures.report import bundle

    data = bundle.load()
    quick = {r["claim"]: r["status"] for r in data["quick"]["report"]}
    full = {r["claim"]: r["status"] for r in data["full"]["report"]}
    decided = ("holds", "fails")
    both = [c for c in quick if quick[c] in decided and full.get(c) in decided]
    assert both, "no row decided at both scales: the bundle has no full-scale report"
    contradicted = [(c, quick[c], full[c]) for c in both if quick[c] != full[c]]
    assert not contradicted, contradicted


def test_a_quick_only_refresh_keeps_the_full_scale_lists(tmp_path, monkeypatch):
    """`bundle refresh --quick-only` rewrites the manifest's quick entry and keeps what the
    full refresh wrote (its entries and the full-scale recipe lists); a full refresh replaces
    the lists."""
    import json

    from figures.report import bundle

    monkeypatch.setattr(bundle, "DATA", tmp_path)
    old = {
        "entries": {"quick": {"seconds": 1.0}, "full": {"fig4": {"command": "c"}}},
        "full_recipes": ["fig4"],
        "recipes_not_in_the_bundle_at_full_scale": ["table1"],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    bundle._write_manifest({"quick": {"seconds": 2.0}})
    new = json.loads((tmp_path / "manifest.json").read_text())
    assert new["entries"] == {"quick": {"seconds": 2.0}, "full": {"fig4": {"command": "c"}}}
    assert new["full_recipes"] == ["fig4"]
    assert new["recipes_not_in_the_bundle_at_full_scale"] == ["table1"]
    assert {"made", "versions", "machine"} <= set(new)
    bundle._write_manifest(
        {}, full_recipes=["fig2-top"], recipes_not_in_the_bundle_at_full_scale=[]
    )
    new = json.loads((tmp_path / "manifest.json").read_text())
    assert (
        new["full_recipes"] == ["fig2-top"] and new["recipes_not_in_the_bundle_at_full_scale"] == []
    )
