"""Training of the quant-lab models: one jitted `lax.scan` chunk at a time, cached in the store.

A trained model is a `Store` record under ROOT/quant/train/HASH (HASH of the training fields
of its `QuantConfig`): config.json, params.npz, metrics.npz (the per-step training loss) and
summary.json, written atomically, summary last. A finished config is loaded, not retrained;
a damaged one (unreadable params) is trained again.
Variants that share an architecture (vanilla and clipped softmax: gamma is an array)
share one compiled training program.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from grokbench.optimizers import add_decayed_weights, scale_by_adam
from grokbench.quant.config import QuantConfig
from grokbench.store import Store
from tasks import compiled_cache
from tasks.quant import (
    MATMUL_PRECISION,
    Corpus,
    QuantModelConfig,
    decay_mask,
    lm_head_loss_sums,
    make_quant_batch,
    quant_model_hidden,
    quant_model_init,
    stack_batches,
)

__all__ = ["CHUNK", "time_steps"]

CHUNK = 100
"""Steps per compiled call: progress updates every few seconds, one compile per architecture."""


def _schedule(peak_lr: jax.Array, warmup: jax.Array, total: jax.Array, decay: jax.Array):
    """Linear warmup to `peak_lr`, then linear decay to 0 at `total` (BERT's and OPT's shape),
    or, where `decay` is false, constant at `peak_lr`."""

    def lr(count: jax.Array) -> jax.Array:
        step = count.astype(jnp.float32) + 1
        up = step / jnp.maximum(warmup, 1.0)
        down = (total - step + 1) / jnp.maximum(total - warmup, 1.0)
        down = jnp.where(decay, down, 1.0)
        return -peak_lr * jnp.clip(jnp.minimum(up, down), 0.0, 1.0)

    return lr


def _optimizer(
    mask: dict, b1: float, b2: float, eps: float, clip: float, hp: dict
) -> optax.GradientTransformation:
    """Clip, Adam, decoupled weight decay on `mask`, scheduled learning rate (BERT/OPT AdamW)."""
    return optax.chain(
        optax.clip_by_global_norm(clip),
        scale_by_adam(b1, b2, eps),
        optax.masked(add_decayed_weights(hp["weight_decay"]), mask),
        optax.scale_by_schedule(_schedule(hp["lr"], hp["warmup"], hp["steps"], hp["decay_lr"])),
    )


# The recipe, its quick variant and the ablations train 11 distinct (model, optimizer) keys.
@compiled_cache(maxsize=32)
def _programs(
    model: QuantModelConfig, mask_items: tuple, b1: float, b2: float, eps: float, clip: float
):
    """(init_opt, chunk): the jitted optimizer init and training chunk for one architecture."""
    mask = dict(mask_items)

    def loss_fn(params, batch, gamma, zeta):
        # The LM head and its loss in one pass (numerics.linear_cross_entropy), as language
        # models train; evaluation reads the materialized logits (tasks.quant._probe).
        tokens, segments, noise = batch["tokens"], batch["segments"], batch.get("bos_noise")
        h = quant_model_hidden(params, tokens, segments, model, gamma, zeta, bos_noise_BxD=noise)
        ce_sum, w_sum = lm_head_loss_sums(params, h, batch["labels"], batch["weights"])
        return ce_sum / jnp.maximum(w_sum, 1.0)

    @jax.jit
    def init_opt(params, hp):
        return _optimizer(mask, b1, b2, eps, clip, hp).init(params)

    @jax.jit
    def chunk(params, opt_state, batches, hp):
        opt = _optimizer(mask, b1, b2, eps, clip, hp)

        def step(carry, batch):
            params, opt_state = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, batch, hp["gamma"], hp["zeta"])
            updates, opt_state = opt.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), batches)
        return params, opt_state, losses

    return init_opt, chunk


def train_batches(
    cfg: QuantConfig,
    corpus: Corpus,
    rng: np.random.Generator,
    n: int,
    noise_rng: np.random.Generator | None = None,
) -> list[dict[str, np.ndarray]]:
    """`n` random training batches of `cfg`'s family and shape, drawn from `rng`, with
    `add_bos_noise` from `noise_rng` where `cfg.bos_noise` asks for it."""
    batches = [
        make_quant_batch(
            cfg.family, corpus.train_ids, rng, cfg.batch_size, cfg.seq_len, corpus.vocab_size
        )
        for _ in range(n)
    ]
    return add_bos_noise(cfg, batches, noise_rng)


def add_bos_noise(
    cfg: QuantConfig, batches: list[dict], noise_rng: np.random.Generator | None
) -> list[dict]:
    """Each batch with `bos_noise` (B, D) float32, `cfg.bos_noise` x N(0, 1) from `noise_rng`
    (the model scales it by its token table's RMS); unchanged when `cfg.bos_noise` is 0.

    The noise has a stream of its own, so a run with it sees the same text in the same order
    as the run without it."""
    if not cfg.bos_noise:
        return batches
    if noise_rng is None:
        raise ValueError("bos_noise needs a noise_rng")
    return [
        {
            **b,
            "bos_noise": np.float32(cfg.bos_noise)
            * noise_rng.standard_normal((len(b["tokens"]), cfg.d_model), np.float32),
        }
        for b in batches
    ]


def _run_dir(store: Store, cfg: QuantConfig) -> pathlib.Path:
    return store.root / "quant" / "train" / cfg.train_hash()


def _load_params(store: Store, cfg: QuantConfig) -> tuple[dict, dict] | None:
    """(params, summary) of a finished training run of `cfg`, or None (missing or damaged)."""
    record = store.read_record(_run_dir(store, cfg), cfg.train_dict(), ("params",))
    if record is None:
        return None
    summary, arrays = record
    return {name: jnp.asarray(w) for name, w in arrays["params"].items()}, summary


def _setup(cfg: QuantConfig, corpus: Corpus) -> tuple[dict, Callable, Callable, dict]:
    """(initial params, init_opt, chunk, hyperparameters) of `cfg`'s training run."""
    model = cfg.model_config(corpus.vocab_size)
    params = quant_model_init(jax.random.key(cfg.seed), model, cfg.resolved("pi_init"))
    mask = decay_mask(params, cfg.resolved("ln_weight_decay"))
    init_opt, chunk = _programs(
        model, tuple(sorted(mask.items())), cfg.b1, cfg.resolved("b2"), cfg.eps, cfg.clip_norm
    )
    hp = {
        "lr": jnp.float32(cfg.lr),
        "weight_decay": jnp.float32(cfg.resolved("weight_decay")),
        "warmup": jnp.float32(cfg.resolved("warmup_steps")),
        "steps": jnp.float32(cfg.steps),
        "decay_lr": jnp.asarray(cfg.decay_lr),
        "gamma": jnp.float32(cfg.resolved("gamma")),
        "zeta": jnp.float32(cfg.resolved("zeta")),
    }
    return params, init_opt, chunk, hp


def _program_text(cfg: QuantConfig, corpus: Corpus) -> str:
    """The StableHLO of `cfg`'s training (parameter init, optimizer init, one chunk) as jax
    lowers it before XLA compiles it for this CPU: the same text on every machine, so a change
    of the computation shows in it wherever it runs (the golden tests hash it)."""
    model = cfg.model_config(corpus.vocab_size)
    init = jax.jit(lambda key: quant_model_init(key, model, cfg.resolved("pi_init")))
    params, init_opt, chunk, hp = _setup(cfg, corpus)
    opt_state = jax.eval_shape(init_opt, params, hp)
    rng, noise_rng = np.random.default_rng([cfg.seed, 1]), np.random.default_rng([cfg.seed, 2])
    batches = stack_batches(train_batches(cfg, corpus, rng, min(CHUNK, cfg.steps), noise_rng))
    return "\n".join(
        (
            init.lower(jax.random.key(cfg.seed)).as_text(),
            init_opt.lower(params, hp).as_text(),
            chunk.lower(params, opt_state, batches, hp).as_text(),
        )
    )


def time_steps(cfg: QuantConfig, corpus: Corpus) -> dict[str, float]:
    """How long `cfg`'s training takes here, without storing anything: {"first_chunk_s": the
    first `CHUNK` steps with their compile, "step_s": seconds per step over the next `CHUNK`}.

    The programs are `train`'s (cached per architecture, the step count an array), so a
    `train` of any length that follows compiles nothing new."""
    params, init_opt, chunk, hp = _setup(cfg, corpus)
    opt_state = init_opt(params, hp)
    rng, noise_rng = np.random.default_rng([cfg.seed, 1]), np.random.default_rng([cfg.seed, 2])
    seconds = []
    for _ in range(2):
        batches = stack_batches(train_batches(cfg, corpus, rng, CHUNK, noise_rng))
        start = time.perf_counter()
        params, opt_state, _ = jax.block_until_ready(chunk(params, opt_state, batches, hp))
        seconds.append(time.perf_counter() - start)
    return {"first_chunk_s": seconds[0], "step_s": seconds[1] / CHUNK}


def train(
    cfg: QuantConfig, corpus: Corpus, store: Store, progress: bool = True
) -> tuple[dict, dict]:
    """Train `cfg` (or load it from the store): (params, summary)."""
    cached = _load_params(store, cfg)
    if cached is not None:
        return cached
    params, init_opt, chunk, hp = _setup(cfg, corpus)
    opt_state = init_opt(params, hp)
    rng = np.random.default_rng([cfg.seed, 1])  # data order: fixed per seed, apart from init
    noise_rng = np.random.default_rng([cfg.seed, 2])  # bos_noise: a stream of its own
    losses: list[np.ndarray] = []
    start = time.perf_counter()
    with tqdm(
        total=cfg.steps, desc=f"train {cfg.family}/{cfg.variant}", disable=not progress, leave=False
    ) as bar:
        done = 0
        while done < cfg.steps:
            n = min(CHUNK, cfg.steps - done)
            batches = stack_batches(train_batches(cfg, corpus, rng, n, noise_rng))
            params, opt_state, chunk_losses = chunk(params, opt_state, batches, hp)
            losses.append(np.asarray(chunk_losses))
            done += n
            bar.update(n)
            bar.set_postfix(loss=f"{float(losses[-1][-1]):.3f}")
    seconds = time.perf_counter() - start
    loss_curve = np.concatenate(losses)
    if not np.all(np.isfinite(loss_curve)):
        raise FloatingPointError(f"{cfg.family}/{cfg.variant}: training loss is not finite")
    tail = loss_curve[-max(1, len(loss_curve) // 20) :]
    summary = {
        "final_train_loss": float(np.mean(tail)),  # mean over the last 5% of steps
        "train_seconds": seconds,
        "backend": jax.default_backend(),
        "matmul_precision": MATMUL_PRECISION,  # every dot of the model (tasks.quant)
    }
    steps = np.arange(1, len(loss_curve) + 1)
    metrics = {"step": steps, "train_loss": loss_curve}
    store.write_record(
        _run_dir(store, cfg), cfg.train_dict(), {"params": params, "metrics": metrics}, summary
    )
    return params, {**summary, "config": cfg.train_dict()}
