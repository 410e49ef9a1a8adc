"""Where the test suite's time goes, per test file: wall, CPU and compile seconds, programs.

    GROKBENCH_COMPILE_REPORT=/tmp/suite.jsonl pytest -n 2      # the root conftest records
    python benchmarks/suite_times.py /tmp/suite.jsonl           # the table, largest first

Wall and CPU are summed over the tests of a file (both workers' tests together), compile
seconds are jax's tracing, lowering and XLA compile time of the programs each test built
(`grokbench.runtime.CompileMeter`), and `cached` the programs a persistent compilation
cache served instead of compiling. A line per worker follows: its busy seconds and how long
before the last worker it finished (the run's idle tail).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib

KEYS = ("wall", "cpu", "compile", "programs", "cached")


def per_file(lines: list[dict]) -> dict[str, dict[str, float]]:
    """Each file's sums of `KEYS` and its test count."""
    out: dict[str, dict[str, float]] = collections.defaultdict(lambda: dict.fromkeys(KEYS, 0))
    for record in lines:
        row = out[record["file"]]
        for key in KEYS:
            row[key] += record[key]
        row["tests"] = row.get("tests", 0) + 1
    return dict(out)


def markdown(rows: dict[str, dict[str, float]], top: int) -> str:
    total = {k: sum(r[k] for r in rows.values()) for k in (*KEYS, "tests")}
    ranked = sorted(rows.items(), key=lambda kv: -kv[1]["wall"])[:top]
    lines = [
        "| test file | tests | wall (s) | CPU (s) | compile (s) | programs | cached |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in [*ranked, ("all files", total)]:
        lines.append(
            f"| {name} | {r['tests']} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['compile']:.1f} "
            f"| {r['programs']} | {r['cached']} |"
        )
    return "\n".join(lines)


def per_worker(lines: list[dict]) -> str:
    """Each worker's tests, busy seconds (the sum of its tests' wall) and the seconds from its
    first test's start to its last test's end, and how long before the last worker it ended:
    the time a worker sat idle at the end of the run."""
    workers: dict[str, list[dict]] = collections.defaultdict(list)
    for record in lines:
        if "worker" in record:
            workers[record["worker"]].append(record)
    if not workers:
        return ""
    last = max(r["end"] for rs in workers.values() for r in rs)
    out = []
    for name, records in sorted(workers.items()):
        start = min(r["end"] - r["wall"] for r in records)
        end = max(r["end"] for r in records)
        busy = sum(r["wall"] for r in records)
        out.append(
            f"{name}: {len(records)} tests, busy {busy:.1f} s of {end - start:.1f} s, "
            f"ended {last - end:.1f} s before the last"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=pathlib.Path, help="the GROKBENCH_COMPILE_REPORT file")
    parser.add_argument("--top", type=int, default=15, help="files shown (default: 15)")
    args = parser.parse_args()
    lines = [json.loads(x) for x in args.report.read_text().splitlines() if x.strip()]
    print(markdown(per_file(lines), args.top))
    print(per_worker(lines))


if __name__ == "__main__":
    main()
