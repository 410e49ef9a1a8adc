"""The vocabulary-parallel linear cross-entropy on host devices: time and memory per device.

    python benchmarks/bench_vocab_parallel.py [--devices 2] [--rows 4096] [--hidden 512]
        [--vocab 32768] [--dtypes float32,bfloat16] [--chunk 4096] [--reps 3]

For each dtype, value_and_grad with respect to hidden (rows, D) and weight (D, V) of the mean
loss of three jitted programs on a (1, P) mesh, the weight's vocabulary split over P devices:

- sharded: `numerics.sharded_linear_cross_entropy(mesh, ..., vocab_axis="vocab")`, each device
  holding its (D, V / P) shard and never more than one chunk of its logits;
- unsharded: `numerics.linear_cross_entropy` on one device, the whole (D, V) weight;
- optax on gathered logits: `optax.softmax_cross_entropy_with_integer_labels(hidden @ weight)`
  with the weight sharded as above and the (N, V) logits gathered onto every device, what a
  trainer without a vocabulary-parallel loss computes.

Memory is the compiled program's `memory_analysis().temp_size_in_bytes`, per device for the
sharded programs (XLA's buffer assignment of one device's program), known before it runs.
Time is the median of `--reps` runs after a compile and a warm-up, the programs interleaved.

What host devices can and cannot show: `--xla_force_host_platform_device_count=P` makes P
XLA devices that share this machine's cores and memory. The memory per device is what each
of P real devices would hold (the shard, the chunk, the collectives' buffers); the time is
not a parallel speed-up, only the cost of the extra collectives and of the partitioned
program on the same cores (on 2 cores, P = 2 host devices already compete for them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    if args.devices < 1 or args.vocab % args.devices:
        parser.error(f"--vocab {args.vocab} must be a positive multiple of --devices")
    return args


def main(argv=None) -> int:
    args = _args(argv)
    # Host devices must be requested before jax initialises its backends.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.devices}"
    ).strip()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import numerics

    devices = np.array(jax.devices()[: args.devices]).reshape(1, args.devices)
    mesh = Mesh(devices, ("data", "vocab"))
    chunk = args.chunk

    def sharded(h, w, t):
        return numerics.sharded_linear_cross_entropy(
            mesh,
            h,
            w,
            t,
            vocab_axis="vocab",
            reduction="mean",
            chunk_size=min(chunk, args.vocab // args.devices),
        )

    def unsharded(h, w, t):
        return numerics.linear_cross_entropy(h, w, t, reduction="mean", chunk_size=chunk)

    def gathered(h, w, t):
        logits = jax.lax.with_sharding_constraint(h @ w, NamedSharding(mesh, P()))
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, t))

    print(
        f"value_and_grad wrt hidden and weight, rows {args.rows}, D {args.hidden}, V "
        f"{args.vocab}, {args.devices} host devices on {os.cpu_count()} cores; median of "
        f"{args.reps}; temp = memory_analysis().temp_size_in_bytes (per device where sharded)"
    )
    print("| dtype | program | time (s) | vs unsharded | temp (MiB) | vs unsharded |")
    print("|---|---|---|---|---|---|")
    for name in args.dtypes.split(","):
        dtype = jnp.dtype(name)
        k_h, k_w, k_t = jax.random.split(jax.random.key(0), 3)
        h = jax.random.normal(k_h, (args.rows, args.hidden), jnp.float32).astype(dtype)
        w = (jax.random.normal(k_w, (args.hidden, args.vocab)) / args.hidden**0.5).astype(dtype)
        t = jax.random.randint(k_t, (args.rows,), 0, args.vocab)
        w_sharded = jax.device_put(w, NamedSharding(mesh, P(None, "vocab")))
        inputs = {
            "sharded": (h, w_sharded, t),
            "unsharded": (h, w, t),
            "optax, gathered": (h, w_sharded, t),
        }
        programs = {"sharded": sharded, "unsharded": unsharded, "optax, gathered": gathered}
        compiled, memory = {}, {}
        for key, loss in programs.items():
            step = jax.jit(jax.value_and_grad(loss, (0, 1)))
            compiled[key] = step.lower(*inputs[key]).compile()
            memory[key] = compiled[key].memory_analysis().temp_size_in_bytes
            jax.block_until_ready(compiled[key](*inputs[key]))  # warm
        times = {key: [] for key in programs}
        for _ in range(args.reps):
            for key, fn in compiled.items():
                start = time.perf_counter()
                jax.block_until_ready(fn(*inputs[key]))
                times[key].append(time.perf_counter() - start)
        base_t = statistics.median(times["unsharded"])
        for key in programs:
            med = statistics.median(times[key])
            print(
                f"| {name} | {key} | {med:.3f} | {med / base_t:.2f}x | "
                f"{memory[key] / 2**20:.0f} | {memory[key] / max(memory['unsharded'], 1):.3f}x |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
