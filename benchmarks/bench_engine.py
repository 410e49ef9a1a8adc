"""End-to-end time of a seed sweep: the engine (fast pass, vmapped) vs plain per-run jit loops.

Work: 8 seeds x 3,000 full-batch steps of the reference config (fig2-top: a+b mod 31, 480
training examples, width-64 transformer, AdamW 1e-3 / (0.9, 0.98) / eps 1e-8 / wd 1, fixed
CE, fp32), test loss/accuracy every 100 steps. Every path's time is wall-clock from nothing
compiled to metrics on the host: compilation, initialization and metric transfer included.

  plain loop       per-run jit + lax.scan, plain forward pass (all 3 positions), loss only
                   per step plus the test evaluation: the minimal loop, run seed by seed
  engine plain x1  the engine with the plain forward pass, seed by seed (same metrics)
  engine fast x1   the engine (fast forward pass, all metrics), seed by seed
  engine fast x8   the engine as `grokbench run` uses it: 8 seeds vmapped in one program

FLOPs per step are XLA's cost analysis of one compiled step; the peak is a large float32
matmul measured here. "vs plain" is the plain loop's wall time over the path's; "cpu vs
plain" the same for this process's CPU time, which other load on the machine barely moves.

    python benchmarks/bench_engine.py [--steps 3000] [--seeds 8] [--skip-plain] [--devices=N]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# As `grokbench run` does: one JAX host device per core (or --devices N), set before jax
# loads. The engine shards the 8 seeds over them; the plain loop runs on device 0, and its
# large ops still use every core (XLA's intra-op thread pool is shared by the devices).
_DEVICES = next((a.split("=")[1] for a in sys.argv if a.startswith("--devices=")), None)
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + f" --xla_force_host_platform_device_count={_DEVICES or os.cpu_count() or 1}"
).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from _timing import compiled_flops, matmul_peak  # noqa: E402

import numerics  # noqa: E402
from grokbench import engine  # noqa: E402
from grokbench.config import RunConfig  # noqa: E402
from grokbench.optimizers import adamw  # noqa: E402
from tasks import build_model, modular_split  # noqa: E402


def _plain_loop(cfg: RunConfig) -> tuple[Callable, Callable]:
    """A per-run jit + lax.scan loop over the plain forward pass: (run(seed), step(state))."""
    data = modular_split(cfg.modular_task())
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    xt, yt = jnp.asarray(data.x_test), jnp.asarray(data.y_test)
    model = build_model(cfg.model_config(), fast=False)
    tx = adamw(cfg.lr, cfg.b1, cfg.b2, cfg.eps, cfg.weight_decay)

    def loss_fn(params, xs, ys):
        return jnp.mean(numerics.cross_entropy(model.apply(params, xs), ys))

    def step(state, _):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def block(state, _):
        state, losses = jax.lax.scan(step, state, None, length=cfg.eval_every)
        logits = model.apply(state[0], xt)
        test_acc = jnp.mean((jnp.argmax(logits, -1) == yt).astype(jnp.float32))
        return state, (losses, loss_fn(state[0], xt, yt), test_acc)

    @jax.jit
    def run(seed):
        params = model.init(jax.random.key(seed), jnp.float32)
        n_blocks = cfg.steps // cfg.eval_every
        return jax.lax.scan(block, (params, tx.init(params)), None, length=n_blocks)[1]

    return run, step


def _time(fn: Callable) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): CPU time is robust to other load."""
    t0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps per run")
    parser.add_argument("--seeds", type=int, default=8, help="runs (seeds) in the sweep")
    parser.add_argument("--skip-plain", action="store_true", help="skip the two slow plain paths")
    parser.add_argument("--devices", help="--devices=N: JAX host devices (default: one per core)")
    args = parser.parse_args()

    base = RunConfig(steps=args.steps, eval_every=100)
    cfgs = [dataclasses.replace(base, seed=s) for s in range(args.seeds)]
    one = cfgs[:1]
    peak = matmul_peak()

    results = {}  # name -> ((wall s, cpu s), flops per step of one run)
    if not args.skip_plain:
        run, step = _plain_loop(base)
        results["plain loop"] = (
            _time(lambda: [run(s) for s in range(args.seeds)]),
            _plain_step_flops(step, base),
        )

    def engine_path(batch: int, fast: bool) -> tuple[float, float]:
        engine.clear_compiled()  # every path pays its own compilation
        groups = [cfgs[i : i + batch] for i in range(0, len(cfgs), batch)]
        return _time(lambda: [engine.train(g, progress=False, fast=fast) for g in groups])

    if not args.skip_plain:
        results["engine plain x1"] = (engine_path(1, False), engine.step_flops(one, fast=False))
    results["engine fast x1"] = (engine_path(1, True), engine.step_flops(one))
    results[f"engine fast x{args.seeds}"] = (
        engine_path(args.seeds, True),
        engine.step_flops(cfgs) / args.seeds,
    )

    run_steps = args.seeds * args.steps
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores, "
        f"{jax.local_device_count()} JAX devices"
    )
    print(
        f"{args.seeds} seeds x {args.steps} steps, a+b mod 31 (480 examples), width 64, "
        "AdamW, fixed CE, fp32, test every 100 steps; end to end incl. compilation"
    )
    print(f"matmul peak (2048^2 float32): {peak:.1f} GFLOP/s\n")
    header = (
        f"{'path':<16} {'wall s':>7} {'cpu s':>7} {'ms/run-step':>11} {'vs plain':>8} "
        f"{'cpu vs plain':>12} {'MFLOP/run-step':>14} {'GFLOP/s':>8} {'% peak':>7}"
    )
    print(header)
    print("-" * len(header))
    plain = results.get("plain loop", ((None, None),))[0]
    for name, ((wall, cpu), flops) in results.items():
        rate = flops * run_steps / wall / 1e9
        speedup = f"{plain[0] / wall:7.1f}x" if plain[0] else f"{'-':>8}"
        cpu_speedup = f"{plain[1] / cpu:11.1f}x" if plain[1] else f"{'-':>12}"
        print(
            f"{name:<16} {wall:7.1f} {cpu:7.1f} {1e3 * wall / run_steps:11.3f} {speedup} "
            f"{cpu_speedup} {flops / 1e6:14.1f} {rate:8.2f} {100 * rate / peak:6.1f}%"
        )
    print("\nms/run-step, GFLOP/s and % peak use wall time; cpu s is this process's CPU time.")


def _plain_step_flops(step: Callable, cfg: RunConfig) -> float:
    model = build_model(cfg.model_config(), fast=False)
    params = model.init(jax.random.key(0), jnp.float32)
    state = (params, adamw(cfg.lr).init(params))
    return compiled_flops(lambda s: step(s, None), state)


if __name__ == "__main__":
    main()
