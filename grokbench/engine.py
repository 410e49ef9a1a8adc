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
from grokbench import fourier
from grokbench import metrics as metrics_lib
from grokbench.config import RunConfig, group_key, xla_options
from grokbench.optimizers import Hyper, apply, orthograd, scale_by_direction
from grokbench.precision import Precision, get_precision, precision_scope
from tasks import build_model, clear_compiled_caches, compiled_cache, modular_split

__all__ = ["clear_compiled", "prepare", "step_flops", "train"]

_LOSS_FUNCTIONS: dict[str, Callable[..., jax.Array]] = {
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
    params: dict[str, np.ndarray] | None = None  # final parameters (a distillation teacher's)
    backend: str | None = None  # `jax.default_backend()` where it trained (None: not known)


class Data(NamedTuple):
    """A run's split of its modular task (`tasks.modular_split`), as device arrays."""

    x_train: jax.Array
    y_train: jax.Array
    x_test: jax.Array
    y_test: jax.Array


def load_data(cfg: RunConfig) -> Data:
    """The training and test split of `cfg`'s task (in the current precision scope)."""
    return Data(*(jnp.asarray(a) for a in modular_split(cfg.modular_task())))


def data_axis(cfg: RunConfig) -> int | None:
    """The run axis of a batch's `Data`: 0 when every run draws its own split
    (`split=per_seed`: the runs' splits stacked), None when the runs share one split."""
    return 0 if cfg.split == "per_seed" else None


def load_batch_data(configs: Sequence[RunConfig]) -> Data:
    """The data of a batch of one shape group: one shared split, or one split per run
    stacked along a leading axis (see `data_axis`)."""
    if data_axis(configs[0]) is None:
        return load_data(configs[0])
    splits = [modular_split(c.modular_task()) for c in configs]
    return Data(*(jnp.asarray(np.stack(cols)) for cols in zip(*splits, strict=True)))


def shard_batch(runs: Any, data: Data, axis: int | None) -> tuple[Any, Data]:
    """`shard_runs` of a batch: `data` goes with the runs when it has a run axis."""
    if axis is None:
        return shard_runs(runs, data)
    (runs, data), _ = shard_runs((runs, data))
    return runs, data


def _warmup(lr: jax.Array, count: jax.Array, warmup_steps: int) -> jax.Array:
    """`lr` x min(count / warmup_steps, 1) at the update after `count` updates (Nanda et al.'s
    `LambdaLR(min(step / 10, 1))`: the first update runs at lr 0); `lr` itself when 0."""
    if not warmup_steps:
        return lr
    factor = optax.linear_schedule(0.0, 1.0, warmup_steps)(count)
    return lr * factor.astype(lr.dtype)


def stack_hyper(configs: Sequence[RunConfig]) -> Hyper:
    """The runs' optimizer numbers as (R,) arrays in JAX's default float (float64 only inside
    an fp64 or x64 scope); each optimizer rounds them to the parameter dtype where it uses them."""
    return Hyper(*(jnp.asarray([getattr(c, f) for c in configs]) for f in Hyper._fields))


# Stand-ins for the vmapped fields, which reach the program as arrays, never as constants.
_NEUTRAL = {"seed": 0, "lr": 1.0, "b1": 0.0, "b2": 0.0, "eps": 0.0, "weight_decay": 0.0}


def static_config(cfg: RunConfig) -> RunConfig:
    """`cfg` with its `VMAPPED` fields neutral: the key of a batch's compiled program."""
    return dataclasses.replace(cfg, **_NEUTRAL)


def chunk_evals(n_evals: int, chunk_steps: int, eval_every: int) -> int:
    """Evaluation blocks per compiled chunk: the largest divisor of n_evals that fits."""
    target = max(1, chunk_steps // eval_every)
    return max(d for d in range(1, min(n_evals, target) + 1) if n_evals % d == 0)


def direction_tx(cfg: RunConfig, h: Hyper) -> optax.GradientTransformation:
    """The optimizer direction of `cfg` with the numbers `h` (adam's weight_decay is 0),
    after ⊥Grad (`optimizers.orthograd`) when `cfg.orthograd`."""
    direction = scale_by_direction(cfg.optimizer, h.b1, h.b2, h.eps, cfg.track_sqrt_v)
    return optax.chain(orthograd(), direction) if cfg.orthograd else direction


def build_forward(cfg: RunConfig, policy: Precision, fast: bool) -> tuple[Any, Callable]:
    """(model, forward): `cfg`'s model, and forward(params, x) -> logits in `policy`'s
    compute dtype (parameters cast from their storage dtype first).

    The model is traced under `jax.default_matmul_precision(policy.matmul_precision)`:
    every dot of an fp32 or fp64 run carries precision HIGHEST in the jitted program (and
    so do their transposes in the backward pass), whatever the backend's default.
    `cfg.matmul_precision` ('tf32', 'bf16') rounds those dots' operands explicitly
    (`tasks.einsum`), so an emulated run computes the same bits on every backend.
    """
    model = build_model(cfg.model_config(), fast=fast)

    def forward(params: Any, x: jax.Array) -> jax.Array:
        with jax.default_matmul_precision(policy.matmul_precision):
            return model.apply(policy.cast_to_compute(params), x)

    return model, forward


def _build(cfg: RunConfig, policy: Precision, fast: bool) -> tuple[Callable, Callable, Callable]:
    """Per-run functions: init_one(seed, h) -> state; train_step(state, h, data) -> state,
    metrics; chunk_one(state, h, data, n_blocks) -> state, (step metrics, test metrics)."""
    model, forward = build_forward(cfg, policy, fast)
    objective = _LOSS_FUNCTIONS[cfg.loss]
    # With `eq_output` the loss sees all p + 1 logits; accuracy and margins, as Nanda et
    # al.'s metrics, the p residues only.
    residues = (lambda z: z[:, : cfg.p]) if cfg.eq_output else (lambda z: z)
    measure = fourier.measures_fn(cfg, lambda p, x: residues(forward(p, x)))

    def init_one(seed: jax.Array, h: Hyper) -> tuple[Any, Any]:
        params = model.init(jax.random.key(seed), policy.param_dtype)
        return params, direction_tx(cfg, h).init(params)

    def train_step(state: tuple, h: Hyper, data: Data) -> tuple[tuple, dict]:
        params, opt_state = state
        # One forward pass gives both the logits (for the metrics) and, through the pullback,
        # the parameter gradient; the logit gradient falls out on the way.
        logits, pullback = jax.vjp(lambda p: forward(p, data.x_train), params)
        loss, dlogits = jax.value_and_grad(lambda z: jnp.mean(objective(z, data.y_train)))(logits)
        (grads,) = pullback(dlogits)
        # The direction itself is observable: the `adam_step` metric.
        new_params, direction, opt_state = apply(
            direction_tx(cfg, h),
            grads,
            opt_state,
            params,
            learning_rate=_warmup(
                h.lr, optax.tree_utils.tree_get(opt_state, "count"), cfg.warmup_steps
            ),
            weight_decay=h.weight_decay,
        )
        step = metrics_lib.step_metrics(
            logits_NxK=residues(logits),
            dlogits_NxK=residues(dlogits),
            loss=loss,
            labels_N=data.y_train,
            direction=direction,
            params=params,
            cliff_dtype=policy.compute_dtype,
        )
        return (new_params, opt_state), step

    def evaluate(params: Any, data: Data) -> dict:
        logits = forward(params, data.x_test)
        loss = jnp.mean(objective(logits, data.y_test))
        out = metrics_lib.eval_metrics(residues(logits), loss, data.y_test)
        if measure is None:
            return out
        with jax.default_matmul_precision(policy.matmul_precision):  # as `forward`'s dots
            return {**out, **measure(params, data.x_train)}

    def chunk_one(state: tuple, h: Hyper, data: Data, n_blocks: int) -> tuple[tuple, tuple]:
        def block(state: tuple, _: None) -> tuple[tuple, tuple]:
            state, steps = jax.lax.scan(
                lambda s, _: train_step(s, h, data), state, None, length=cfg.eval_every
            )
            return state, (steps, evaluate(state[0], data))

        return jax.lax.scan(block, state, None, length=n_blocks)

    return init_one, train_step, chunk_one


def check_batch(configs: Sequence[RunConfig]) -> RunConfig:
    """The first of `configs`, which must be non-empty and share one `group_key`."""
    if not configs:
        raise ValueError("train needs at least one config")
    first = configs[0]
    keys = {group_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError("configs in one batch must differ only in grokbench.config.VMAPPED")
    return first


class _Prepared(NamedTuple):
    """A batch ready to run: initial state, per-run hyperparameters, data, the jitted chunk."""

    state: tuple
    hyper: Hyper
    data: Data
    run_chunk: Callable  # jitted: (state, hyper, data, n_blocks) -> (state, (steps, tests))
    n_blocks: int  # evaluation blocks per chunk (static argument of run_chunk)
    n_chunks: int
    n_runs: int  # the real runs: the first n_runs of the (possibly padded) batch axis


def prepare(
    configs: Sequence[RunConfig], chunk_steps: int = 1000, fast: bool = True, shard: bool = True
) -> _Prepared:
    """Build and initialize a batch; call inside `precision_scope(configs[0].precision)`."""
    cfg = check_batch(configs)
    n_runs = len(configs)
    n_evals = cfg.steps // cfg.eval_every
    n_blocks = chunk_evals(n_evals, chunk_steps, cfg.eval_every)
    seeds, hyper, data = _inputs(configs, shard)
    init, run_chunk = _compiled(static_config(cfg), fast)
    state = init(seeds, hyper)
    if shard:
        # init leaves a leaf that does not depend on the seed (the optimizer's step count)
        # replicated, and run_chunk returns it sharded: without this the second chunk would
        # recompile the whole program, single-threaded, a second time.
        state, _ = shard_runs(state)
    return _Prepared(state, hyper, data, run_chunk, n_blocks, n_evals // n_blocks, n_runs)


def _inputs(configs: Sequence[RunConfig], shard: bool) -> tuple[jax.Array, Hyper, Data]:
    """(seeds, hyper, data) of a batch as its programs take them: padded and sharded when
    `shard`."""
    cfg = configs[0]
    if shard:
        configs = _pad(configs, jax.local_device_count())
    data = load_batch_data(configs)
    hyper = stack_hyper(configs)
    seeds = jnp.asarray([c.seed for c in configs], jnp.uint32)
    if shard:
        (seeds, hyper), data = shard_batch((seeds, hyper), data, data_axis(cfg))
    return seeds, hyper, data


def _program_text(
    configs: Sequence[RunConfig], chunk_steps: int = 1000, fast: bool = True, shard: bool = True
) -> str:
    """The StableHLO of the programs that train `configs` (init, then one chunk), as jax
    lowers them before XLA compiles them for this CPU: the same text on every machine, so a
    change of the computation shows in it wherever it runs (the golden tests hash it)."""
    cfg = check_batch(configs)
    with precision_scope(cfg.precision):
        batch = prepare(configs, chunk_steps, fast, shard)
        seeds, hyper, _ = _inputs(configs, shard)
        init, _ = _compiled(static_config(cfg), fast)
        chunk = batch.run_chunk.lower(batch.state, batch.hyper, batch.data, batch.n_blocks)
        return init.lower(seeds, hyper).as_text() + "\n" + chunk.as_text()


def _pad(configs: Sequence[RunConfig], n_devices: int) -> list[RunConfig]:
    """Repeat the last run until the batch divides over the devices (results are dropped).

    A batch of 3 on 2 host devices then runs 2 + 2 in parallel instead of 3 on one device:
    the padded run costs a core that would otherwise idle. A single run is left alone.
    """
    configs = list(configs)
    if n_devices < 2 or len(configs) < 2:
        return configs
    return configs + [configs[-1]] * (-len(configs) % n_devices)


def shard_runs(runs: Any, shared: Any = None) -> tuple[Any, Any]:
    """Shard the leading (run) axis of `runs` over all local devices when it divides evenly;
    `shared` (the data) is then replicated. Otherwise both come back as they are.

    `prepare` pads the batch (`_pad`) so it divides whenever it has more than one run.

    On a CPU split into host devices (`grokbench run` makes one per core) each device runs
    its share of the batch on its own thread: the small per-run ops of this model leave
    the cores of a single device mostly idle. jit propagates the sharding through the scan.
    """
    devices = jax.local_devices()
    if len(devices) < 2 or jax.tree.leaves(runs)[0].shape[0] % len(devices):
        return runs, shared
    mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
    on_runs = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.device_put(runs, on_runs), jax.device_put(shared, replicated)


@compiled_cache(maxsize=64)  # one shape group's programs each
def _compiled(static: RunConfig, fast: bool) -> tuple[Callable, Callable]:
    """The jitted (init, chunk) of a shape group, cached so later batches reuse compilations."""
    init_one, _, chunk_one = _build(static, get_precision(static.precision), fast)
    chunk = jax.vmap(chunk_one, in_axes=(0, 0, data_axis(static), None))
    options = compiler_options(static)
    init = jax.jit(jax.vmap(init_one), compiler_options=options)
    return init, jax.jit(chunk, static_argnums=3, compiler_options=options)


def compiler_options(static: RunConfig) -> dict[str, str]:
    """`grokbench.config.xla_options` on the CPU backend, where they were measured (their
    names are XLA CPU's); {} on any other backend. The run's hash carries them either way."""
    return xla_options(static) if jax.default_backend() == "cpu" else {}


def clear_compiled() -> None:
    """Forget every cached compiled program (`tasks.clear_compiled_caches`: the engine's and
    every other module's), so the next batch compiles from scratch (for timings)."""
    clear_compiled_caches()


def step_flops(configs: Sequence[RunConfig], fast: bool = True) -> float:
    """XLA's FLOP estimate for one training step of the whole batch (metrics included)."""
    cfg = check_batch(configs)
    with precision_scope(cfg.precision):
        batch = prepare(configs, fast=fast, shard=False)  # a sharded program counts per device
        _, train_step, _ = _build(cfg, get_precision(cfg.precision), fast)
        step = jax.jit(jax.vmap(train_step, in_axes=(0, 0, data_axis(cfg))))
        cost = step.lower(batch.state, batch.hyper, batch.data).compile().cost_analysis()
    if isinstance(cost, list | tuple):  # older jax: one dict per computation
        cost = cost[0]
    return float(cost["flops"])


def train(
    configs: Sequence[RunConfig],
    *,
    chunk_steps: int = 1000,
    progress: bool = True,
    fast: bool = True,
    desc: str | None = None,
    shard: bool = True,
    on_chunk: Callable[[int], object] | None = None,
) -> list[RunOutput]:
    """Train `configs` (one shape group) as one vmapped batch; metrics as NumPy columns.

    `shard=False` keeps the batch on one device; `on_chunk(steps)` is called as each chunk's
    metrics reach the host, with the steps every run advanced (for a caller's progress bar).
    """
    cfg = check_batch(configs)
    start = time.perf_counter()
    with precision_scope(cfg.precision):
        batch = prepare(configs, chunk_steps, fast, shard)
        steps_per_chunk = batch.n_blocks * cfg.eval_every
        bar = tqdm.tqdm(total=cfg.steps, unit="step", desc=desc, disable=not progress, leave=False)
        with bar:
            state, chunks = stream_chunks(
                lambda s: batch.run_chunk(s, batch.hyper, batch.data, batch.n_blocks),
                batch.state,
                batch.n_chunks,
                steps_per_chunk,
                bar,
                on_chunk,
            )
    seconds = time.perf_counter() - start
    final = jax.device_get(state[0])
    return [
        RunOutput(
            c,
            _columns(chunks, r, cfg.eval_every),
            seconds,
            jax.tree.map(lambda x, r=r: np.asarray(x[r]), final),
            jax.default_backend(),
        )
        for r, c in enumerate(configs)
    ]


def stream_chunks(
    run_chunk: Callable[[Any], tuple[Any, Any]],
    state: Any,
    n_chunks: int,
    steps_per_chunk: int,
    bar: tqdm.tqdm,
    on_chunk: Callable[[int], object] | None = None,
) -> tuple[Any, list]:
    """Run `state, out = run_chunk(state)` n_chunks times: (final state, the outs on the host).

    Each chunk is dispatched before the previous one's output is fetched, so the host copy
    overlaps with compute. As each output arrives, `bar` advances `steps_per_chunk` steps
    and `on_chunk(steps_per_chunk)` is called.
    """
    outs, pending = [], None

    def fetch() -> None:
        outs.append(jax.device_get(pending))
        bar.update(steps_per_chunk)
        if on_chunk is not None:
            on_chunk(steps_per_chunk)

    for _ in range(n_chunks):
        state, out = run_chunk(state)
        if pending is not None:
            fetch()
        pending = out
    fetch()
    return state, outs


def _columns(chunks: list[tuple], run: int, eval_every: int) -> dict[str, np.ndarray]:
    """Concatenate run `run`'s chunks: (blocks, eval_every) step metrics -> (steps,)."""
    steps = {
        name: np.concatenate([c[0][name][run].reshape(-1) for c in chunks])
        for name in metrics_lib.STEP_METRICS
    }
    tests = {name: np.concatenate([c[1][name][run] for c in chunks]) for name in chunks[0][1]}
    n_steps = len(steps["train_loss"])
    return {
        "step": np.arange(n_steps, dtype=np.int64),
        **steps,
        "test_step": eval_every * np.arange(1, len(tests["test_loss"]) + 1, dtype=np.int64),
        **tests,
    }
