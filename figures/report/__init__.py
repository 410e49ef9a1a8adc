"""The reproduction report: every claim of the two papers our recipes can test, paper vs ours.

This package is the report, apart from the figures that draw: the paper's numbers,
tolerances and their reasons (`figures.report.paper`), what every claim shares
(`figures.report.claims`), one module of claims per figure (`figures.report.fig2`, ...,
`figures.report.quant`, each declaring its figure as `CLAIMS`; `figures.registry` links them),
and the results bundle the docs quote (`figures.report.bundle`, `figures.report.bundle_docs`).
This module only gathers the evidence (stored runs of the build's scale, the quant lab's
table, the CE benchmark's output), evaluates every figure's claims, and renders
`reproduction.md`: per figure, its image, then its rows. A claim without data is
`not tested`, with the reason and the command that tests it (`figures.report.claims`). The
report never trains, and imports no figure script.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from figures import registry
from figures._common import ABLATIONS_FILE, CONSTANT_LR_FILE, QUANT_TABLE_FILE, Context
from figures.report.claims import FAILS, HOLDS, NOT_TESTED, Evidence, Row
from grokbench.store import atomic_write_bytes

__all__ = ["count", "evaluate", "evidence", "format_counts", "markdown", "sections", "write"]

BENCH_FILE = "bench_cross_entropy.json"
"""`python benchmarks/bench_cross_entropy.py --json OUT/bench_cross_entropy.json` writes it."""


def sections() -> list[tuple[str, tuple[str, ...], Callable[[Evidence], list[Row]]]]:
    """The report's sections in order: title, images (when built), claims; one per figure
    that declares a title and has claims (`figures.registry`)."""
    claimed = registry.claims()
    return [
        (f.title, f.images, claimed[f.name].claims)
        for f in registry.figures()
        if f.title and f.name in claimed
    ]


def evidence(ctx: Context) -> Evidence:
    """Everything of this build's scale the store and the build directory hold (no training)."""
    table = None
    path = ctx.out / QUANT_TABLE_FILE
    if path.is_file():
        table = json.loads(path.read_text())
        table = table if table.get("quick") == ctx.quick else None
    ablations = ctx.out / ABLATIONS_FILE  # the full build's sweeps (quick scale)
    if table is not None and not ctx.quick and ablations.is_file():
        table = {**table, "ablations": json.loads(ablations.read_text())}
    constant = ctx.out / CONSTANT_LR_FILE  # the full build's constant-lr table
    if table is not None and not ctx.quick and constant.is_file():
        table = {**table, "constant_lr": json.loads(constant.read_text())}
    bench = ctx.out / BENCH_FILE
    return Evidence(
        scale=ctx.scale,
        recipes={name: ctx.stored(name) for name in registry.claimed_recipes()},
        quant=table,
        bench=json.loads(bench.read_text()) if bench.is_file() else None,
        store=ctx.store,
    )


def evaluate(ev: Evidence) -> list[tuple[str, tuple[str, ...], list[Row]]]:
    """Every section's rows."""
    return [(title, images, claims(ev)) for title, images, claims in sections()]


def count(rows: Sequence[Row]) -> dict[str, int]:
    """How many rows hold, fail, and were not tested."""
    return {s: sum(r.status == s for r in rows) for s in (HOLDS, FAILS, NOT_TESTED)}


def format_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(sections, scale: str, built: Callable[[str], bool] = lambda name: False) -> str:
    """The report as Markdown: the count, then per section its images (those `built`) and
    one table row per claim."""
    rows = [r for _, _, rs in sections for r in rs]
    lines = [
        f"# Reproduction report ({scale} scale)",
        "",
        f"{format_counts(count(rows))} of {len(rows)} claims.",
        "",
        "Status `fails` means our measurement is outside the stated tolerance; `not tested`",
        "gives the reason and the command that tests it. Tolerances are fixed from the papers'",
        "text (figures/report/paper.py); each figure's claims are in its figures/report/ module.",
    ]
    for title, images, section in sections:
        lines += ["", f"## {title}", ""]
        lines += [f"![{name}]({name})" for name in images if built(name)]
        lines += [
            "",
            f"{format_counts(count(section))}.",
            "",
            "| claim | source | paper | ours | tolerance | status |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in section:
            status = r.status if not r.note else f"{r.status}: {r.note}"
            cells = [r.claim, r.source, r.paper, r.ours, r.tolerance, status]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write(ctx: Context):
    """Evaluate every claim and write OUT/reproduction.md; return (path, rows)."""
    sections = evaluate(evidence(ctx))
    path = ctx.out / "reproduction.md"
    text = markdown(sections, ctx.scale, built=lambda name: (ctx.out / name).is_file())
    atomic_write_bytes(path, text.encode())
    return path, [r for _, _, rs in sections for r in rs]
