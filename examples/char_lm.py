"""A character-level language model trained with the lab's losses, then distilled.

A small decoder-only transformer (plain JAX + optax; float32 parameters, bfloat16
compute: every matmul, the hidden states and the head's operands are bf16) learns
next-character prediction on this repository's own documentation (README.md and
docs/*.md concatenated in sorted order: deterministic at a commit). Three runs from the
same start:

1. "ours": the head and loss are `numerics.linear_cross_entropy` with z-loss 1e-4 inside
   `jax.shard_map` over a 2-device (data x vocab) mesh, the batch and the vocabulary
   sharded at once (`numerics.sharded_linear_cross_entropy`): no device ever holds the
   (tokens, V) logits. Every `--log-every` steps the collapse monitor
   (`numerics.collapse_stats`, with the fixed loss's gradient) reads one batch's logits.
2. "standard": the same loop with optax's `softmax_cross_entropy_with_integer_labels` on
   the materialized bf16 logits, z-loss 1e-4 added by hand (the same objective), on one
   device; the monitor with optax's gradient.
3. "student": a smaller model distilled from the trained teacher (run 1) with
   `numerics.linear_topk_kl_divergence`, from the teacher's top-k log-probabilities
   computed once over the training windows and stored (float32, k = `--topk`).

Both teachers and the student are scored on held-out text (the last 10 %) by the same
float32 cross-entropy of their bf16 logits.

    python examples/char_lm.py                      # about a minute on a 2-core CPU
    python examples/char_lm.py --png loss.png       # and the curves and monitor readings
    python examples/char_lm.py --steps 1000 --width 128 --layers 3

The mesh is `--mesh DATAxVOCAB` (default 1x2: the batch axis exists, of size 1, and the
vocabulary is split over both devices; 2x1 splits the batch instead). A run directly
sets 2 host devices (XLA_FLAGS) unless XLA_FLAGS already names a count; with more
devices (say 4), `--mesh 2x2` splits both.
"""

from __future__ import annotations

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Before jax initialises its backends: two host devices for the mesh.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()

import argparse
import functools
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import numerics

ROOT = pathlib.Path(__file__).resolve().parents[1]
BF16 = jnp.bfloat16
Z_LOSS = 1e-4
# Token ids: 0 unknown (any character outside printable ASCII), 1 newline, 2.. the 95
# printable ASCII characters. The head has VOCAB columns: 97 used, the rest never a label
# (padding so the vocabulary divides over any mesh axis of up to 128 devices).
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
VOCAB = 128


# --- Data -----------------------------------------------------------------------------------


def corpus() -> str:
    """README.md and docs/*.md, sorted by name, joined: the same text on every machine at
    one commit. docs/examples.md, which reports this example's numbers, is left out, so
    writing them down does not change the text they were measured on."""
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "examples.md")
    paths = [ROOT / "README.md", *docs]
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


def encode(text: str) -> np.ndarray:
    table = {c: i + 1 for i, c in enumerate(CHARS)}
    return np.array([table.get(c, 0) for c in text.replace("\t", " ")], np.int32)


def windows(ids: np.ndarray, context: int) -> np.ndarray:
    """Non-overlapping windows of context + 1 characters: (count, context + 1)."""
    count = (len(ids) - 1) // context
    starts = np.arange(count) * context
    return np.stack([ids[s : s + context + 1] for s in starts])


# --- The model --------------------------------------------------------------------------------


def init(key, *, width: int, layers: int, context: int, heads: int) -> dict:
    """float32 parameters of a pre-LayerNorm decoder; the head is a separate (D, V) weight."""
    keys = iter(jax.random.split(key, 3 + 4 * layers))

    def dense(n_in, n_out, scale=1.0):
        return jax.random.normal(next(keys), (n_in, n_out)) * (scale / n_in**0.5)

    blocks = []
    for _ in range(layers):
        blocks.append(
            {
                "ln1": jnp.ones(width),
                "qkv": dense(width, 3 * width),
                "proj": dense(width, width, 1 / (2 * layers) ** 0.5),
                "ln2": jnp.ones(width),
                "up": dense(width, 4 * width),
                "down": dense(4 * width, width, 1 / (2 * layers) ** 0.5),
            }
        )
    return {
        "embed": jax.random.normal(next(keys), (VOCAB, width)) * 0.02,
        "pos": jax.random.normal(next(keys), (context, width)) * 0.02,
        "blocks": blocks,
        "ln_f": jnp.ones(width),
        "head": dense(width, VOCAB),
        "heads": heads,
    }


def _norm(x, scale):
    """LayerNorm (no bias): statistics in float32, the result in bf16."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5) * scale[None, None, :]).astype(BF16)


def hidden_states(params, tokens):
    """(B, T) token ids -> (B, T, D) bf16 hidden states after the final norm."""
    b, t = tokens.shape
    heads = params["heads"]
    x = (params["embed"][tokens] + params["pos"][None, :t]).astype(BF16)
    causal = jnp.tril(jnp.ones((t, t), bool))
    for blk in params["blocks"]:
        d = x.shape[-1]
        q, k, v = jnp.split(_norm(x, blk["ln1"]) @ blk["qkv"].astype(BF16), 3, axis=-1)
        q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
        scores = jnp.where(causal[None, None], scores / (d // heads) ** 0.5, -jnp.inf)
        att = jax.nn.softmax(scores, axis=-1).astype(BF16)
        y = jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d)
        x = x + y @ blk["proj"].astype(BF16)
        up = jax.nn.gelu(_norm(x, blk["ln2"]) @ blk["up"].astype(BF16))
        x = x + up @ blk["down"].astype(BF16)
    return _norm(x, params["ln_f"])


def logits_of(params, tokens):
    """The materialized bf16 logits (B, T, V): the standard loop's, and the monitor's."""
    return hidden_states(params, tokens) @ params["head"].astype(BF16)


def count_params(params) -> int:
    return sum(int(np.size(a)) for a in jax.tree.leaves(params) if np.ndim(a))


# --- Losses -----------------------------------------------------------------------------------


def make_mesh(shape: tuple[int, int]):
    return jax.make_mesh(shape, ("data", "vocab"), axis_types=(AxisType.Auto,) * 2)


def ours_loss(params, batch, mesh):
    """The fused head + cross-entropy with z-loss, batch over "data" and V over "vocab"."""
    tokens, targets = batch[:, :-1], batch[:, 1:]
    return numerics.sharded_linear_cross_entropy(
        mesh,
        hidden_states(params, tokens),
        params["head"].astype(BF16),
        targets,
        vocab_axis="vocab",
        batch_axis="data",
        z_loss=Z_LOSS,
        reduction="mean",
    )


def unsharded_loss(params, batch):
    """The same loss on one device: what `ours_loss` must equal."""
    tokens, targets = batch[:, :-1], batch[:, 1:]
    return numerics.linear_cross_entropy(
        hidden_states(params, tokens),
        params["head"].astype(BF16),
        targets,
        z_loss=Z_LOSS,
        reduction="mean",
    )


def standard_loss(params, batch, mesh=None):
    """optax's cross-entropy on the materialized bf16 logits, z-loss added by hand."""
    del mesh
    logits = logits_of(params, batch[:, :-1])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:])
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.mean(ce + Z_LOSS * jnp.square(lse))


def monitor(params, batch, loss_name):
    """`numerics.collapse_stats` of one batch's bf16 logits, with the gradient of the loss
    being trained (the fixed loss's for "ours", optax's for "standard")."""
    logits = logits_of(params, batch[:, :-1])
    z, y = logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1)
    if loss_name == "standard":
        return numerics.collapse_stats(z, y)
    grads = jax.grad(lambda z: numerics.cross_entropy(z, y, z_loss=Z_LOSS).sum())(z)
    return numerics.collapse_stats(z, y, grads=grads)


# Module-level programs (the head count static): every model of one shape shares one compile.
@functools.partial(jax.jit, static_argnums=0)
def _window_losses(heads, arrays, batch):
    z = logits_of({**arrays, "heads": heads}, batch[:, :-1]).astype(jnp.float32)
    return jnp.sum(numerics.cross_entropy(z, batch[:, 1:]), axis=-1)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _window_topk(heads, k, arrays, batch):
    z = logits_of({**arrays, "heads": heads}, batch[:, :-1]).astype(jnp.float32)
    return jax.lax.top_k(jax.nn.log_softmax(z, axis=-1), k)


def eval_loss(params, data, batch_size: int) -> float:
    """Mean float32 cross-entropy of the bf16 logits over held-out windows (nats/char)."""
    arrays, heads = _static(params)
    per_window = _batched(lambda b: _window_losses(heads, arrays, b), data, batch_size)
    return float(np.sum(per_window, dtype=np.float64)) / (len(data) * (data.shape[1] - 1))


def _batched(fn, data, size: int):
    """fn over `data` in batches of `size` rows, the last padded (one compiled shape), its
    outputs (a pytree of per-row arrays) concatenated and trimmed to len(data)."""
    padded = np.concatenate([data, np.repeat(data[:1], -len(data) % size, axis=0)])
    parts = [fn(jnp.asarray(padded[i : i + size])) for i in range(0, len(padded), size)]
    return jax.tree.map(lambda *p: np.concatenate([np.asarray(a) for a in p])[: len(data)], *parts)


# --- Training ---------------------------------------------------------------------------------


def _static(params):
    """Split the pytree into arrays (trained) and the head count (static)."""
    arrays = {k: v for k, v in params.items() if k != "heads"}
    return arrays, params["heads"]


def train(loss_fn, params, train_data, *, steps, batch_size, lr, seed, log_every, mesh,
          name, monitor_name=None, out=sys.stdout):  # fmt: skip
    """AdamW with a cosine schedule on random batches of `train_data` (an array of windows, or
    a tuple of arrays indexed by window); returns (params, curve, monitor readings)."""
    arrays, heads = _static(params)
    place = lambda tree, spec: tree  # noqa: E731  (no mesh: where jax puts it)
    if mesh is not None:
        # Parameters replicated over the mesh, each batch split over its data axis.
        place = lambda tree, spec: jax.device_put(tree, NamedSharding(mesh, spec))  # noqa: E731
        arrays = place(arrays, P())
    warmup = max(1, min(50, steps // 5))
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1))
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, 0.9, 0.99))
    opt_state = place(optimizer.init(arrays), P())

    # Outputs replicated as the inputs are: else sharding propagation lays the head out
    # along the vocabulary after step 1 and the next call compiles the step again.
    @jax.jit(out_shardings=None if mesh is None else NamedSharding(mesh, P()))
    def step(arrays, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda a: loss_fn({**a, "heads": heads}, batch, mesh))(
            arrays
        )
        updates, opt_state = optimizer.update(grads, opt_state, arrays)
        return optax.apply_updates(arrays, updates), opt_state, loss

    read = None
    if monitor_name is not None:
        read = jax.jit(lambda a, b: monitor({**a, "heads": heads}, b, monitor_name))
    rng = np.random.default_rng(seed)
    curve, readings = [], []
    if read is not None:
        print(f"\n{name}: step  loss   past cliff  zero target grad  margin median  max logit",
              file=out)  # fmt: skip
    for i in range(1, steps + 1):
        rows = rng.integers(0, len(jax.tree.leaves(train_data)[0]), batch_size)
        batch = place(jax.tree.map(lambda d, r=rows: jnp.asarray(d[r]), train_data), P("data"))
        arrays, opt_state, loss = step(arrays, opt_state, batch)
        curve.append(float(loss))
        if read is not None and (i % log_every == 0 or i == steps or i == 1):
            s = {k: float(v) for k, v in read(arrays, batch)._asdict().items()}
            readings.append({"step": i, **s})
            print(
                f"{name}: {i:4d}  {curve[-1]:5.3f}  {s['frac_past_cliff']:10.3f}"
                f"  {s['frac_zero_target_grad']:16.3f}  {s['margin_median']:13.2f}"
                f"  {s['max_logit']:9.2f}",
                file=out,
            )
    return {**arrays, "heads": heads}, curve, readings


def teacher_topk(params, data, k: int, batch_size: int):
    """The teacher's top-k log-probabilities (float32) and indices at every position of
    every window, computed once: (windows, T, k) each."""
    arrays, heads = _static(params)
    return _batched(lambda b: _window_topk(heads, k, arrays, b), data, batch_size)


def distill(student, train_data, lp, idx, *, steps, batch_size, lr, seed, out=sys.stdout):
    """The student on the stored top-k teacher with the fused top-k KL; returns (params,
    curve). The stored arrays are checked whole first (log-probabilities <= 0, tail mass
    in [0, 1], indices in range and distinct: the library checks them when concrete) by
    tracing one call on them with `jax.eval_shape`, which compiles and runs nothing."""

    def loss_fn(params, batch, lp, idx):
        return numerics.linear_topk_kl_divergence(
            hidden_states(params, batch[:, :-1]),
            params["head"].astype(BF16),
            lp,
            idx,
            reduction="mean",
        )

    jax.eval_shape(lambda b: loss_fn(student, b, lp, idx), jnp.asarray(train_data))
    print(f"\nstudent: stored top-{lp.shape[-1]} of {lp.shape[0]} windows checked", file=out)
    return train(lambda p, b, _: loss_fn(p, *b), student, (train_data, lp, idx), steps=steps,
                 batch_size=batch_size, lr=lr, seed=seed, log_every=steps, mesh=None,
                 name="student", out=out)[:2]  # fmt: skip


# --- The figure ---------------------------------------------------------------------------


def plot(path, curves, readings):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_mon) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    for name, curve in curves.items():
        c = np.asarray(curve)
        smooth = np.convolve(c, np.ones(10) / 10, mode="valid") if len(c) > 20 else c
        ax_loss.plot(np.arange(len(smooth)) + (len(c) - len(smooth)) + 1, smooth, label=name)
    ax_loss.set(xlabel="step", ylabel="training loss (nats/char; KL for the student)",
                title="losses (10-step mean)")  # fmt: skip
    ax_loss.legend()
    cliff = float(numerics.precision_cliff(BF16))
    for (name, rows), color in zip(readings.items(), ("C0", "C1"), strict=False):
        steps = [r["step"] for r in rows]
        past = max(r["frac_past_cliff"] for r in rows)
        zero = max(r["frac_zero_target_grad"] for r in rows)
        tag = f"{name} (past cliff <= {past:.2g}, zero target grad <= {zero:.2g})"
        ax_mon.plot(steps, [r["margin_max"] for r in rows], "o-", color=color,
                    label=f"{tag}: max margin")  # fmt: skip
        ax_mon.plot(steps, [r["margin_median"] for r in rows], "x--", color=color,
                    label="median margin")  # fmt: skip
    ax_mon.axhline(cliff, color="k", lw=0.8, ls=":")
    ax_mon.annotate(f"bf16 cliff {cliff:.3g}", (0.02, cliff), xycoords=("axes fraction", "data"),
                    va="bottom", fontsize=8)  # fmt: skip
    ax_mon.set(xlabel="step", ylabel="margin z_t - logsumexp_others (one batch)",
               title="collapse monitor (bf16 logits)")  # fmt: skip
    ax_mon.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- Main ---------------------------------------------------------------------------------------


def _mesh_shape(text: str) -> tuple[int, int]:
    try:
        data, vocab = (int(p) for p in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--mesh must be DATAxVOCAB, e.g. 1x2; got {text!r}"
        ) from None
    return data, vocab


def main(argv=None, out=sys.stdout) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="teacher training steps")
    parser.add_argument("--student-steps", type=int, default=300, help="distillation steps")
    parser.add_argument("--batch", type=int, default=16, help="windows per batch")
    parser.add_argument("--context", type=int, default=64, help="characters per window")
    parser.add_argument("--width", type=int, default=96, help="teacher width")
    parser.add_argument("--layers", type=int, default=2, help="teacher layers")
    parser.add_argument("--student-width", type=int, default=48)
    parser.add_argument("--student-layers", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--topk", type=int, default=8, help="stored teacher log-probabilities")
    parser.add_argument("--distill-windows", type=int, default=1024,
                        help="training windows the teacher's top-k is stored for")  # fmt: skip
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--chars", type=int, default=0, help="use the first N characters (0: all)")
    parser.add_argument("--mesh", type=_mesh_shape, default=(1, 2), help="DATAxVOCAB devices")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=50, help="monitor readings")
    parser.add_argument("--png", type=pathlib.Path, help="write the curves and monitor here")
    args = parser.parse_args(argv)
    sizes = (args.steps, args.student_steps, args.batch, args.context, args.width, args.layers,
             args.student_width, args.student_layers, args.heads, args.log_every,
             args.distill_windows)  # fmt: skip
    if min(sizes) < 1 or not 1 <= args.topk <= VOCAB:
        parser.error(f"steps, sizes and --log-every must be >= 1 and --topk in [1, {VOCAB}]")
    if args.width % args.heads or args.student_width % args.heads:
        parser.error("--width and --student-width must be multiples of --heads")
    if args.mesh[0] * args.mesh[1] > jax.device_count() or VOCAB % args.mesh[1]:
        parser.error(f"--mesh {args.mesh}: {jax.device_count()} devices, V = {VOCAB}")
    if args.batch % args.mesh[0]:
        parser.error("--batch must be a multiple of the mesh's data axis")

    start = time.perf_counter()
    phases = {}

    def lap(name):  # seconds since the last lap, under `name`
        phases[name] = time.perf_counter() - start - sum(phases.values())

    text = corpus()
    ids = encode(text[: args.chars] if args.chars else text)
    data = windows(ids, args.context)
    split = max(1, int(len(data) * 0.9))
    train_data, held_out = data[:split], data[split:] if split < len(data) else data[-1:]
    mesh = make_mesh(args.mesh)
    shape = dict(context=args.context, heads=args.heads)
    teacher0 = init(jax.random.key(args.seed), width=args.width, layers=args.layers, **shape)
    print(
        f"{len(ids):,} characters ({len(train_data)} training windows of {args.context}), "
        f"V = {VOCAB}; teacher {count_params(teacher0):,} parameters (float32, bf16 compute), "
        f"mesh data x vocab = {args.mesh[0]} x {args.mesh[1]}",
        file=out,
    )
    common = dict(steps=args.steps, batch_size=args.batch, lr=args.lr, seed=args.seed,
                  log_every=args.log_every, out=out)  # fmt: skip
    lap("setup")
    teacher, ours_curve, ours_mon = train(ours_loss, teacher0, train_data, name="ours",
                                          monitor_name="ours", mesh=mesh, **common)  # fmt: skip
    lap("ours")
    std, std_curve, std_mon = train(standard_loss, teacher0, train_data, name="standard",
                                    monitor_name="standard", mesh=None, **common)  # fmt: skip
    lap("standard")
    distill_data = train_data[: args.distill_windows]
    lp, idx = teacher_topk(teacher, distill_data, args.topk, 64)
    lap("top-k")
    student0 = init(jax.random.key(args.seed + 1), width=args.student_width,
                    layers=args.student_layers, **shape)  # fmt: skip
    student, student_curve = distill(student0, distill_data, lp, idx, steps=args.student_steps,
                                     batch_size=args.batch, lr=args.lr, seed=args.seed,
                                     out=out)  # fmt: skip
    lap("student")
    result = {
        "ours_train": float(np.mean(ours_curve[-10:])),
        "standard_train": float(np.mean(std_curve[-10:])),
        "student_kl": float(np.mean(student_curve[-10:])),
        "ours_eval": eval_loss(teacher, held_out, 64),
        "standard_eval": eval_loss(std, held_out, 64),
        "student_eval": eval_loss(student, held_out, 64),
        "teacher_params": count_params(teacher0),
        "student_params": count_params(student0),
        "curves": {"ours": ours_curve, "standard": std_curve, "student": student_curve},
        "readings": {"ours": ours_mon, "standard": std_mon},
    }
    lap("held-out")
    result["seconds"], result["phases"] = time.perf_counter() - start, phases
    print(
        f"\nsummary: {result['seconds']:.1f} s ("
        + ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
        + "); nats/char, training: mean of the last 10 steps, held-out: float32 CE of the"
        " bf16 logits\n"
        f"  teacher, ours (sharded fused CE + z-loss): train {result['ours_train']:.3f}"
        f"  held-out {result['ours_eval']:.3f}\n"
        f"  teacher, standard (optax CE + z-loss):     train {result['standard_train']:.3f}"
        f"  held-out {result['standard_eval']:.3f}\n"
        f"  student ({result['student_params']:,} parameters, top-{args.topk} KL):"
        f"  train KL {result['student_kl']:.3f}  held-out {result['student_eval']:.3f}",
        file=out,
    )
    if args.png is not None:
        plot(args.png, result["curves"], result["readings"])
        print(f"wrote {args.png}", file=out)
    return result


if __name__ == "__main__":
    main()
