"""Time of the fixed losses against the standard ones, gradient only and value_and_grad.

    python benchmarks/bench_cross_entropy.py [--rows 2048] [--classes 32768] [--reps 9]

Logits are 4 x standard normal, labels uniform, the teacher the logits plus 0.1 x
normal noise. Each function is jitted twice, as `jax.grad` and as
`jax.value_and_grad` of the mean loss (a training step often needs only the
gradient and logs the loss every N steps), compiled and warmed up first; then all
of them run interleaved (a, b, c, ..., a, b, c, ...) so machine noise hits them
alike, and the table reports medians, the ratio of medians and its verdict against
the bound `figures.report.paper.SLOWDOWN` states for each loss (the paper's "without meaningful
slowdown"; the reproduction report tests the same bounds on this script's --json output), in
both modes and both dtypes.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import optax

import numerics
from figures.report.paper import SLOWDOWN

MODES = {"grad": jax.grad, "value_and_grad": jax.value_and_grad}
BASELINE = {
    "optax CE": "optax CE",
    "fixed CE": "optax CE",
    "standard soft CE": "standard soft CE",
    "fixed soft CE": "standard soft CE",
}
BOUND = {
    "fixed CE": SLOWDOWN["cross_entropy"].value,
    "fixed soft CE": SLOWDOWN["soft_target_cross_entropy"].value,
}
"""Each fixed loss's bound over its baseline, from figures.report.paper (stated once, there)."""


def _standard_soft_target(student, teacher):
    # The formula users write: optax's soft-label CE on softmax(teacher).
    return optax.softmax_cross_entropy(student, jax.nn.softmax(teacher))


def key(name: str, mode: str) -> str:
    """The --json key: value_and_grad keeps the plain name (as before), grad adds ' (grad)'."""
    return name if mode == "value_and_grad" else f"{name} (grad)"


def _bench(rows: int, classes: int, reps: int, dtype) -> dict[str, float]:
    key_z, key_t, key_s = jax.random.split(jax.random.key(0), 3)
    logits = (4 * jax.random.normal(key_z, (rows, classes), jnp.float32)).astype(dtype)
    labels = jax.random.randint(key_t, (rows,), 0, classes)
    teacher = logits + (0.1 * jax.random.normal(key_s, (rows, classes))).astype(dtype)
    # Labels and teacher are jit arguments, not closed-over constants, so XLA
    # cannot constant-fold half the work away (or spend minutes trying).
    losses = {
        "optax CE": (optax.softmax_cross_entropy_with_integer_labels, labels),
        "fixed CE": (numerics.cross_entropy, labels),
        "standard soft CE": (_standard_soft_target, teacher),
        "fixed soft CE": (numerics.soft_target_cross_entropy, teacher),
    }
    fns = {}
    for mode, transform in MODES.items():
        for name, (loss, target) in losses.items():
            step = jax.jit(transform(lambda z, t, loss=loss: jnp.mean(loss(z, t))))
            fns[key(name, mode)] = lambda step=step, target=target: step(logits, target)
    for fn in fns.values():
        jax.block_until_ready(fn())  # compile
        jax.block_until_ready(fn())  # warm
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--classes", type=int, default=32768)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument(
        "--json",
        type=pathlib.Path,
        help="also write {'device': kind, dtype: {function: median s}} here "
        "(value_and_grad under the plain names, grad-only as 'NAME (grad)')",
    )
    args = parser.parse_args()
    medians = {}
    device = jax.devices()[0].device_kind
    print(
        f"mean loss on ({args.rows}, {args.classes}) logits, median of {args.reps} "
        f"interleaved runs; {device}"
    )
    print(
        f"{'dtype':<9} {'mode':<15} {'function':<17} {'median ms':>10} {'ratio':>7} "
        f"{'bound':>6}  verdict"
    )
    for dtype in args.dtypes:
        med = medians[dtype] = _bench(args.rows, args.classes, args.reps, jnp.dtype(dtype))
        for mode in MODES:
            for name, base in BASELINE.items():
                t = med[key(name, mode)]
                ratio = t / med[key(base, mode)]
                bound = BOUND.get(name)
                verdict = "" if bound is None else "holds" if ratio <= bound else "fails"
                shown = "" if bound is None else f"{bound:.2f}"
                print(
                    f"{dtype:<9} {mode:<15} {name:<17} {1e3 * t:>10.1f} {ratio:>7.3f} "
                    f"{shown:>6}  {verdict}"
                )
    if args.json:
        args.json.write_text(json.dumps({"device": device, **medians}, indent=1))


if __name__ == "__main__":
    main()
