"""The 1-layer ReLU transformer of Nanda et al. / Varma et al. on tokens `[a, b, =]`.

Shape letters: B batch, T positions (3), D d_model, H heads, E d_head = D / H,
F d_mlp, V vocabulary (p + 1), K classes (p).

Two forward passes give the same logits and gradients:

- `transformer_apply`: the plain pass over all T positions, read out at the last one.
- `transformer_apply_fast`: the read-out only sees the last position, whose token is
  always `=`. Its query (and its own key and value) is one vector shared by every
  example, and the keys and values at positions 0 and 1 depend only on (token, position),
  so they are computed once per vocabulary entry (a V-row table per position) and
  gathered. The per-example work left is a gather, a 3-way softmax, the MLP on one
  position and the unembedding: several times fewer FLOPs than the plain pass.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from tasks import _matmul
from tasks._common import (
    Params,
    cast_params,
    check_model_dtype,
    check_tokens,
    concrete_or_none,
    normal_init,
)

_SEQ_LEN = 3  # [a, b, =]

INITS: tuple[str, ...] = ("nanda", "fan_in", "tl")
"""Init scales of the weight matrices (`TransformerConfig.init`; biases start at 0):

- 'nanda': Nanda et al.'s code: every matrix ~ N(0, 1/d_model), even w_out (fan-in d_mlp),
  and the unembedding ~ N(0, 1/V).
- 'fan_in': N(0, 1/fan_in) for every matrix that multiplies an activation (w_out 1/d_mlp,
  w_u 1/d_model); embed and pos, which a one-hot selects, keep Nanda's 1/d_model.
- 'tl': the TransformerLens grokking demo (GPT-2 init, initializer_range 0.8/sqrt(d_model)):
  every matrix ~ N(0, 0.64/d_model). (The demo also freezes its biases at 0; ours train.)
"""
_LN_EPS = 1e-5  # PyTorch/GPT-2 LayerNorm default; representable in bf16 and fp16


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """A 1-layer transformer over `[a, b, =]`; defaults are Varma et al.'s width-64 model."""

    vocab_size: int = 32  # p + 1 for the reference task a+b mod 31 (the extra token is `=`)
    num_classes: int = 31  # p: the read-out predicts a residue
    d_model: int = 64  # Varma et al.'s width-64 model (Nanda et al. use 128)
    n_heads: int = 4  # Nanda et al.'s 4 heads; d_head = d_model / n_heads
    d_mlp: int | None = None  # None -> 4 * d_model, the usual 4x ReLU MLP (Nanda: 512 at 128)
    layer_norm: bool = False  # Nanda/Varma models have no LayerNorm
    init: str = "nanda"  # one of INITS: Nanda et al.'s N(0, 1/d_model)
    matmul_precision: str = "highest"  # one of tasks.MATMUL_PRECISIONS: exact float32 products

    def __post_init__(self) -> None:
        _matmul.check_matmul_precision(self.matmul_precision)
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}; got {self.init!r}")
        for name in ("vocab_size", "num_classes", "d_model", "n_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.vocab_size < 2:
            raise ValueError("vocab_size must hold at least one residue and `=`")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.d_mlp is not None and self.d_mlp < 1:
            raise ValueError(f"d_mlp must be positive, got {self.d_mlp}")

    @property
    def d_head(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def mlp_width(self) -> int:
        """Hidden width of the MLP."""
        return 4 * self.d_model if self.d_mlp is None else self.d_mlp

    @classmethod
    def varma(cls, p: int = 31) -> TransformerConfig:
        """Varma et al.'s width-64 model for a task mod p."""
        return cls(vocab_size=p + 1, num_classes=p, d_model=64, n_heads=4)

    @classmethod
    def nanda(cls, p: int = 113) -> TransformerConfig:
        """Nanda et al.'s model: d_model 128, MLP 512, 4 heads of 32."""
        return cls(vocab_size=p + 1, num_classes=p, d_model=128, n_heads=4, d_mlp=512)


def transformer_init(key: jax.Array, cfg: TransformerConfig, dtype: DTypeLike) -> Params:
    """`cfg.init`'s init (`INITS`), drawn in float32 and cast to `dtype` (`_common.normal_init`)."""
    return _transformer_init(key, cfg, check_model_dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))  # one compile per (config, dtype)
def _transformer_init(key: jax.Array, cfg: TransformerConfig, dt: np.dtype) -> Params:
    V, K, D, H, E, F = (
        cfg.vocab_size,
        cfg.num_classes,
        cfg.d_model,
        cfg.n_heads,
        cfg.d_head,
        cfg.mlp_width,
    )
    shapes = {
        "embed": (V, D),
        "pos": (_SEQ_LEN, D),
        "w_q": (D, H, E),
        "w_k": (D, H, E),
        "w_v": (D, H, E),
        "w_o": (H, E, D),
        "w_in": (D, F),
        "w_out": (F, D),
        "w_u": (D, K),
    }
    params = normal_init(key, shapes, _init_stds(cfg, shapes))
    params["b_in"] = jnp.zeros((F,), jnp.float32)
    params["b_out"] = jnp.zeros((D,), jnp.float32)
    if cfg.layer_norm:
        # Pre-LN: before attention, before the MLP, and before the unembedding.
        for ln in ("ln1", "ln2", "ln_f"):
            params[f"{ln}_scale"] = jnp.ones((D,), jnp.float32)
            params[f"{ln}_bias"] = jnp.zeros((D,), jnp.float32)
    return cast_params(params, dt)


def _init_stds(cfg: TransformerConfig, shapes: dict[str, tuple[int, ...]]) -> dict[str, float]:
    """The std of each weight matrix under `cfg.init` (see `INITS`)."""
    D = cfg.d_model
    if cfg.init == "tl":
        return {name: 0.8 / math.sqrt(D) for name in shapes}
    # Every matrix ~ N(0, 1/d_model) as in Nanda et al.'s code (even w_out, whose fan-in
    # is F), except the unembedding, which they draw ~ N(0, 1/V).
    stds = {name: 1.0 / math.sqrt(D) for name in shapes}
    stds["w_u"] = 1.0 / math.sqrt(cfg.vocab_size)
    if cfg.init == "fan_in":
        stds["w_out"] = 1.0 / math.sqrt(cfg.mlp_width)
        stds["w_u"] = 1.0 / math.sqrt(D)
    return stds


def _layer_norm(params: Params, name: str, x_NxD: jax.Array) -> jax.Array:
    """LayerNorm over the last axis if the model has one, else the identity."""
    if f"{name}_scale" not in params:
        return x_NxD
    mean = jnp.mean(x_NxD, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x_NxD - mean), axis=-1, keepdims=True)
    shape = (1,) * (x_NxD.ndim - 1) + (-1,)  # explicit broadcast: rank promotion raises
    scale = params[f"{name}_scale"].reshape(shape)
    bias = params[f"{name}_bias"].reshape(shape)
    return (x_NxD - mean) * jax.lax.rsqrt(var + _LN_EPS) * scale + bias


def _mlp_and_unembed(params: Params, resid_BxD: jax.Array) -> jax.Array:
    """The MLP block and the read-out at one position: logits (B, K)."""
    h_BxD = _layer_norm(params, "ln2", resid_BxD)
    pre_BxF = h_BxD @ params["w_in"] + params["b_in"][None, :]
    out_BxD = jax.nn.relu(pre_BxF) @ params["w_out"] + params["b_out"][None, :]
    resid_BxD = resid_BxD + out_BxD
    return _layer_norm(params, "ln_f", resid_BxD) @ params["w_u"]


def _check_params(params: Params) -> None:
    dtypes = {x.dtype for x in jax.tree.leaves(params)}
    if len(dtypes) != 1:
        raise TypeError(f"all parameters must share one dtype, got {sorted(map(str, dtypes))}")


def transformer_apply(
    params: Params, tokens_BxT: jax.Array, matmul_precision: str = "highest"
) -> jax.Array:
    """Plain forward pass over all positions; logits (B, K) read out at the last position.

    `matmul_precision` (`tasks.MATMUL_PRECISIONS`) rounds the operands of every einsum and
    matmul, forward and backward (`tasks.einsum`): the projections, both attention
    products, the MLP and the unembedding. The embedding is a gather (as in Nanda et al.'s
    code) and LayerNorm's means are reductions, so neither is rounded.
    """
    mp = _matmul.check_matmul_precision(matmul_precision)
    _check_params(params)
    tokens_BxT = check_tokens(tokens_BxT, _SEQ_LEN, params["embed"].shape[0])
    E = params["w_q"].shape[-1]
    x_BxTxD = params["embed"][tokens_BxT] + params["pos"][None, :, :]
    h_BxTxD = _layer_norm(params, "ln1", x_BxTxD)
    q_BxTxHxE = _matmul.einsum("btd,dhe->bthe", h_BxTxD, params["w_q"], mp)
    k_BxTxHxE = _matmul.einsum("btd,dhe->bthe", h_BxTxD, params["w_k"], mp)
    v_BxTxHxE = _matmul.einsum("btd,dhe->bthe", h_BxTxD, params["w_v"], mp)
    scores_BxHxTxT = _matmul.einsum("bqhe,bkhe->bhqk", q_BxTxHxE, k_BxTxHxE, mp) * (
        1.0 / math.sqrt(E)
    )
    causal_TxT = jnp.tril(jnp.ones((_SEQ_LEN, _SEQ_LEN), bool))
    # -inf, not a large negative number: every row keeps its diagonal, so no row is all -inf.
    scores_BxHxTxT = jnp.where(causal_TxT[None, None], scores_BxHxTxT, -jnp.inf)
    attn_BxHxTxT = jax.nn.softmax(scores_BxHxTxT, axis=-1)
    z_BxTxHxE = _matmul.einsum("bhqk,bkhe->bqhe", attn_BxHxTxT, v_BxTxHxE, mp)
    x_BxTxD = x_BxTxD + _matmul.einsum("bthe,hed->btd", z_BxTxHxE, params["w_o"], mp)
    # The plain pass runs the MLP at every position, as a generic transformer would;
    # only the last position reaches the read-out.
    h_BxTxD = _layer_norm(params, "ln2", x_BxTxD)
    pre_BxTxF = _matmul.dot(h_BxTxD, params["w_in"], mp) + params["b_in"][None, None, :]
    out_BxTxD = _matmul.dot(jax.nn.relu(pre_BxTxF), params["w_out"], mp)
    out_BxTxD = out_BxTxD + params["b_out"][None, None, :]
    x_BxTxD = x_BxTxD + out_BxTxD
    return _matmul.dot(_layer_norm(params, "ln_f", x_BxTxD[:, -1, :]), params["w_u"], mp)


def transformer_apply_fast(params: Params, tokens_BxT: jax.Array) -> jax.Array:
    """Same logits and gradients as `transformer_apply` when position 2 is `=` (token V-1).

    At matmul_precision 'highest' only: its tables share one key, value and score per
    vocabulary entry across examples, so their backward sums the examples' cotangents
    before a matmul reads them, where the plain pass's matmuls round each example's
    cotangent. An emulated precision runs the plain pass (`tasks.build_model`).

    Only tokens[:, 0] and tokens[:, 1] are read: position 2 is taken to be `=`, as in
    every modular task. The `=` check runs when tokens are concrete, not under jit.
    """
    _check_params(params)
    V = params["embed"].shape[0]
    values = concrete_or_none(tokens_BxT)
    tokens_BxT = check_tokens(tokens_BxT, _SEQ_LEN, V)
    if values is not None and np.any(values[:, 2] != V - 1):
        raise ValueError(f"transformer_apply_fast needs `=` (token {V - 1}) at position 2")
    E = params["w_q"].shape[-1]
    scale = 1.0 / math.sqrt(E)
    embed_VxD, pos_TxD = params["embed"], params["pos"]

    # The `=` position: one residual vector, one query, one key and value for all examples.
    x_eq_D = embed_VxD[V - 1] + pos_TxD[2]
    h_eq_D = _layer_norm(params, "ln1", x_eq_D)
    q_HxE = jnp.einsum("d,dhe->he", h_eq_D, params["w_q"])
    k_eq_HxE = jnp.einsum("d,dhe->he", h_eq_D, params["w_k"])
    v_eq_HxE = jnp.einsum("d,dhe->he", h_eq_D, params["w_v"])
    score_eq_H = jnp.einsum("he,he->h", q_HxE, k_eq_HxE) * scale

    # Positions 0 and 1: keys and values per (token, position), as V-row tables. With the
    # query fixed, the score of each table row is fixed too: a (V, H) table per position.
    score_tabs, v_tabs = [], []
    for pos in (0, 1):
        h_VxD = _layer_norm(params, "ln1", embed_VxD + pos_TxD[pos][None, :])
        k_VxHxE = jnp.einsum("vd,dhe->vhe", h_VxD, params["w_k"])
        score_tabs.append(jnp.einsum("vhe,he->vh", k_VxHxE, q_HxE) * scale)
        v_tabs.append(jnp.einsum("vd,dhe->vhe", h_VxD, params["w_v"]))

    a_B, b_B = tokens_BxT[:, 0], tokens_BxT[:, 1]
    B = a_B.shape[0]
    H = q_HxE.shape[0]
    # Scores of the last query against keys at positions 0, 1, 2 (the causal row is full).
    scores_BxHx3 = jnp.stack(
        [score_tabs[0][a_B], score_tabs[1][b_B], jnp.broadcast_to(score_eq_H[None], (B, H))],
        axis=-1,
    )
    attn_BxHx3 = jax.nn.softmax(scores_BxHx3, axis=-1)
    z_BxHxE = (
        attn_BxHx3[:, :, 0, None] * v_tabs[0][a_B]
        + attn_BxHx3[:, :, 1, None] * v_tabs[1][b_B]
        + attn_BxHx3[:, :, 2, None] * v_eq_HxE[None]
    )
    resid_BxD = x_eq_D[None, :] + jnp.einsum("bhe,hed->bd", z_BxHxE, params["w_o"])
    return _mlp_and_unembed(params, resid_BxD)
