"""Plain-text tables and JSON-safe numbers, shared by every command that prints runs.

A table names each run by the config keys that vary across the runs shown (`varying_keys`),
then its numbers, in columns aligned by `align`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = []  # package-internal: only other harness modules use these names


def finite_or_none(x: Any) -> float | None:
    """`x` as a JSON-safe float: None, NaN and +-inf become None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def fmt(x: float | None, spec: str) -> str:
    """`x` formatted by `spec`, or '-' when it is missing or not finite."""
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def varying_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys (in the first config's order) whose values differ across `configs`."""
    if not configs:
        return []
    return [k for k in configs[0] if len({repr(c.get(k)) for c in configs}) > 1]


def run_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys that name a run in a table: those that vary, then always the seed."""
    return [k for k in varying_keys(configs) if k != "seed"] + ["seed"]


def align(rows: Sequence[Sequence[str]], left_last: bool = False) -> str:
    """Rows of cells as lines, columns right-aligned and two spaces apart.

    `left_last` leaves the last column (free text such as a note) left-aligned, unpadded.
    """
    n = len(rows[0]) - 1 if left_last else len(rows[0])
    widths = [max(len(r[i]) for r in rows) for i in range(n)]

    def line(cells: Sequence[str]) -> str:
        text = "  ".join(
            [*(c.rjust(w) for c, w in zip(cells[:n], widths, strict=True)), *cells[n:]]
        )
        return text.rstrip() if left_last else text

    return "\n".join(line(r) for r in rows)


def summary_table(
    summaries: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str | None]]
) -> str:
    """One line per run summary: the keys that name it (`run_keys`), then one cell per
    (header, summary key, format spec; None: `str`) column, then its seconds, marked '*'
    when the run was loaded from the store rather than trained."""
    keys = run_keys([s["config"] for s in summaries])
    header = [*keys, *(name for name, _, _ in columns), "sec"]
    rows = [
        [
            *(str(s["config"][k]) for k in keys),
            *(str(s[key]) if spec is None else fmt(s[key], spec) for _, key, spec in columns),
            fmt(s["seconds"], ".1f") + ("*" if s.get("cached") else ""),
        ]
        for s in summaries
    ]
    return align([header, *rows])
