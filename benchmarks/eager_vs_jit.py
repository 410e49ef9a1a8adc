"""Eager against jitted first calls of the public numerics functions: time and bit identity.

    python benchmarks/eager_vs_jit.py            # the table
    python benchmarks/eager_vs_jit.py --json     # the same as JSON

Issue 33 asked whether the public functions, called outside `jit`, could compile one
program per shape and dtype instead of one per operation, with results bit-identical to
today's. Each function's value and gradient (`logit_margin`: its value) is called once
eagerly and once through `jax.jit`, on fresh shapes and dtypes, in one process. The eager
first calls share XLA's per-operation programs: a function run after others with the same
shapes compiles little (the order below is the order they run). The jitted program is
compiled as one, and XLA fuses its operations and may contract a product and a sum into one
rounding, so its last bits can differ from the eager ones.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import numerics

SHAPES = ((4, 7), (16, 33), (3, 5, 100), (2, 1000))
DTYPES = ("float32", "bfloat16", "float16")


def _value_and_grad(fn):
    return lambda x, *rest: jax.value_and_grad(lambda z: fn(z, *rest).sum())(x)


def _with_options(z, labels):
    return numerics.cross_entropy(z, labels, z_loss=1e-4, soft_cap=30.0, label_smoothing=0.1)


FUNCTIONS = {
    "cross_entropy": (_value_and_grad(numerics.cross_entropy), "labels"),
    "cross_entropy (z-loss, cap, smoothing)": (_value_and_grad(_with_options), "labels"),
    "softmax": (_value_and_grad(numerics.softmax), None),
    "log_softmax": (_value_and_grad(numerics.log_softmax), None),
    "soft_target_cross_entropy": (_value_and_grad(numerics.soft_target_cross_entropy), "pair"),
    "kl_divergence": (_value_and_grad(numerics.kl_divergence), "pair"),
    "js_divergence": (_value_and_grad(numerics.js_divergence), "pair"),
    "logit_margin": (numerics.logit_margin, "labels"),
}


def _bits(tree) -> list[bytes]:
    return [np.atleast_1d(np.asarray(leaf)).tobytes() for leaf in jax.tree.leaves(tree)]


def _first_call(fn, args) -> tuple[list[bytes], float]:
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return _bits(out), time.perf_counter() - start


def measure(seed: int = 1, dtypes=DTYPES) -> dict[str, dict[str, float]]:
    """Per function: cases, bit-identical cases, summed eager and jitted first-call seconds."""
    rng = np.random.default_rng(seed)
    rows = {name: {"cases": 0, "identical": 0, "eager_s": 0.0, "jit_s": 0.0} for name in FUNCTIONS}
    for dtype in dtypes:
        for shape in SHAPES:
            x = jnp.asarray(rng.normal(size=shape) * 6, dtype)
            other = {
                "labels": jnp.asarray(rng.integers(0, shape[-1], shape[:-1])),
                "pair": jnp.asarray(rng.normal(size=shape) * 6, dtype),
            }
            for name, (fn, kind) in FUNCTIONS.items():
                args = (x,) if kind is None else (x, other[kind])
                eager, eager_s = _first_call(fn, args)
                jitted, jit_s = _first_call(jax.jit(fn), args)
                row = rows[name]
                row["cases"] += 1
                row["identical"] += eager == jitted
                row["eager_s"] += eager_s
                row["jit_s"] += jit_s
    return rows


def markdown(rows: dict[str, dict[str, float]]) -> str:
    lines = [
        "| function | jit bit-identical to eager | eager first calls (s) | jitted (s) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['identical']} of {r['cases']} | {r['eager_s']:.1f} | {r['jit_s']:.1f} |"
        )
    keys = ("cases", "identical", "eager_s", "jit_s")
    total = {k: sum(r[k] for r in rows.values()) for k in keys}
    lines.append(
        f"| all | {total['identical']} of {total['cases']} | {total['eager_s']:.1f} | "
        f"{total['jit_s']:.1f} |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--seed", type=int, default=1, help="the inputs' seed")
    parser.add_argument(
        "--dtypes", default=",".join(DTYPES), help="comma-separated (default: %(default)s)"
    )
    args = parser.parse_args()
    rows = measure(args.seed, tuple(args.dtypes.split(",")))
    print(json.dumps(rows, indent=2) if args.json else markdown(rows))


if __name__ == "__main__":
    main()
