"""Attention variants of the quantization lab: the paper's (vanilla, clipped softmax, gated,
both) and the mechanisms that let a head do nothing which later models use.

Shape letters: B batch, T positions, D d_model, H heads, E d_head = D / H, N gate MLP width.

- Clipped softmax (paper eq. 4): clip((zeta - gamma) softmax(x) + gamma, 0, 1), from
  `numerics.clipped_softmax`; gamma = 0, zeta = 1 is exactly the softmax (1 * p + 0 = p
  in floating point), so vanilla and clipped runs share one compiled program with gamma
  passed as an array.
- Gated attention (paper eq. 5): each head's output at each token is multiplied by
  pi = sigmoid(G(x)), x the attention layer's input. G per head: 'linear' E -> 1 (the
  default), 'mlp' E -> N -> 1 (ReLU), or 'all_heads' one linear D -> H. The last bias
  starts at logit(pi_init), weights ~ N(0, 0.02^2), so pi starts near pi_init (exactly
  pi_init for an input of zeros).

The normalizers (`NORMALIZERS`; every one maps the scores (B, H, T, T) to weights in [0, 1]):

- 'softmax': the paper's vanilla and clipped softmax above.
- 'off_by_one': softmax with one more term, a zero logit, in the denominator,
  e^x_i / (1 + sum_j e^x_j) (Miller's "softmax off by one"; flaxformer's `softmax1`): a
  row can put its mass on nothing by making every score negative. `numerics.softmax`'s
  `sink=0.0`: the lab's fixed softmax with the extra term among the others (margin form).
- 'sink': the same with a learned logit s_h per head in place of the zero (GPT-OSS's
  attention sinks): e^x_i / (e^s_h + sum_j e^x_j), `numerics.softmax(..., sink=s)`; s
  starts at 0 (off by one at init), has no weight decay and is not quantized (a bias-like
  vector).
- 'sigmoid': sigmoid(x_ij - log n) per entry, n the number of keys (the sequence length T),
  no normalization over the keys (Ramapuram et al. 2024's sigmoid attention with their
  b = -log n): each weight is independent, so a head does nothing by making them all small.
- 'softpick': relu(e^x_i - 1) / (sum_j |e^x_j - 1| + 1e-8) (Zuhri et al. 2025, their
  reference code's eps, computed from x - max as they do): scores <= 0 give exact zeros
  and the row need not sum to 1.

The elementwise output gate ('elementwise', Qwen3-Next; Qiu et al. 2025's G1 position):
each head's output, entry by entry, times sigmoid(x W + b) with W (D, D), x the attention
input. Its headwise form, one sigmoid(x w_h + b_h) per head from all of x, is the paper's
'all_heads' gate; the paper's default 'linear' gate reads only the head's own slice of x.
Qwen3-Next draws the gate from its query projection without a bias; the lab gives it the
bias logit(pi_init) as its other gates, which at the encoder's pi_init 0.5 is that bias, 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import numerics

GATES: tuple[str, ...] = ("none", "linear", "mlp", "all_heads", "elementwise")
"""Gates: none (plain attention), per-head linear, per-head MLP, all-heads linear, and the
elementwise output gate (Qwen3-Next)."""

NORMALIZERS: tuple[str, ...] = ("softmax", "off_by_one", "sink", "sigmoid", "softpick")
"""How scores become attention weights (module docstring); 'softmax' covers clipped softmax."""

SOFTPICK_EPS = 1e-8
"""Softpick's denominator guard, its reference code's value (only an all-zero row needs it)."""

Tap = Callable[[str, jax.Array], jax.Array]
"""A hook `tap(name, x) -> x` called on every tensor the PTQ simulation quantizes."""


def identity_tap(name: str, x: jax.Array) -> jax.Array:
    """The tap of the plain floating-point forward pass."""
    del name
    return x


def logit(p: float) -> float:
    """log(p / (1 - p)): the gate bias that makes sigmoid(bias) = p."""
    if not 0 < p < 1:
        raise ValueError(f"pi_init must be in (0, 1), got {p}")
    return math.log(p) - math.log1p(-p)


def gate_shapes(gate: str, d_model: int, n_heads: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """Parameter shapes of one layer's gate (names relative to the layer)."""
    e = d_model // n_heads
    if gate == "none":
        return {}
    if gate == "linear":
        return {"gate.w": (n_heads, e), "gate.b": (n_heads,)}
    if gate == "mlp":
        return {
            "gate.w1": (n_heads, e, hidden),
            "gate.b1": (n_heads * hidden,),  # flat: a bias, not a matrix
            "gate.w2": (n_heads, hidden),
            "gate.b": (n_heads,),
        }
    if gate == "all_heads":
        return {"gate.w": (d_model, n_heads), "gate.b": (n_heads,)}
    if gate == "elementwise":
        return {"gate.w": (d_model, d_model), "gate.b": (d_model,)}
    raise ValueError(f"gate must be one of {', '.join(GATES)}; got {gate!r}")


def gate_init(
    key: jax.Array, gate: str, d_model: int, n_heads: int, hidden: int, pi_init: float
) -> dict[str, jax.Array]:
    """One layer's gate: weights ~ N(0, 0.02^2), hidden biases 0, last bias logit(pi_init)."""
    shapes = gate_shapes(gate, d_model, n_heads, hidden)
    out = {}
    for i, (name, shape) in enumerate(sorted(shapes.items())):
        if len(shape) == 1:  # the biases
            value = logit(pi_init) if name == "gate.b" else 0.0
            out[name] = jnp.full(shape, value, jnp.float32)
        else:
            out[name] = normal_draw(key, i, shape, 0.02)
    return out


def normal_draw(key: jax.Array, index: int, shape: tuple[int, ...], std: float) -> jax.Array:
    """One weight of the lab's inits: N(0, 1) drawn from fold_in(key, index), times std, in
    float32.

    The draw is made at a bucketed length (`_draw_length`: at least 4,096, else the next
    power of two) and its first prod(shape) values, in order, are the weight. jax's
    partitionable threefry (the default) gives each value the bits of its flat index only,
    so these are the values a draw of `shape` itself gives, bit for bit; and one compiled
    program serves every weight of up to 4,096 values, of every layer and config (a
    threefry program compiles in about 0.4 s on this project's 2-core CPU; one per shape
    was 50 programs and 19 s of the test suite's fast tier). A weight of one value keeps
    its own program: XLA computes a single-element draw in other last bits (measured, and
    checked by tests/tasks/test_quant_attention.py). The quant golden case
    (tests/grokbench/golden.py) holds the values to the bit on its recorded machines."""
    size = math.prod(shape)
    std = np.float32(std)
    if size < 2:
        return _normal_draw(key, index, shape, std)
    flat = _normal_draw(key, index, (_draw_length(size),), std)
    if isinstance(flat, jax.core.Tracer):  # inside jit or eval_shape: slice in the program
        return flat[:size].reshape(shape)
    # Eager: slice on the host and put the weight back as it is (`jnp.asarray` would compile
    # a copy program per shape), so no program is compiled per shape at all.
    return jax.device_put(np.asarray(flat)[:size].reshape(shape))


_MIN_DRAW = 4096


def _draw_length(size: int) -> int:
    """The length `normal_draw` draws for a weight of `size` values."""
    return max(_MIN_DRAW, 1 << (size - 1).bit_length())


@functools.partial(jax.jit, static_argnums=2)
def _normal_draw(key: jax.Array, index, shape: tuple[int, ...], std) -> jax.Array:
    return jax.random.normal(jax.random.fold_in(key, index), shape, jnp.float32) * std


def _block_diag(w_HxExN: jax.Array) -> jax.Array:
    """(H, E, N) per-head weights as one (H*E, H*N) block-diagonal matrix.

    One dense matmul on the block-diagonal matrix is several times faster on CPU than
    the batched per-head einsum, and its gradient reaches only the diagonal blocks.
    """
    h, e, n = w_HxExN.shape
    eye = jnp.eye(h, dtype=w_HxExN.dtype)
    return jnp.einsum("hen,hg->hegn", w_HxExN, eye).reshape(h * e, h * n)


def gate_logits(p: dict[str, jax.Array], prefix: str, gate: str, x_BxTxD: jax.Array) -> jax.Array:
    """Gate logits (B, T, H) from the attention input; (B, T, D) for the elementwise gate."""
    b = p[prefix + "gate.b"][None, None, :]
    if gate in ("all_heads", "elementwise"):
        return x_BxTxD @ p[prefix + "gate.w"] + b
    if gate == "linear":
        return x_BxTxD @ _block_diag(p[prefix + "gate.w"][:, :, None]) + b
    if gate == "mlp":
        hid = x_BxTxD @ _block_diag(p[prefix + "gate.w1"])  # (B, T, H*N)
        hid = jax.nn.relu(hid + p[prefix + "gate.b1"].reshape(1, 1, -1))
        return hid @ _block_diag(p[prefix + "gate.w2"][:, :, None]) + b
    raise ValueError(f"gate {gate!r} has no logits")


def attention_weights(
    scores_BxHxTxT: jax.Array,
    normalizer: str,
    gamma: jax.Array,
    zeta: jax.Array,
    mask_1x1xTxT: jax.Array | None,
    sink_H: jax.Array | None = None,
) -> jax.Array:
    """The attention weights (B, H, T, T) from the scores by `normalizer` (module docstring).

    Masked entries (`mask_1x1xTxT` False) get exactly 0 in every normalizer; the sink's and
    off-by-one's extra logit is never masked. `sink_H` is the per-head sink logit ('sink'
    only); gamma and zeta are clipped softmax's ('softmax' only: 0 and 1 give the softmax).
    """
    if normalizer == "softmax":
        # gamma = 0, zeta = 1 is the plain softmax bit for bit (see the module docstring).
        return numerics.clipped_softmax(scores_BxHxTxT, gamma, zeta, where=mask_1x1xTxT)
    h_, tk = scores_BxHxTxT.shape[1], scores_BxHxTxT.shape[-1]
    if normalizer in ("off_by_one", "sink"):
        if normalizer == "sink" and sink_H is None:
            raise ValueError("the 'sink' normalizer needs the per-head sink logits")
        # numerics.softmax's sink: one more term in each row's denominator, in the margin
        # form, its own entry dropped; (1, H, 1, 1) broadcasts one logit per head.
        sink = 0.0 if normalizer == "off_by_one" else sink_H.reshape(1, h_, 1, 1)
        return numerics.softmax(scores_BxHxTxT, axis=-1, where=mask_1x1xTxT, sink=sink)
    if normalizer == "sigmoid":
        weights = jax.nn.sigmoid(scores_BxHxTxT - np.float32(math.log(tk)))
        return weights if mask_1x1xTxT is None else jnp.where(mask_1x1xTxT, weights, 0.0)
    if normalizer == "softpick":
        x = scores_BxHxTxT
        if mask_1x1xTxT is not None:
            x = jnp.where(mask_1x1xTxT, x, -jnp.inf)
        m = jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))  # the reference detaches it
        shifted = jnp.exp(x - m) - jnp.exp(-m)  # e^-m (e^x - 1)
        kept = jnp.isfinite(x)
        denom = jnp.sum(jnp.where(kept, jnp.abs(shifted), 0.0), axis=-1, keepdims=True)
        return jnp.where(kept, jax.nn.relu(shifted), 0.0) / (denom + np.float32(SOFTPICK_EPS))
    raise ValueError(f"normalizer must be one of {', '.join(NORMALIZERS)}; got {normalizer!r}")


def attention(
    p: dict[str, jax.Array],
    prefix: str,
    x_BxTxD: jax.Array,
    n_heads: int,
    gate: str,
    gamma: jax.Array,
    zeta: jax.Array,
    mask_1x1xTxT: jax.Array | None,
    tap: Tap,
    normalizer: str = "softmax",
) -> tuple[jax.Array, jax.Array]:
    """Multi-head self-attention with its normalizer (clipped softmax by default) and optional
    gate: (output, weights BxHxTxT).

    Taps (quantized under PTQ): q, k, v, scores (before the mask, as the paper's code),
    probs, gate (the probabilities pi), context (after the gate), attn_out.
    """
    b_, t_, d_ = x_BxTxD.shape
    e_ = d_ // n_heads

    def dense(name: str, x: jax.Array) -> jax.Array:
        return x @ p[prefix + "w" + name] + p[prefix + "b" + name][None, None, :]

    def heads(x: jax.Array) -> jax.Array:
        return x.reshape(b_, t_, n_heads, e_)

    q = heads(tap(prefix + "q", dense("q", x_BxTxD)))
    k = heads(tap(prefix + "k", dense("k", x_BxTxD)))
    v = heads(tap(prefix + "v", dense("v", x_BxTxD)))
    scores = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.float32(math.sqrt(e_)).astype(q.dtype)
    scores = tap(prefix + "scores", scores)
    sink = p.get(prefix + "sink") if normalizer == "sink" else None
    probs = attention_weights(scores, normalizer, gamma, zeta, mask_1x1xTxT, sink)
    probs = tap(prefix + "probs", probs)
    ctx_BxTxHxE = jnp.einsum("bhqk,bkhe->bqhe", probs, v)
    if gate != "none":
        pi = tap(prefix + "gate", jax.nn.sigmoid(gate_logits(p, prefix, gate, x_BxTxD)))
        if gate == "elementwise":  # (B, T, D): one gate per output entry
            ctx_BxTxHxE = ctx_BxTxHxE * pi.reshape(b_, t_, n_heads, e_)
        else:  # (B, T, H): one gate per head
            ctx_BxTxHxE = ctx_BxTxHxE * pi[:, :, :, None]
    ctx = tap(prefix + "context", ctx_BxTxHxE.reshape(b_, t_, d_))
    return tap(prefix + "attn_out", dense("o", ctx)), probs
