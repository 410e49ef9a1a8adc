"""Attention variants of the quantization lab: vanilla, clipped softmax, gated, both.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import numerics

GATES: tuple[str, ...] = ("none", "linear", "mlp", "all_heads")
"""Gates: none (plain attention), per-head linear, per-head MLP, all-heads linear."""

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
            draw = jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
            out[name] = draw * np.float32(0.02)
    return out


def _block_diag(w_HxExN: jax.Array) -> jax.Array:
    """(H, E, N) per-head weights as one (H*E, H*N) block-diagonal matrix.

    One dense matmul on the block-diagonal matrix is several times faster on CPU than
    the batched per-head einsum, and its gradient reaches only the diagonal blocks.
    """
    h, e, n = w_HxExN.shape
    eye = jnp.eye(h, dtype=w_HxExN.dtype)
    return jnp.einsum("hen,hg->hegn", w_HxExN, eye).reshape(h * e, h * n)


def gate_logits(p: dict[str, jax.Array], prefix: str, gate: str, x_BxTxD: jax.Array) -> jax.Array:
    """Gate logits (B, T, H) from the attention input."""
    b = p[prefix + "gate.b"][None, None, :]
    if gate == "all_heads":
        return x_BxTxD @ p[prefix + "gate.w"] + b
    if gate == "linear":
        return x_BxTxD @ _block_diag(p[prefix + "gate.w"][:, :, None]) + b
    if gate == "mlp":
        hid = x_BxTxD @ _block_diag(p[prefix + "gate.w1"])  # (B, T, H*N)
        hid = jax.nn.relu(hid + p[prefix + "gate.b1"].reshape(1, 1, -1))
        return hid @ _block_diag(p[prefix + "gate.w2"][:, :, None]) + b
    raise ValueError(f"gate {gate!r} has no logits")


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
) -> tuple[jax.Array, jax.Array]:
    """Multi-head self-attention with clipped softmax and optional gate: (output, probs BxHxTxT).

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
    # gamma = 0, zeta = 1 is the plain softmax bit for bit (see the module docstring).
    probs = numerics.clipped_softmax(scores, gamma, zeta, where=mask_1x1xTxT)
    probs = tap(prefix + "probs", probs)
    ctx_BxTxHxE = jnp.einsum("bhqk,bkhe->bqhe", probs, v)
    if gate != "none":
        pi_BxTxH = tap(prefix + "gate", jax.nn.sigmoid(gate_logits(p, prefix, gate, x_BxTxD)))
        ctx_BxTxHxE = ctx_BxTxHxE * pi_BxTxH[:, :, :, None]
    ctx = tap(prefix + "context", ctx_BxTxHxE.reshape(b_, t_, d_))
    return tap(prefix + "attn_out", dense("o", ctx)), probs
