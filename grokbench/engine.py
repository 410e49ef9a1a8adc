"""The training engine: runs that share shapes, batched with vmap, in one jitted scan per chunk.

A batch is a list of `RunConfig`s with equal `group_key` (they may differ in seed, lr, b1,
b2, eps and weight decay, which enter as per-run arrays). One compiled program trains the
whole batch for `evals_per_chunk * eval_every` steps: an outer `lax.scan` over evaluation
blocks, an inner `lax.scan` of `eval_every` full-batch steps, then the test evaluation.
Python runs once per chunk (to stream metrics to the host and tick the progress bar),
never per step. The next chunk is dispatched before the previous one's metrics are
fetched, so the host copy overlaps with compute.

Step t's metrics come from the logits of the forward pass that computes its gradient
(params after t updates, t = 0 .. steps - 1); test metrics are taken after
`eval_every`, 2 `eval_every`, ..., `steps` updates.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tqdm

import numerics
from grokbench import metrics as metrics_lib
from grokbench.config import RunConfig, group_key
from grokbench.optimizers import (
    add_decayed_weights,
    scale_by_adam,
    scale_by_laprop,
    scale_by_learning_rate,
)
from grokbench.precision import Precision, precision_scope
from tasks import build_model, modular_split

__all__ = ["LOSS_FUNCTIONS", "RunOutput", "chunk_evals", "train"]

LOSS_FUNCTIONS: dict[str, Callable[..., jax.Array]] = {
    "fixed": numerics.cross_entropy,
    "standard": numerics.standard.cross_entropy,
    "stablemax": numerics.stablemax_cross_entropy,
    "zero_sum": numerics.zero_sum_cross_entropy,
}
"""Per-example training objectives by `RunConfig.loss` name."""


@dataclasses.dataclass(frozen=True)
class RunOutput:
    """One trained run: its config, metric columns (NumPy) and the batch's wall-clock seconds."""

    config: RunConfig
    metrics: dict[str, np.ndarray]
    seconds: float


class _Hyper(NamedTuple):
    """Per-run hyperparameters: arrays of shape (R,) outside vmap, scalars inside."""

    lr: jax.Array
    b1: jax.Array
    b2: jax.Array
    eps: jax.Array
    weight_decay: jax.Array


class _Data(NamedTuple):
    x_train: jax.Array
    y_train: jax.Array
    x_test: jax.Array
    y_test: jax.Array


def chunk_evals(n_evals: int, chunk_steps: int, eval_every: int) -> int:
    """Evaluation blocks per compiled chunk: the largest divisor of n_evals that fits."""
    target = max(1, chunk_steps // eval_every)
    return max(d for d in range(1, min(n_evals, target) + 1) if n_evals % d == 0)


def _direction_tx(cfg: RunConfig, h: _Hyper) -> optax.GradientTransformation:
    if cfg.optimizer == "laprop":
        return scale_by_laprop(h.b1, h.b2, h.eps, track_sqrt_v=cfg.track_sqrt_v)
    return scale_by_adam(h.b1, h.b2, h.eps)  # adam: weight_decay is 0 (RunConfig checks)


def _build(cfg: RunConfig, policy: Precision, fast: bool) -> tuple[Callable, Callable]:
    """(init_one(seed, h) -> state, chunk_one(state, h, data, n_blocks) -> state, metrics)."""
    model = build_model(cfg.model_config(), fast=fast)
    objective = LOSS_FUNCTIONS[cfg.loss]
    cliff = numerics.precision_cliff(policy.compute_dtype)

    def init_one(seed: jax.Array, h: _Hyper) -> tuple[Any, Any]:
        params = model.init(jax.random.key(seed), policy.param_dtype)
        return params, _direction_tx(cfg, h).init(params)

    def forward(params: Any, x: jax.Array) -> jax.Array:
        return model.apply(policy.cast_to_compute(params), x)

    def train_step(state: tuple, h: _Hyper, data: _Data) -> tuple[tuple, dict]:
        params, opt_state = state
        # One forward pass gives both the logits (for the metrics) and, through the pullback,
        # the parameter gradient; the logit gradient falls out on the way.
        logits, pullback = jax.vjp(lambda p: forward(p, data.x_train), params)
        loss, dlogits = jax.value_and_grad(lambda z: jnp.mean(objective(z, data.y_train)))(logits)
        (grads,) = pullback(dlogits)
        # AdamW/LaProp as the chain direction -> + wd * params -> * -lr (grokbench.optimizers),
        # unrolled here so the direction itself is observable (the `adam_step` metric).
        direction, opt_state = _direction_tx(cfg, h).update(grads, opt_state)
        decayed, _ = add_decayed_weights(h.weight_decay).update(
            direction, optax.EmptyState(), params
        )
        updates, _ = scale_by_learning_rate(h.lr).update(decayed, optax.EmptyState())
        new_params = optax.apply_updates(params, updates)
        step = metrics_lib.step_metrics(
            logits_NxK=logits,
            dlogits_NxK=dlogits,
            loss=loss,
            labels_N=data.y_train,
            direction=direction,
            params=params,
            cliff=cliff,
        )
        return (new_params, opt_state), step

    def evaluate(params: Any, data: _Data) -> dict:
        logits = forward(params, data.x_test)
        loss = jnp.mean(objective(logits, data.y_test))
        return metrics_lib.eval_metrics(logits, loss, data.y_test)

    def chunk_one(state: tuple, h: _Hyper, data: _Data, n_blocks: int) -> tuple[tuple, tuple]:
        def block(state: tuple, _: None) -> tuple[tuple, tuple]:
            state, steps = jax.lax.scan(
                lambda s, _: train_step(s, h, data), state, None, length=cfg.eval_every
            )
            return state, (steps, evaluate(state[0], data))

        return jax.lax.scan(block, state, None, length=n_blocks)

    return init_one, chunk_one


def _check_batch(configs: Sequence[RunConfig]) -> RunConfig:
    if not configs:
        raise ValueError("train needs at least one config")
    first = configs[0]
    keys = {group_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError("configs in one batch must differ only in grokbench.config.VMAPPED")
    return first


def train(
    configs: Sequence[RunConfig],
    *,
    chunk_steps: int = 1000,
    progress: bool = True,
    fast: bool = True,
    desc: str | None = None,
) -> list[RunOutput]:
    """Train `configs` (one shape group) as one vmapped batch; metrics as NumPy columns."""
    cfg = _check_batch(configs)
    n_evals = cfg.steps // cfg.eval_every
    n_blocks = chunk_evals(n_evals, chunk_steps, cfg.eval_every)
    start = time.perf_counter()
    with precision_scope(cfg.precision) as policy:
        data_np = modular_split(cfg.modular_task())
        data = _Data(*(jnp.asarray(a) for a in data_np))
        # Hyperparameters in JAX's default float (float64 only inside an fp64 scope); each
        # optimizer rounds them to the parameter dtype where it uses them.
        h = _Hyper(
            *(jnp.asarray([getattr(c, f) for c in configs]) for f in _Hyper._fields)
        )
        seeds = jnp.asarray([c.seed for c in configs], jnp.uint32)
        init_one, chunk_one = _build(cfg, policy, fast)
        state = jax.jit(jax.vmap(init_one))(seeds, h)
        run_chunk = jax.jit(
            jax.vmap(chunk_one, in_axes=(0, 0, None, None)), static_argnums=3
        )
        chunks: list[tuple] = []
        bar = tqdm.tqdm(
            total=cfg.steps, unit="step", desc=desc, disable=not progress, leave=False
        )
        with bar:
            pending = None
            for _ in range(n_evals // n_blocks):
                state, out = run_chunk(state, h, data, n_blocks)
                if pending is not None:  # fetch the previous chunk while this one runs
                    chunks.append(jax.device_get(pending))
                    bar.update(n_blocks * cfg.eval_every)
                pending = out
            chunks.append(jax.device_get(pending))
            bar.update(n_blocks * cfg.eval_every)
    seconds = time.perf_counter() - start
    return [
        RunOutput(c, _columns(chunks, r, cfg.eval_every), seconds) for r, c in enumerate(configs)
    ]


def _columns(chunks: list[tuple], run: int, eval_every: int) -> dict[str, np.ndarray]:
    """Concatenate run `run`'s chunks: (blocks, eval_every) step metrics -> (steps,)."""
    steps = {
        name: np.concatenate([c[0][name][run].reshape(-1) for c in chunks])
        for name in metrics_lib.STEP_METRICS
    }
    tests = {
        name: np.concatenate([c[1][name][run] for c in chunks])
        for name in metrics_lib.TEST_METRICS
    }
    n_steps = len(steps["train_loss"])
    return {
        "step": np.arange(n_steps, dtype=np.int64),
        **steps,
        "test_step": eval_every * np.arange(1, len(tests["test_loss"]) + 1, dtype=np.int64),
        **tests,
    }
