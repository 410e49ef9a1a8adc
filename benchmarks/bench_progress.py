"""What the progress measures cost: bench_engine's engine path with them on vs off.

Work: bench_engine.py's "engine fast x8" path (8 seeds x 3,000 full-batch steps of fig2-top,
vmapped in one program, test metrics every 100 steps), end to end from nothing compiled to
metrics on the host, once with `progress_measures=True` (as the fig2-top recipe: grokbench.fourier's
measures every 100 steps) and once with it off, alternating on/off `--reps` times in this
one process, so load on the machine hits both alike. Prints each pair's wall and CPU time
and the median on/off ratios (the target is <= 1.10). Then the same for a 2-seed batch (one
run per host device, as `grokbench run fig2-top seeds=2`), whose WALL ratio says whether the
measures keep both cores busy (target <= 1.15; issue 15).

    python benchmarks/bench_progress.py [--steps 3000] [--seeds 8] [--reps 3] [--devices=N]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# bench_engine.py's set-up, so both time the same thing: one JAX host device per core (or
# --devices=N), set before jax loads.
import bench_engine  # noqa: F401
import numpy as np

from grokbench import engine
from grokbench.config import RunConfig


def _time(cfgs: list[RunConfig]) -> tuple[float, float]:
    """(wall s, CPU s) of training `cfgs` as one batch, compilation included."""
    engine.clear_compiled()
    t0, c0 = time.perf_counter(), time.process_time()
    engine.train(cfgs, progress=False)
    return time.perf_counter() - t0, time.process_time() - c0


def _pairs(on: list[RunConfig], off: list[RunConfig], reps: int) -> None:
    """Time `on` and `off` alternately `reps` times; print the pairs and the median ratios."""
    print(f"{len(on)} seeds x {on[0].steps} steps, fig2-top, end to end incl. compilation")
    print(f"{'pair':>4} {'on wall':>8} {'off wall':>8} {'on cpu':>8} {'off cpu':>8}")
    walls, cpus = [], []
    for rep in range(reps):
        # Alternate which goes first, so neither always runs on a warmer machine.
        first, second = (on, off) if rep % 2 == 0 else (off, on)
        t = {id(first): _time(first), id(second): _time(second)}
        (w_on, c_on), (w_off, c_off) = t[id(on)], t[id(off)]
        walls.append(w_on / w_off)
        cpus.append(c_on / c_off)
        print(f"{rep + 1:>4} {w_on:8.1f} {w_off:8.1f} {c_on:8.1f} {c_off:8.1f}")
    print(
        f"median on/off: wall {np.median(walls):.3f}x, cpu {np.median(cpus):.3f}x "
        f"(pairs: wall {', '.join(f'{r:.3f}' for r in walls)}; "
        f"cpu {', '.join(f'{r:.3f}' for r in cpus)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps per run")
    parser.add_argument("--seeds", type=int, default=8, help="runs (seeds) in the batch")
    parser.add_argument("--reps", type=int, default=3, help="on/off pairs")
    parser.add_argument("--devices", help="--devices=N: JAX host devices (default: one per core)")
    args = parser.parse_args()
    base = RunConfig(steps=args.steps, eval_every=100, progress_measures=True)
    for seeds in dict.fromkeys((args.seeds, 2)):
        on = [dataclasses.replace(base, seed=s) for s in range(seeds)]
        _pairs(on, [dataclasses.replace(c, progress_measures=False) for c in on], args.reps)


if __name__ == "__main__":
    main()
