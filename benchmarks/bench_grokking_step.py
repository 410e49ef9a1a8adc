"""ms/step of grokking training on the reference config, plain vs fast forward pass vs vmap.

Reference config: a+b mod 31, train fraction 0.5 (480 examples, full batch), the width-64
1-layer transformer, AdamW (lr 1e-3, b1 0.9, b2 0.98, eps 1e-8, wd 1), float32. Paths:

  plain       one run: jit + lax.scan over steps, the plain forward pass (all 3 positions)
  fast        one run: same loop, the fast forward pass (`=` query, per-token K/V tables)
  fast x N    N seeds vmapped inside the same jit + scan, fast forward pass

The loss is `optax.softmax_cross_entropy_with_integer_labels` (the standard CE) for now.
Each timed call runs --steps steps from the same start; the paths are interleaved within
each repetition and medians are reported. FLOPs per step are XLA's cost analysis of one
compiled step (forward, backward and optimizer); the peak is a large float32 matmul.

    python benchmarks/bench_grokking_step.py [--steps 200] [--reps 7] [--seeds 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _timing import compiled_flops, matmul_peak

from grokbench.optimizers import adamw
from tasks import (
    ModularTask,
    TransformerConfig,
    modular_split,
    transformer_apply,
    transformer_apply_fast,
    transformer_init,
)


def _make_step(apply: Callable, tx: optax.GradientTransformation, x: jax.Array, y: jax.Array):
    """One full-batch training step: (params, opt_state) -> (params, opt_state), loss."""

    def loss_fn(params):
        logits = apply(params, x)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))

    def step(carry, _):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per timed call")
    parser.add_argument("--reps", type=int, default=7, help="timed calls per path")
    parser.add_argument("--seeds", type=int, default=8, help="runs in the vmapped path")
    parser.add_argument("--matmul", type=int, default=2048, help="size of the peak matmul")
    args = parser.parse_args()

    data = modular_split(ModularTask(op="a+b", p=31, train_fraction=0.5, split_seed=0))
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    cfg = TransformerConfig.varma(31)
    tx = adamw(1e-3, b1=0.9, b2=0.98, eps=1e-8, weight_decay=1.0)

    def init(key):
        params = transformer_init(key, cfg, jnp.float32)
        return params, tx.init(params)

    one = init(jax.random.key(0))
    many = jax.vmap(init)(jax.random.split(jax.random.key(0), args.seeds))

    paths = {}
    for name, apply in (("plain", transformer_apply), ("fast", transformer_apply_fast)):
        step = _make_step(apply, tx, x, y)
        paths[name] = (step, one, 1)
    fast_step = paths["fast"][0]
    paths[f"fast x {args.seeds}"] = (jax.vmap(fast_step, in_axes=(0, None)), many, args.seeds)

    runners, flops = {}, {}
    for name, (step, state, _) in paths.items():

        def run(state, step=step):
            return jax.lax.scan(step, state, None, length=args.steps)

        runners[name] = jax.jit(run)
        jax.block_until_ready(runners[name](state))  # compile and warm up
        flops[name] = compiled_flops(lambda s, step=step: step(s, None), state)

    times = {name: [] for name in paths}
    for _ in range(args.reps):
        for name, (_, state, _) in paths.items():  # interleaved: one call per path per rep
            t0 = time.perf_counter()
            jax.block_until_ready(runners[name](state))
            times[name].append((time.perf_counter() - t0) / args.steps)

    peak = matmul_peak(args.matmul, reps=5)
    plain_ms = 1e3 * float(np.median(times["plain"]))
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores")
    print(
        f"a+b mod 31, {x.shape[0]} examples, width {cfg.d_model}, full-batch AdamW, fp32; "
        f"{args.steps} steps/call, median of {args.reps} interleaved calls"
    )
    print(f"matmul peak ({args.matmul}^2 float32): {peak:.1f} GFLOP/s\n")
    header = (
        f"{'path':<10} {'ms/step':>8} {'min':>7} {'ms/run-step':>11} {'vs plain':>8} "
        f"{'MFLOP/step':>10} {'GFLOP/s':>8} {'% peak':>7}"
    )
    print(header)
    print("-" * len(header))
    for name, (_, _, runs) in paths.items():
        ms = 1e3 * float(np.median(times[name]))
        ms_min = 1e3 * float(np.min(times[name]))
        per_run = ms / runs
        rate = flops[name] / (ms / 1e3) / 1e9
        print(
            f"{name:<10} {ms:8.3f} {ms_min:7.3f} {per_run:11.3f} {plain_ms / per_run:7.1f}x "
            f"{flops[name] / 1e6:10.2f} {rate:8.2f} {100 * rate / peak:6.1f}%"
        )


if __name__ == "__main__":
    main()
