"""The cost of a sweep over one vmapped program of the same runs (the grouping overhead).

Work: fig2-top with fixed CE (a+b mod 31, width-64 transformer, AdamW 1e-3 / (0.9, 0.98) /
wd 1, fp32), 8 eps x 3 seeds x 3,000 full-batch steps = 24 runs, test metrics every 100.

  program   `engine.train` of the 24 configs: one jitted, vmapped program, sharded over the
            host devices, metrics to the host; nothing stored
  sweep     `grokbench sweep fig2-top loss=fixed eps=... seeds=3 steps=3000 --out TMP`, in
            process: grid expansion, the directory lock, grouping, the same program,
            summaries, the store's atomic writes, summary.json and sweep.csv

Both paths start from nothing compiled (compilation included), in alternating order. The
target is sweep / program <= 1.3x. Runs per hour is 24 / the sweep's wall time. CPU seconds
(this process) are printed beside wall seconds: other load on a shared machine moves wall
time, not them.

    python benchmarks/bench_sweep.py [--steps 3000] [--seeds 3] [--repeats 1] [--batch N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# As `grokbench sweep` does: one JAX host device per core, set before jax loads.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + f" --xla_force_host_platform_device_count={os.cpu_count() or 1}"
).strip()

import jax

from grokbench import cli, engine, sweep

EPS = ("1e-4", "1e-6", "1e-8", "1e-10", "1e-12", "1e-14", "1e-16", "0")


def _time(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of fn() from nothing compiled."""
    engine.clear_compiled()
    jax.clear_caches()
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps per run")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per eps")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats (median)")
    parser.add_argument("--batch", type=int, default=None, help="sweep --batch (default: all)")
    args = parser.parse_args()

    grid = ["loss=fixed", f"eps={','.join(EPS)}", f"seeds={args.seeds}", f"steps={args.steps}"]
    configs = sweep.expand_grid("fig2-top", grid)
    n_runs = len(configs)

    def program() -> None:
        jax.block_until_ready([o.metrics for o in engine.train(configs, progress=False)])

    def sweep_cli() -> None:
        with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
            argv = ["sweep", "fig2-top", *grid, "--out", out, "--no-progress"]
            if args.batch is not None:
                argv += ["--batch", str(args.batch)]
            assert cli.main(argv) == 0

    times: dict[str, list[tuple[float, float]]] = {"program": [], "sweep": []}
    paths = {"program": program, "sweep": sweep_cli}
    for i in range(args.repeats):
        order = ["program", "sweep"] if i % 2 == 0 else ["sweep", "program"]  # interleaved
        for name in order:
            times[name].append(_time(paths[name]))
            wall, cpu = times[name][-1]
            print(f"  repeat {i + 1}: {name:<8} {wall:7.1f} s wall {cpu:7.1f} s cpu", flush=True)

    def median(name: str, i: int) -> float:
        values = sorted(t[i] for t in times[name])
        return values[len(values) // 2]

    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores, "
        f"{jax.local_device_count()} JAX devices"
    )
    print(
        f"fig2-top fixed CE: {len(EPS)} eps x {args.seeds} seeds x {args.steps} steps = "
        f"{n_runs} runs; end to end incl. compilation; median of {args.repeats}\n"
    )
    print(f"{'path':<8} {'wall s':>8} {'cpu s':>8} {'ms/run-step':>11} {'runs/hour':>9}")
    for name in times:
        wall, cpu = median(name, 0), median(name, 1)
        ms = 1e3 * wall / (n_runs * args.steps)
        print(f"{name:<8} {wall:8.1f} {cpu:8.1f} {ms:11.3f} {3600 * n_runs / wall:9.0f}")
    wall_ratio = median("sweep", 0) / median("program", 0)
    cpu_ratio = median("sweep", 1) / median("program", 1)
    verdict = "ok" if wall_ratio <= 1.3 else "OVER the 1.3x target"
    print(f"\nsweep / program: {wall_ratio:.3f}x wall ({verdict}), {cpu_ratio:.3f}x cpu")


if __name__ == "__main__":
    main()
