"""The chunked linear cross-entropy against the materialized logits: time and peak memory.

    python benchmarks/bench_linear_cross_entropy.py [--rows 4096] [--hidden 512]
        [--vocab 32768,131072] [--dtypes float32,bfloat16] [--chunk 4096] [--reps 3]

For each vocabulary V and dtype, value_and_grad with respect to hidden (rows, D) and
weight (D, V) of the mean loss of six programs:

- optax: `optax.softmax_cross_entropy_with_integer_labels(hidden @ weight, labels)`, the
  materialized logits a trainer without a fused kernel computes;
- fixed: `numerics.cross_entropy(hidden @ weight, labels)`, our materialized fixed CE;
- linear: `numerics.linear_cross_entropy(hidden, weight, labels, reduction="mean",
  chunk_size=...)`, the fused path (a scalar loss: the gradients computed in the forward
  pass, three matmuls);
- linear-recompute: the mean of `reduction="none"`'s per-row losses, the path a per-row
  cotangent takes (the backward recomputes each chunk's logits: four matmuls);
- linear+aux: the same with `return_aux=True`, the per-token outputs (log_prob, entropy,
  lse, argmax, z_loss) returned beside the loss's value and gradient (issue 47's target:
  at most 1.10x linear's time);
- linear-pg: a policy-gradient objective through the outputs, mean(loss) - mean(adv *
  log_prob) - 1e-3 mean(entropy), its gradient flowing through log_prob and entropy too.

Memory is the compiled executable's `memory_analysis().temp_size_in_bytes`: XLA's
buffer assignment of everything that is neither an argument nor an output (the logits,
their gradient, the chunks), i.e. the peak temporary memory of the step, known before it
runs. Time is the median of `--reps` runs after a compile and a warm-up, the six
programs interleaved. Targets (issue 31): at V = 128k, linear's temporary memory at most
1/8 of the materialized paths' and its time at most 1.2x optax's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import optax

import numerics


def _programs(chunk: int):
    def optax_loss(h, w, t):
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ w, t))

    def fixed_loss(h, w, t):
        return jnp.mean(numerics.cross_entropy(h @ w, t))

    def linear_loss(h, w, t):
        return numerics.linear_cross_entropy(h, w, t, reduction="mean", chunk_size=chunk)

    def linear_recompute(h, w, t):
        per_row = numerics.linear_cross_entropy(h, w, t, chunk_size=chunk)
        return jnp.mean(per_row.astype(jnp.float32)).astype(h.dtype)

    def linear_aux(h, w, t):
        loss, aux = numerics.linear_cross_entropy(
            h, w, t, reduction="mean", chunk_size=chunk, return_aux=True
        )
        return loss, aux

    def linear_pg(h, w, t):
        loss, aux = numerics.linear_cross_entropy(
            h, w, t, reduction="mean", chunk_size=chunk, return_aux=True
        )
        adv = jnp.where(t % 2 == 0, 1.0, -1.0)  # advantages of +-1, fixed
        lp, ent = (aux[k].astype(jnp.float32) for k in ("log_prob", "entropy"))
        return loss.astype(jnp.float32) - jnp.mean(adv * lp) - 1e-3 * jnp.mean(ent), aux

    def no_aux(f):
        return lambda h, w, t: (f(h, w, t), None)

    return {
        "optax": no_aux(optax_loss),
        "fixed": no_aux(fixed_loss),
        "linear": no_aux(linear_loss),
        "linear-recompute": no_aux(linear_recompute),
        "linear+aux": linear_aux,
        "linear-pg": linear_pg,
    }


def bench(rows: int, hidden: int, vocab: int, dtype, chunk: int, reps: int, only=None) -> dict:
    """{program: (median seconds, temporary bytes)} for one shape and dtype."""
    k_h, k_w, k_t = jax.random.split(jax.random.key(0), 3)
    h = jax.random.normal(k_h, (rows, hidden), jnp.float32).astype(dtype)
    w = (jax.random.normal(k_w, (hidden, vocab), jnp.float32) / hidden**0.5).astype(dtype)
    t = jax.random.randint(k_t, (rows,), 0, vocab)
    compiled, memory = {}, {}
    for name, loss in _programs(chunk).items():
        if only is not None and name not in only and name not in ("optax", "linear"):
            continue
        step = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))
        compiled[name] = step.lower(h, w, t).compile()
        memory[name] = compiled[name].memory_analysis().temp_size_in_bytes
    for fn in compiled.values():
        jax.block_until_ready(fn(h, w, t))  # warm
    times: dict[str, list[float]] = {name: [] for name in compiled}
    for _ in range(reps):
        for name, fn in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(h, w, t))
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(times[name]), memory[name]) for name in compiled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", default="32768,131072")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--chunk", type=int, default=numerics.linear_cross_entropy.__kwdefaults__["chunk_size"]
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--programs",
        default=None,
        help="comma-separated subset (default: all; optax and linear always)",
    )
    args = parser.parse_args()
    print(
        f"value_and_grad wrt hidden and weight, rows (B*T) {args.rows}, D {args.hidden}, "
        f"chunk {args.chunk}; median of {args.reps}; temp = memory_analysis().temp_size_in_bytes"
    )
    # The dtype linear's matmuls take their operands in on this machine (a probe per dtype,
    # numerics.linear_operand_dtype): 16-bit as they are where the backend accumulates them
    # in float32, else converted to float32.
    dots = ", ".join(
        f"{name} -> {numerics.linear_operand_dtype(jnp.dtype(name)).name}"
        for name in args.dtypes.split(",")
    )
    print(f"linear's dot operands on {jax.default_backend()}: {dots}")
    header = "| V | dtype | program | time (s) | vs optax | vs linear | temp (MiB) | vs optax |"
    print(header)
    print("|" + "---|" * 8)
    only = None if args.programs is None else args.programs.split(",")
    for vocab in (int(v) for v in args.vocab.split(",")):
        for name in args.dtypes.split(","):
            dtype = jnp.dtype(name)
            got = bench(args.rows, args.hidden, vocab, dtype, args.chunk, args.reps, only)
            base_t, base_m = got["optax"]
            linear_t = got["linear"][0]
            for program, (sec, mem) in got.items():
                print(
                    f"| {vocab} | {dtype.name} | {program} | {sec:.3f} | {sec / base_t:.2f}x | "
                    f"{sec / linear_t:.2f}x | {mem / 2**20:.0f} | {mem / base_m:.3f}x |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
