"""The training floor of `grokbench figures --quick`: its engine runs timed with nothing compiled.

The quick runs of every recipe a figure's build makes (`figures.registry.figure_of`; runs
shared by two recipes once; the distillation runs of fig7 left out: they train through
`grokbench.distill`, and the quant lab is not an engine recipe) are split into the engine's
shape groups (`grokbench.config.group_runs`; the build groups each recipe's runs alike),
padded and sharded over one host device per core as the engine does. Per group, one chunk
of at most --steps steps (whole evaluation blocks) is run to compile and warm up, then
timed; the floor is the group's steps times the measured time per step, summed: what the
build's training costs on this machine with every program already compiled and no Python,
store or figure work at all.
Also printed: the cores busy (process CPU seconds over wall seconds) while the timed chunks
ran.

--batch RECIPE --sizes 1,2,4 instead times that recipe's first quick config as batches of
1, 2, 4 seeds: the time per run-step a larger batch buys, which is what merging shape groups
(one program for several losses) could gain, with XLA's FLOP estimate of the batch's step.

    python benchmarks/bench_quick_training.py [--steps 200] [--recipes fig2-top,table1]
    python benchmarks/bench_quick_training.py --batch table1 --sizes 3,6,12
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# As `grokbench figures` does: one JAX host device per core, set before jax loads.
from grokbench import runtime

runtime.use_all_cores()

import jax  # noqa: E402

from figures import registry  # noqa: E402
from grokbench import engine, recipes  # noqa: E402
from grokbench.config import RunConfig, group_runs  # noqa: E402
from grokbench.errors import ConfigError  # noqa: E402
from grokbench.precision import precision_scope  # noqa: E402


def time_group(configs: list[RunConfig], steps: int) -> tuple[float, float, float]:
    """(seconds per step, CPU seconds, wall seconds) of one warm chunk of `configs`."""
    cfg = configs[0]
    with precision_scope(cfg.precision):
        batch = engine.prepare(configs, chunk_steps=min(steps, cfg.steps))
        run = lambda s: batch.run_chunk(s, batch.hyper, batch.data, batch.n_blocks)  # noqa: E731
        state, out = run(batch.state)
        jax.block_until_ready(out)
        wall, cpu = time.perf_counter(), time.process_time()
        state, out = run(state)
        jax.block_until_ready(out)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / (batch.n_blocks * cfg.eval_every), cpu, wall


def floor(names: list[str], steps: int) -> None:
    runs: dict[RunConfig, str] = {}
    for name in names:
        for cfg in recipes.expand(recipes.RECIPES[name], quick=True):
            if isinstance(cfg, RunConfig) and not cfg.teacher_steps:
                runs.setdefault(cfg, name)
    groups = group_runs(list(runs))
    print(f"{len(runs)} runs in {len(groups)} shape groups, {jax.local_device_count()} devices")
    print(f"{'recipe':<18} {'runs':>4} {'steps':>6} {'ms/step':>8} {'floor s':>8}")
    total, cpu_sum, wall_sum = 0.0, 0.0, 0.0
    per_recipe: dict[str, float] = {}
    for group in groups:
        per_step, cpu, wall = time_group(group, steps)
        seconds = per_step * group[0].steps
        name = runs[group[0]]
        per_recipe[name] = per_recipe.get(name, 0.0) + seconds
        total, cpu_sum, wall_sum = total + seconds, cpu_sum + cpu, wall_sum + wall
        ms = per_step * 1e3
        print(f"{name:<18} {len(group):4d} {group[0].steps:6d} {ms:8.2f} {seconds:8.1f}")
    print("\nper recipe (s): " + ", ".join(f"{k} {v:.0f}" for k, v in per_recipe.items()))
    busy = cpu_sum / wall_sum
    print(f"training floor: {total:.0f} s ({total / 60:.1f} min); cores busy {busy:.2f}")


def batch_sizes(name: str, sizes: list[int], steps: int) -> None:
    base = recipes.expand(recipes.RECIPES[name], quick=True)[0]
    print(f"{name}: p={base.p} {base.model} {base.precision} {base.loss}")
    for n in sizes:
        configs = [dataclasses.replace(base, seed=base.seed + s) for s in range(n)]
        per_step, _, _ = time_group(configs, steps)
        flops = engine.step_flops(configs)  # XLA's estimate for the whole batch's step
        ms = per_step * 1e3
        print(
            f"{n:3d} runs: {ms:8.2f} ms/step, {ms / n:7.2f} ms per run-step, "
            f"{flops / 1e6:8.1f} MFLOP/step, {flops / per_step / 1e9:6.1f} GFLOP/s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per group (at most)")
    parser.add_argument(
        "--recipes",
        default=",".join(registry.figure_of()),
        help="comma-separated (default: those the figures' build makes)",
    )
    parser.add_argument("--batch", metavar="RECIPE", help="time batch sizes of this recipe")
    parser.add_argument("--sizes", default="1,2,4", help="batch sizes for --batch")
    args = parser.parse_args()
    for name in [*args.recipes.split(","), *([args.batch] if args.batch else [])]:
        try:
            recipes.check_name(name, tuple(registry.builds()))
        except ConfigError as e:
            parser.error(str(e))
    if args.batch and recipes.expand(recipes.RECIPES[args.batch], quick=True)[0].teacher_steps:
        parser.error(f"{args.batch} distills (grokbench.distill): not an engine recipe")
    if args.batch:
        batch_sizes(args.batch, [int(s) for s in args.sizes.split(",")], args.steps)
    else:
        floor(args.recipes.split(","), args.steps)


if __name__ == "__main__":
    main()
