"""Watch Softmax Collapse arrive in your own training loop, then make it go away.

A plain JAX + optax loop (no grokbench engine): a small MLP memorises random labels in
bfloat16 compute (float32 parameters, as mixed-precision trainers run), with Adam. Every
`--log-every` steps it logs `numerics.collapse_stats` of the batch: the fraction of
examples past bf16's precision cliff (m >= 5.545), the fraction whose target gradient is
exactly 0, and how far each row's gradient is from summing to 0. It trains twice, once
with optax's cross-entropy, once with `numerics.cross_entropy`, from the same start.

    python examples/collapse_monitor.py                # about 20 s on a 2-core CPU
    python examples/collapse_monitor.py --steps 2000   # longer

With optax's loss, once margins pass the cliff the target gradients of those examples
are exactly 0 while their other gradients are not: the rows stop summing to zero. With
the fixed loss no target gradient is 0 at any margin.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import jax
import jax.numpy as jnp
import optax
from tqdm import tqdm

import numerics

LOSSES = {
    "optax": optax.softmax_cross_entropy_with_integer_labels,
    "numerics": numerics.cross_entropy,
}


def init(key, sizes):
    """An MLP's float32 parameters: one (weight, bias) per layer, He init."""
    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for k, (n_in, n_out) in zip(keys, itertools.pairwise(sizes), strict=True):
        params.append((jax.random.normal(k, (n_in, n_out)) * (2 / n_in) ** 0.5, jnp.zeros(n_out)))
    return params


def forward(params, x):
    """The MLP in bfloat16 compute: its logits are bfloat16."""
    h = x.astype(jnp.bfloat16)
    for i, (w, b) in enumerate(params):
        h = h @ w.astype(jnp.bfloat16) + b.astype(jnp.bfloat16)[None, :]
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    return h


def make_step(loss_fn, optimizer):
    @jax.jit
    def step(params, opt_state, x, y):
        # The monitor hook: the logits' gradient falls out of the backward pass.
        logits, pullback = jax.vjp(lambda p: forward(p, x), params)
        loss, dlogits = jax.value_and_grad(lambda z: loss_fn(z, y).mean())(logits)
        (grads,) = pullback(dlogits)
        stats = numerics.collapse_stats(logits, y, grads=dlogits * len(y))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, stats

    return step


def train(loss_name, *, steps, examples, classes, width, lr, seed, log_every, out=sys.stdout):
    """Train one loss; print the stats every `log_every` steps; return the last stats."""
    kx, ky, kp = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, (examples, 32))
    y = jax.random.randint(ky, (examples,), 0, classes)
    params = init(kp, (32, width, width, classes))
    optimizer = optax.adam(lr)
    opt_state = optimizer.init(params)
    step = make_step(LOSSES[loss_name], optimizer)
    print(f"\n{loss_name} cross-entropy, bf16 logits (cliff 5.545):", file=out)
    print("  step  margin median  past cliff  zero target grad  max |sum g|", file=out)
    bar = tqdm(range(1, steps + 1), desc=loss_name, leave=False, disable=not out.isatty())
    for i in bar:
        params, opt_state, _, stats = step(params, opt_state, x, y)
        if i % log_every == 0 or i == steps:
            s = {name: float(v) for name, v in stats._asdict().items()}
            print(
                f"  {i:4d}  {s['margin_median']:13.2f}  {s['frac_past_cliff']:10.2f}"
                f"  {s['frac_zero_target_grad']:16.2f}  {s['grad_sum_max']:11.2e}",
                file=out,
            )
    return {name: float(v) for name, v in stats._asdict().items()}


def main(argv=None, out=sys.stdout) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="training steps per loss")
    parser.add_argument("--examples", type=int, default=256, help="training examples")
    parser.add_argument("--classes", type=int, default=16, help="number of classes")
    parser.add_argument("--width", type=int, default=128, help="hidden width")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=100)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.examples < 1 or args.classes < 2 or args.width < 1:
        parser.error("--steps, --examples and --width must be >= 1, --classes >= 2")
    settings = {k: v for k, v in vars(args).items()}
    return {name: train(name, **settings, out=out) for name in LOSSES}


if __name__ == "__main__":
    main()
