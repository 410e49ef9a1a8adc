"""Distillation runs (fig7): a student started as its teacher, trained on its soft targets.

A `RunConfig` with `teacher_steps > 0` is a distillation run. Its teacher is the ordinary run
`teacher_config(cfg)` (same task, model and seed; the lab's reference AdamW recipe, fixed CE,
fp32), trained by `grokbench.engine` and cached in the store with its final parameters
(params.npz). The student starts from exactly those weights, cast to the run's parameter
dtype, and trains with the run's optimizer on soft-target CE at temperature T against the
teacher's logits on the training inputs (`tasks.DISTILL_LOSSES`: `fixed` or `standard`), or,
with `distill_objective='kl'`, on the KL divergence KL(p || q) (`tasks.DISTILL_OBJECTIVES`).

The soft targets are the student's own logits at step 0. Separately compiled programs of the
fast forward pass do not agree to the last bit (measured at p = 53: 2,801 of the 1404 x 53
fp32 logits differ, by up to 4e-7, between a plain jit and the training step's vjp),
and any such gap is a gradient the fixed loss rightly follows. Capturing z_T from the
training step itself makes z_S = z_T at step 0 hold exactly, so the residual gradient
measured there is the loss's own and nothing else.

Like the engine, one jitted program trains a batch of runs (vmapped over seeds, i.e.
teachers, and the optimizer's numbers) for a chunk of steps in a `lax.scan`; Python runs once
per chunk. The program runs with x64 enabled so the KL metric is float64 in every precision;
the student itself computes in its own dtypes (parameters, logits, loss and Adam state; only
Adam's bias corrections 1 - b^t are formed in float64 and then rounded, as in any x64 scope).
`experiment.run_configs` trains distillation runs here, in this process, before it hands the
other runs to its executor.

Per-step metrics (float64; step t uses the parameters after t updates):

- `train_loss`: the objective as the step computed it (mean soft-target CE, or mean KL).
- `kl`: mean over training inputs of KL(p_T || q_S) at temperature T (`tasks.kl_divergence`:
  float64 from the logits, no cancellation; exactly 0 while z_S = z_T).
- `logit_grad_max`: max over examples and classes of |d loss_i / d(z_S / T)|, the loss's
  q - p; at step 0 the residual gradient of Softmax Cancellation.
- `param_distance`: global L2 norm of theta_S - theta_T (parameter dtype, widened exactly).
- `adam_step`: RMS of the optimizer direction m_hat / (sqrt(v_hat) + eps): ~1 once the
  residual exceeds eps, when Adam turns it into steps of size lr.
- `train_acc`, `margin_mean`: accuracy and mean logit margin on the training labels.
- `test_acc`, `test_kl`: accuracy on the test split and KL to the teacher there (`test_step`
  equals `step`: test metrics are taken every step, at the same parameters).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

import numerics
from grokbench import console, engine
from grokbench import metrics as metrics_lib
from grokbench.config import RunConfig, group_runs
from grokbench.engine import (
    Data,
    build_forward,
    check_batch,
    compiler_options,
    data_axis,
    direction_tx,
    load_batch_data,
    shard_batch,
    shard_runs,
    stack_hyper,
    static_config,
    stream_chunks,
)
from grokbench.optimizers import Hyper, apply
from grokbench.precision import Precision, get_precision
from grokbench.store import Store
from grokbench.summary import summarize
from grokbench.tables import summary_table
from tasks import DISTILL_OBJECTIVES, compiled_cache, kl_divergence

__all__ = ["teacher_config"]

_DISTILL_METRICS: tuple[str, ...] = (
    "train_loss",
    "kl",
    "logit_grad_max",
    "param_distance",
    "adam_step",
    "train_acc",
    "margin_mean",
    "test_acc",
    "test_kl",
)
"""Metrics recorded at every step of a distillation run (see the module docstring)."""

# The teacher shares everything that defines the function it computes with its student.
_TEACHER_FIELDS = (
    "task",
    "p",
    "train_fraction",
    "split_seed",
    "split",
    "model",
    "d_model",
    "n_heads",
    "d_mlp",
    "layer_norm",
    "init",
    "mlp_width",
    "activation",
    "mlp_init",
    "seed",
)
_TEACHER_EVAL_EVERY = 100  # the engine's default test cadence (gcd'ed with teacher_steps)


def teacher_config(cfg: RunConfig) -> RunConfig:
    """The ordinary run that trains `cfg`'s teacher: its task, model and seed, `teacher_steps`
    steps of the reference recipe (AdamW lr 1e-3, betas 0.9/0.98, eps 1e-8, wd 1, fixed CE,
    fp32)."""
    if not cfg.teacher_steps:
        raise ValueError("teacher_config needs a distillation run (teacher_steps > 0)")
    return RunConfig(
        **{name: getattr(cfg, name) for name in _TEACHER_FIELDS},
        steps=cfg.teacher_steps,
        eval_every=math.gcd(cfg.teacher_steps, _TEACHER_EVAL_EVERY),
    )


class _State(NamedTuple):
    """A student's loop state; `targets`/`test_targets` hold z_T once `captured` is set."""

    params: Any
    opt_state: Any
    targets: jax.Array  # (N, K) teacher logits on the training inputs
    test_targets: jax.Array  # (M, K) teacher logits on the test inputs
    captured: jax.Array  # bool


def _build(cfg: RunConfig, policy: Precision, fast: bool) -> tuple[Callable, Callable]:
    """Per-run functions: init_one(teacher, h, data) -> (state, anchor) and
    chunk_one(state, anchor, h, data, n_steps) -> (state, per-step metrics)."""
    _, forward = build_forward(cfg, policy, fast)
    objective = DISTILL_OBJECTIVES[cfg.distill_objective][cfg.loss]
    temperature = cfg.temperature

    def init_one(teacher: Any, h: Hyper, data: Data) -> tuple[_State, Any]:
        params = policy.cast_to_param(teacher)  # the student *is* the teacher, in its dtype
        k = cfg.model_config().num_classes
        dt = policy.compute_dtype
        state = _State(
            params,
            direction_tx(cfg, h).init(params),
            jnp.zeros((data.y_train.shape[0], k), dt),
            jnp.zeros((data.y_test.shape[0], k), dt),
            jnp.asarray(False),
        )
        return state, params

    def train_step(state: _State, anchor: Any, h: Hyper, data: Data) -> tuple[_State, dict]:
        params = state.params
        logits, pullback = jax.vjp(lambda p: forward(p, data.x_train), params)
        test_logits = forward(params, data.x_test)
        # Step 0 captures the teacher's logits from this very computation (module docstring).
        targets = jnp.where(state.captured, state.targets, logits)
        test_targets = jnp.where(state.captured, state.test_targets, test_logits)
        targets = jax.lax.stop_gradient(targets)
        loss, dlogits = jax.value_and_grad(
            lambda z: jnp.mean(objective(z, targets, temperature=temperature))
        )(logits)
        (grads,) = pullback(dlogits)
        new_params, direction, opt_state = apply(
            direction_tx(cfg, h),
            grads,
            state.opt_state,
            params,
            learning_rate=h.lr,
            weight_decay=h.weight_decay,
        )
        # The mean's 1/N and the tempering's 1/T undone: one example's q - p.
        scale = jnp.asarray(logits.shape[0] * temperature, jnp.float64)
        distance = jax.tree.map(
            lambda a, b: a.astype(jnp.float64) - b.astype(jnp.float64), params, anchor
        )
        sq_distance, _ = metrics_lib.sum_squares(distance, jnp.float64)
        sq_direction, n_params = metrics_lib.sum_squares(direction, jnp.float64)
        z64 = logits.astype(jnp.float64)  # widening is exact
        metrics = {
            "train_loss": loss.astype(jnp.float64),
            "kl": jnp.mean(kl_divergence(logits, targets, temperature)),
            "logit_grad_max": jnp.max(jnp.abs(dlogits.astype(jnp.float64))) * scale,
            "param_distance": jnp.sqrt(sq_distance),
            "adam_step": jnp.sqrt(sq_direction / n_params),
            "train_acc": metrics_lib.accuracy(z64, data.y_train, jnp.float64),
            "margin_mean": jnp.mean(numerics.logit_margin(z64, data.y_train)),
            "test_acc": metrics_lib.accuracy(
                test_logits.astype(jnp.float64), data.y_test, jnp.float64
            ),
            "test_kl": jnp.mean(kl_divergence(test_logits, test_targets, temperature)),
        }
        new_state = _State(new_params, opt_state, targets, test_targets, jnp.asarray(True))
        return new_state, metrics

    def chunk_one(
        state: _State, anchor: Any, h: Hyper, data: Data, n_steps: int
    ) -> tuple[_State, dict]:
        return jax.lax.scan(
            lambda s, _: train_step(s, anchor, h, data), state, None, length=n_steps
        )

    return init_one, chunk_one


@compiled_cache(maxsize=32)
def _compiled(static: RunConfig, fast: bool) -> tuple[Callable, Callable]:
    """The jitted (init, chunk) of a shape group, cached so later batches reuse compilations."""
    init_one, chunk_one = _build(static, get_precision(static.precision), fast)
    axis = data_axis(static)
    options = compiler_options(static)
    init = jax.jit(jax.vmap(init_one, in_axes=(0, 0, axis)), compiler_options=options)
    chunk = jax.jit(
        jax.vmap(chunk_one, in_axes=(0, 0, 0, axis, None)),
        static_argnums=4,
        compiler_options=options,
    )
    return init, chunk


def _train(
    configs: Sequence[RunConfig],
    teachers: Sequence[Mapping[str, np.ndarray]],
    *,
    chunk_steps: int = 1000,
    progress: bool = True,
    fast: bool = True,
    desc: str | None = None,
    on_chunk: Callable[[int], object] | None = None,
) -> list[engine.RunOutput]:
    """Distil `configs` (one shape group), each from its teacher's parameters, as one batch.

    `on_chunk(steps)` is called as each chunk's metrics reach the host (as in `engine.train`).
    """
    cfg = check_batch(configs)
    if len(configs) != len(teachers):
        raise ValueError("train needs one teacher per config")
    if not cfg.teacher_steps:
        raise ValueError("configs must be distillation runs (teacher_steps > 0)")
    n_steps = engine.chunk_evals(cfg.steps, chunk_steps, 1)
    start = time.perf_counter()
    # x64 on for every precision: the metrics are float64; the student keeps its own dtypes.
    with jax.enable_x64(True):
        data = load_batch_data(configs)
        stacked = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *teachers)
        (stacked, hyper), data = shard_batch((stacked, stack_hyper(configs)), data, data_axis(cfg))
        init, run_chunk = _compiled(static_config(cfg), fast)
        state, anchor = init(stacked, hyper, data)
        state, _ = shard_runs(state)  # as run_chunk returns it (engine.prepare)
        bar = tqdm.tqdm(total=cfg.steps, unit="step", desc=desc, disable=not progress, leave=False)
        with bar:
            state, chunks = stream_chunks(
                lambda s: run_chunk(s, anchor, hyper, data, n_steps),
                state,
                cfg.steps // n_steps,
                n_steps,
                bar,
                on_chunk,
            )
        final = jax.device_get(state.params)
    seconds = time.perf_counter() - start
    outputs = []
    for r, c in enumerate(configs):
        columns = {name: np.concatenate([chunk[name][r] for chunk in chunks]) for name in chunks[0]}
        step = np.arange(cfg.steps, dtype=np.int64)
        metrics = {"step": step, "test_step": step, **columns}
        params = jax.tree.map(lambda x, r=r: np.asarray(x[r]), final)
        outputs.append(engine.RunOutput(c, metrics, seconds, params, jax.default_backend()))
    return outputs


def _train_teachers(
    configs: Sequence[RunConfig],
    store: Store,
    *,
    progress: bool = True,
    chunk_steps: int = 1000,
    fast: bool = True,
) -> dict[RunConfig, dict[str, np.ndarray]]:
    """The final parameters of each teacher run in `configs`: loaded from the store, or
    trained by the engine (the `grokbench run` path) and stored with them."""
    unique = list(dict.fromkeys(configs))
    missing = [cfg for cfg in unique if store.load_params(cfg) is None]
    groups = group_runs(missing)
    desc = f"{console.plural(len(missing), 'teacher')} in {console.plural(len(groups), 'program')}"
    with console.bar(sum(cfg.steps for cfg in missing), desc, progress) as bar:
        for group in groups:
            for out in engine.train(
                group,
                chunk_steps=chunk_steps,
                progress=False,
                fast=fast,
                on_chunk=console.advance(bar, len(group)),
            ):
                summary = summarize(out.config, out.metrics, out.seconds, out.backend)
                store.save(out.config, out.metrics, summary, params=out.params)
    teachers = {cfg: store.load_params(cfg) for cfg in unique}
    lost = [store.run_dir(cfg) for cfg, params in teachers.items() if params is None]
    if lost:
        raise RuntimeError(f"teacher parameters did not read back from {lost}")
    return teachers


def run_students(
    configs: Sequence[RunConfig],
    store: Store,
    *,
    progress: bool = True,
    chunk_steps: int = 1000,
    fast: bool = True,
) -> dict[RunConfig, dict]:
    """Train the distillation runs `configs` (teachers first) and store them; their summaries."""
    if not configs:
        return {}
    kw = {"progress": progress, "chunk_steps": chunk_steps, "fast": fast}
    teachers = _train_teachers([teacher_config(c) for c in configs], store, **kw)
    groups = group_runs(list(dict.fromkeys(configs)))
    summaries = {}
    n_runs = sum(len(group) for group in groups)
    desc = f"{console.plural(n_runs, 'student')} in {console.plural(len(groups), 'program')}"
    total = sum(cfg.steps for group in groups for cfg in group)
    with console.bar(total, desc, progress) as bar:
        for group in groups:
            outputs = _train(
                group,
                [teachers[teacher_config(c)] for c in group],
                chunk_steps=chunk_steps,
                progress=False,
                fast=fast,
                on_chunk=console.advance(bar, len(group)),
            )
            for out in outputs:
                summary = summarize(out.config, out.metrics, out.seconds, out.backend)
                store.save(out.config, out.metrics, summary)
                summaries[out.config] = summary
    return summaries


def format_table(summaries: Sequence[dict]) -> str:
    """One line per distillation run: the keys that vary, then residual, KL, drift, accuracy."""
    return summary_table(
        summaries,
        [
            ("residual", "residual_gradient", ".2e"),
            ("kl_final", "kl_final", ".2e"),
            ("kl_max", "kl_max", ".2e"),
            ("max_dist", "max_param_distance", ".2e"),
            ("test_acc", "test_accuracy", ".4f"),
            ("min_acc", "min_test_accuracy", ".4f"),
        ],
    )
