"""The quantization lab's models: a BERT-like post-LN MLM encoder and an OPT-like pre-LN decoder.

Shape letters: B batch, T positions, D d_model, H heads, F d_ffn, V vocabulary, L layers.

Both are plain functions of a flat parameter dict. Every tensor the paper's PTQ
quantizes goes through `tap(name, x)` (identity in floating point): the embedding sums,
q/k/v, attention scores and probabilities, the gate, the context, each dense output,
the FFN activation, the residual sums and the LayerNorm outputs. The final head (the
vocabulary projection) is the one layer left unquantized, as in the paper.

encoder, per layer (BERT): h = LN1(h + Attn(h)); h = LN2(h + W2 gelu(W1 h)).
decoder, per layer (OPT):  h = h + Attn(LN1(h)); h = h + W2 relu(W1 LN2(h)); a final LN.
Both: learned absolute positions, N(0, 0.02^2) weights (BERT/OPT init), zero biases,
untied head, no dropout (runs here are hundreds to a few thousand steps on 420 KB of text).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

import numerics
from tasks.quant._attention import (
    GATES,
    NORMALIZERS,
    Tap,
    attention,
    gate_init,
    gate_shapes,
    identity_tap,
    normal_draw,
)

FAMILIES: tuple[str, ...] = ("encoder", "decoder")

PYDOC_CHAR_VOCAB_SIZE = 109
"""The char vocabulary of CPython's pydoc_data.topics plus the 6 special tokens: the default
`QuantModelConfig.vocab_size` (a config built before its corpus, e.g. to validate, uses it)."""
"""Model families: BERT-like post-LN MLM encoder, OPT-like pre-LN causal decoder."""

_LN_EPS = {"encoder": 1e-12, "decoder": 1e-5}  # BERT's and OPT's LayerNorm eps

MATMUL_PRECISION = "highest"
"""The `jax.default_matmul_precision` every dot of `quant_model_apply` is traced under (and
so its transposes in the backward pass): float32 products as float32, not the backend's
default (TF32 on NVIDIA GPUs, bf16 passes on TPUs), so a GPU's FP and PTQ perplexities and
activation statistics are those the CPU computes. On the CPU it changes no bit."""


@dataclasses.dataclass(frozen=True)
class QuantModelConfig:
    """Architecture of one quant-lab model (static: one compiled program per config)."""

    family: str = "encoder"  # 'encoder' (BERT-like MLM) or 'decoder' (OPT-like causal LM)
    vocab_size: int = PYDOC_CHAR_VOCAB_SIZE
    seq_len: int = 64  # T: short enough for seconds-per-hundred-steps on 2 CPU cores
    n_layers: int = 2  # the smallest stack where layer L's FFN can feed layer L+1's heads
    d_model: int = 64  # D
    n_heads: int = 4  # H; d_head = D / H
    d_ffn: int | None = None  # None -> 4 * d_model (BERT, OPT)
    gate: str = "none"  # 'none', 'linear' (the paper's default), 'mlp', 'all_heads', 'elementwise'
    normalizer: str = "softmax"  # scores -> weights: tasks.quant._attention.NORMALIZERS

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}; got {self.family!r}")
        if self.gate not in GATES:
            raise ValueError(f"gate must be one of {', '.join(GATES)}; got {self.gate!r}")
        if self.normalizer not in NORMALIZERS:
            raise ValueError(
                f"normalizer must be one of {', '.join(NORMALIZERS)}; got {self.normalizer!r}"
            )
        for name in ("vocab_size", "seq_len", "n_layers", "d_model", "n_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.d_ffn is not None and self.d_ffn < 1:
            raise ValueError(f"d_ffn must be positive, got {self.d_ffn}")
        if self.family == "encoder" and self.seq_len < 5:
            raise ValueError("an encoder sequence needs seq_len >= 5 ([CLS] A [SEP] B [SEP])")

    @property
    def ffn_width(self) -> int:
        """Hidden width F of the FFN."""
        return 4 * self.d_model if self.d_ffn is None else self.d_ffn

    @property
    def gate_width(self) -> int:
        """Hidden width N of the per-head MLP gate: d_head // 4 (at least 1), fed that head's
        slice of the layer input, as the paper's code sizes it (BERT-base: d_head 64, N 16)."""
        return max(1, self.d_model // self.n_heads // 4)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every parameter."""
        d, f, v, t = self.d_model, self.ffn_width, self.vocab_size, self.seq_len
        shapes: dict[str, tuple[int, ...]] = {"tok_emb": (v, d), "pos_emb": (t, d)}
        if self.family == "encoder":
            shapes |= {"seg_emb": (2, d), "emb_ln.scale": (d,), "emb_ln.bias": (d,)}
        else:
            shapes |= {"final_ln.scale": (d,), "final_ln.bias": (d,)}
        for i in range(self.n_layers):
            pre = f"l{i}."
            for name in ("q", "k", "v", "o"):
                shapes[pre + "w" + name], shapes[pre + "b" + name] = (d, d), (d,)
            shapes |= {pre + "w1": (d, f), pre + "b1": (f,), pre + "w2": (f, d), pre + "b2": (d,)}
            for ln in ("ln1", "ln2"):
                shapes[f"{pre}{ln}.scale"], shapes[f"{pre}{ln}.bias"] = (d,), (d,)
            gate = gate_shapes(self.gate, d, self.n_heads, self.gate_width)
            shapes |= {pre + name: shape for name, shape in gate.items()}
            if self.normalizer == "sink":  # one learned logit per head, 0 at init
                shapes[pre + "sink"] = (self.n_heads,)
        shapes |= {"head.w": (d, v), "head.b": (v,)}
        return shapes

    def metric_taps(self) -> tuple[str, ...]:
        """The tensors whose inf-norm the lab measures, as the paper's validation scripts hook them.

        encoder (validate_mlm.py): each layer's FFN output, its output LN(h + FFN(h)) and that
        LayerNorm's input h + FFN(h).
        decoder (validate_clm.py): each layer's attention-LN output, attention output
        projection, FFN-LN output, FFN output and layer output (the residual stream), and the
        final LN.
        """
        if self.family == "encoder":
            per = ("ffn_out", "ffn_ln", "ffn_res")
            return tuple(f"l{i}.{n}" for i in range(self.n_layers) for n in per)
        per = ("attn_ln", "attn_out", "ffn_ln", "ffn_out", "ffn_res")
        return (*(f"l{i}.{n}" for i in range(self.n_layers) for n in per), "final_ln")

    def kurtosis_taps(self) -> tuple[str, ...]:
        """The tensors whose kurtosis is averaged: `metric_taps` less the encoder's LN inputs
        (validate_mlm.py takes kurtosis of the FFN and LN outputs only)."""
        if self.family == "decoder":
            return self.metric_taps()
        return tuple(f"l{i}.{n}" for i in range(self.n_layers) for n in ("ffn_out", "ffn_ln"))

    def max_inf_norm_taps(self) -> tuple[str, ...]:
        """The tensors over which Table 2's "max inf. norm" is the maximum.

        encoder: the FFN outputs (validate_mlm.py's "max FFN output inf norm"; the repo's
        example output, 20.8 for clipped softmax, is Table 2's 21.5 +- 1.5).
        decoder: the layer outputs, the residual stream (validate_clm.py's "max layer inf
        norm"; its example, 9.1 for the gated OPT-125m, is Table 2's 8.7 +- 0.6, while the
        max over every hooked tensor there reads 122.4).
        """
        kind = "ffn_out" if self.family == "encoder" else "ffn_res"
        return tuple(f"l{i}.{kind}" for i in range(self.n_layers))


def quant_model_init(key: jax.Array, cfg: QuantModelConfig, pi_init: float = 0.5) -> dict:
    """Parameters: weights ~ N(0, 0.02^2), biases 0, LN scale 1, gate bias logit(pi_init);
    the query and key projections ~ N(0, 1/D) (fan-in).

    Why q and k differ: at width 64 with std 0.02 the attention logits have std ~0.03, every
    probability sits at 1/T, and a clipped softmax with gamma below -1/T (BERT's -0.025 at
    T = 64) clips whole rows to zero with zero gradient: dead from step 0. With fan-in q and
    k, unit-variance LayerNorm inputs give unit-variance q and k entries and logits
    q.k / sqrt(d_head) of std ~1, the premise of scaled dot-product attention, so rows start
    unequal. BERT-base's 0.02 at width 768 gives q entries of std 0.55; fan-in is the same
    order there. Every variant gets this init, so the comparison stays like for like."""
    return _init(key, cfg, float(pi_init))


def _init(key: jax.Array, cfg: QuantModelConfig, pi_init: float) -> dict:
    # Not one jitted program: each weight is drawn by `normal_draw`, whose one program serves
    # every weight of up to 4,096 values (longer ones: one per power-of-two length).
    params = {}
    for i, (name, shape) in enumerate(sorted(cfg.param_shapes().items())):
        if ".gate." in name:
            continue  # drawn below, per layer
        if name.endswith(".scale"):
            params[name] = jnp.ones(shape, jnp.float32)
        elif len(shape) == 1:  # every bias
            params[name] = jnp.zeros(shape, jnp.float32)
        else:
            std = 1 / np.sqrt(cfg.d_model) if name.endswith((".wq", ".wk")) else 0.02
            params[name] = normal_draw(key, i, shape, std)
    if cfg.gate != "none":
        for i in range(cfg.n_layers):
            layer_key = jax.random.fold_in(jax.random.fold_in(key, 10_000), i)
            gate = gate_init(layer_key, cfg.gate, cfg.d_model, cfg.n_heads, cfg.gate_width, pi_init)
            params |= {f"l{i}.{name}": value for name, value in gate.items()}
    return params


def weight_names(params: dict) -> list[str]:
    """The tensors PTQ quantizes as weights: every matrix (embeddings too) except the head."""
    return sorted(n for n, w in params.items() if w.ndim >= 2 and not n.startswith("head."))


def decay_mask(params: dict, ln_weight_decay: bool) -> dict:
    """Which parameters get weight decay: matrices always; LN scales only if asked; never biases."""
    return {
        n: bool(w.ndim >= 2 or (ln_weight_decay and n.endswith(".scale")))
        for n, w in params.items()
    }


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * scale[None, None, :] + bias[None, None, :]


def _dense(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return x @ w + b[None, None, :]


def quant_model_apply(
    params: dict,
    tokens_BxT: jax.Array,
    segments_BxT: jax.Array,
    cfg: QuantModelConfig,
    gamma: jax.Array | float = 0.0,
    zeta: jax.Array | float = 1.0,
    tap: Tap = identity_tap,
    bos_noise_BxD: jax.Array | None = None,
) -> jax.Array:
    """Logits (B, T, V). gamma/zeta: the clipped softmax (0, 1 is the plain softmax).
    `bos_noise_BxD`: position 0's token embedding is replaced by it times the RMS of the token
    table (a per-sequence random token of the table's scale; None: the learned token).

    Every dot is traced under `MATMUL_PRECISION`."""
    h = quant_model_hidden(params, tokens_BxT, segments_BxT, cfg, gamma, zeta, tap, bos_noise_BxD)
    with jax.default_matmul_precision(MATMUL_PRECISION):
        return _dense(h, params["head.w"], params["head.b"])  # the final head stays in float


def quant_model_hidden(
    params: dict,
    tokens_BxT: jax.Array,
    segments_BxT: jax.Array,
    cfg: QuantModelConfig,
    gamma: jax.Array | float = 0.0,
    zeta: jax.Array | float = 1.0,
    tap: Tap = identity_tap,
    bos_noise_BxD: jax.Array | None = None,
) -> jax.Array:
    """The final hidden states (B, T, D) that the LM head reads (`quant_model_apply` without
    its head; `lm_head_loss_sums` takes them). Every dot is traced under `MATMUL_PRECISION`."""
    with jax.default_matmul_precision(MATMUL_PRECISION):
        return _apply(params, tokens_BxT, segments_BxT, cfg, gamma, zeta, tap, bos_noise_BxD)


def _apply(params, tokens_BxT, segments_BxT, cfg, gamma, zeta, tap, bos_noise_BxD) -> jax.Array:
    gamma = jnp.asarray(gamma, jnp.float32)
    zeta = jnp.asarray(zeta, jnp.float32)
    eps = _LN_EPS[cfg.family]
    ln = functools.partial(_layer_norm, eps=eps)
    p = params
    t_ = tokens_BxT.shape[1]
    x = p["tok_emb"][tokens_BxT]
    if bos_noise_BxD is not None:
        # A random vector of a token's size at position 0: its content is new in every
        # sequence, so a head that parks there must have it suppressed. No gradient flows
        # into the scale, which only follows the table.
        rms = jax.lax.stop_gradient(jnp.sqrt(jnp.mean(jnp.square(p["tok_emb"]))))
        x = x.at[:, 0, :].set(bos_noise_BxD.astype(x.dtype) * rms)
    pos = p["pos_emb"][None, :t_, :]
    if cfg.family == "encoder":
        x = tap("emb.tok_seg", x + p["seg_emb"][segments_BxT])
        x = tap("emb.sum", x + pos)
        h = tap("emb.ln", ln(x, p["emb_ln.scale"], p["emb_ln.bias"]))
        mask = None
    else:
        h = tap("emb.sum", x + pos)
        mask = jnp.tril(jnp.ones((t_, t_), bool))[None, None, :, :]
    act = (lambda z: jax.nn.gelu(z, approximate=False)) if cfg.family == "encoder" else jax.nn.relu
    for i in range(cfg.n_layers):
        pre = f"l{i}."

        def ffn(x: jax.Array, pre: str = pre) -> jax.Array:
            f = tap(pre + "ffn_pre", _dense(x, p[pre + "w1"], p[pre + "b1"]))
            a = tap(pre + "ffn_act", act(f))
            return tap(pre + "ffn_out", _dense(a, p[pre + "w2"], p[pre + "b2"]))

        def attn(x: jax.Array, pre: str = pre) -> jax.Array:
            out, _ = attention(
                p, pre, x, cfg.n_heads, cfg.gate, gamma, zeta, mask, tap, cfg.normalizer
            )
            return out

        if cfg.family == "encoder":  # post-LN (BERT)
            r = tap(pre + "attn_res", h + attn(h))
            h = tap(pre + "attn_ln", ln(r, p[pre + "ln1.scale"], p[pre + "ln1.bias"]))
            r = tap(pre + "ffn_res", h + ffn(h))
            h = tap(pre + "ffn_ln", ln(r, p[pre + "ln2.scale"], p[pre + "ln2.bias"]))
        else:  # pre-LN (OPT)
            a_in = tap(pre + "attn_ln", ln(h, p[pre + "ln1.scale"], p[pre + "ln1.bias"]))
            h = tap(pre + "attn_res", h + attn(a_in))
            f_in = tap(pre + "ffn_ln", ln(h, p[pre + "ln2.scale"], p[pre + "ln2.bias"]))
            h = tap(pre + "ffn_res", h + ffn(f_in))
    if cfg.family == "decoder":
        h = tap("final_ln", ln(h, p["final_ln.scale"], p["final_ln.bias"]))
    return h


def lm_loss_sums(
    logits_BxTxV: jax.Array, labels_BxT: jax.Array, weights_BxT: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(sum of weighted cross-entropies, sum of weights), with the lab's fixed cross-entropy."""
    ce = numerics.cross_entropy(logits_BxTxV, labels_BxT)
    return jnp.sum(ce * weights_BxT), jnp.sum(weights_BxT)


def lm_head_loss_sums(
    params: dict, hidden_BxTxD: jax.Array, labels_BxT: jax.Array, weights_BxT: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """`lm_loss_sums` of the head's logits, through `numerics.linear_cross_entropy`: the head
    (weight and bias) and the fixed cross-entropy in one, the way language models train."""
    ce = numerics.linear_cross_entropy(
        hidden_BxTxD, params["head.w"], labels_BxT, bias=params["head.b"]
    )
    return jnp.sum(ce * weights_BxT), jnp.sum(weights_BxT)
