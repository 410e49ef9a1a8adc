"""Where the test suite's time goes, per test file: wall, CPU and compile seconds, programs.

    GROKBENCH_COMPILE_REPORT=/tmp/suite.jsonl pytest -n 2      # the root conftest records
    python benchmarks/suite_times.py /tmp/suite.jsonl           # the table, largest first

Wall and CPU are summed over the tests of a file (both workers' tests together), compile
seconds are jax's tracing, lowering and XLA compile time of the programs each test built
(`grokbench.runtime.CompileMeter`), and `cached` the programs a persistent compilation
cache served instead of compiling. A line per worker follows: its busy seconds and how long
before the last worker it finished (the run's idle tail).

    GROKBENCH_PROGRAM_LOG=/tmp/programs.jsonl pytest -n 2       # which tests use each program
    python benchmarks/suite_times.py --programs /tmp/programs.jsonl

`--programs` reads the root conftest's program log (every program each test uses, and each
program's compile seconds) and sums, per file and per test, the compile of the programs that
no other file (test) uses: what moving it to the slow tier would save in compile. A test's
own compile seconds in the report above overstate that where its programs are shared, since
a shared program is charged to whichever test compiles it first.
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


def sole_users(lines: list[dict], key=lambda test: test) -> tuple[dict[str, float], dict]:
    """The compile seconds of the programs that one group alone uses, per group (`key` maps a
    test id to its group: itself, or its file), and the totals: every program's compile
    seconds, and those of programs used by more than one group."""
    seconds: dict[str, float] = {}
    users: dict[str, set] = collections.defaultdict(set)
    for record in lines:
        if record["event"] == "compile":
            seconds[record["key"]] = max(seconds.get(record["key"], 0.0), record["seconds"])
        if record["test"] is not None:
            users[record["key"]].add(key(record["test"]))
    alone: dict[str, float] = collections.defaultdict(float)
    shared = 0.0
    for program, groups in users.items():
        if len(groups) == 1:
            alone[next(iter(groups))] += seconds.get(program, 0.0)
        else:
            shared += seconds.get(program, 0.0)
    return dict(alone), {"compile": sum(seconds.values()), "shared": shared}


def markdown_programs(lines: list[dict], top: int) -> str:
    by_file, totals = sole_users(lines, key=lambda test: test.split("::")[0])
    by_test, _ = sole_users(lines)
    out = [
        f"XLA compile {totals['compile']:.1f} s; in programs one file alone uses "
        f"{sum(by_file.values()):.1f} s, in programs several files use {totals['shared']:.1f} s",
        "",
        "| test file | compile of the programs only it uses (s) |",
        "| --- | ---: |",
    ]
    for name, value in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"| {name} | {value:.1f} |")
    out += ["", "| test | compile of the programs only it uses (s) |", "| --- | ---: |"]
    for name, value in sorted(by_test.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"| {name} | {value:.1f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=pathlib.Path, help="the GROKBENCH_COMPILE_REPORT file")
    parser.add_argument("--top", type=int, default=15, help="rows shown (default: 15)")
    parser.add_argument(
        "--programs", action="store_true", help="REPORT is a GROKBENCH_PROGRAM_LOG file"
    )
    args = parser.parse_args()
    lines = [json.loads(x) for x in args.report.read_text().splitlines() if x.strip()]
    if args.programs:
        print(markdown_programs(lines, args.top))
        return
    print(markdown(per_file(lines), args.top))
    print(per_worker(lines))


if __name__ == "__main__":
    main()
