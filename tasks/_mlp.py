"""The 2-layer MLP of Doshi et al. / Gromov on concatenated one-hot inputs.

Shape letters: B batch, T positions (3), P residues (p), N hidden width, K classes (p).
logits = act(W_in^T [onehot(a); onehot(b)]) W_out. The one-hot product is computed as a
row gather, W_in[a] + W_in[p + b], which is the same sum without the p - 1 zero terms
(exact for finite weights) and gives the same gradients (a scatter-add).

At an emulated `matmul_precision` (`tasks.MATMUL_PRECISIONS`) both layers are the matmuls
the model is defined by: the first layer's forward sums the two rounded rows,
rnd(W_in)[a] + rnd(W_in)[p + b] (what the one-hot matmul computes, the one-hot being exact
in any format), and its backward scatters each example's rounded cotangent of the
pre-activation into W_in (onehot^T rnd(dpre)); the read-out is `tasks.dot`.
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

ACTIVATIONS: tuple[str, ...] = ("relu", "quadratic")
"""The hidden activations `MLPConfig.activation` accepts."""

MLP_INITS: tuple[str, ...] = ("unit", "doshi")
"""Init scales of the two matrices (`MLPConfig.init`):

- 'unit': w_in N(0, 1/2), so every pre-activation (the sum of two rows) starts at unit
  variance, and a fan-in read-out w_out N(0, 1/width).
- 'doshi': both matrices N(0, 0.25 / (2 width)^(2/3)), std 0.05 at width 500: Doshi and
  Gromov's code (d-doshi/Grokking, utils/models.py, `fcn`).
"""


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    """A 2-layer MLP on one-hot (a, b); defaults are the a^2+b^2 mod 97 benchmark model."""

    p: int = 97  # Doshi et al.'s a^2+b^2 and a^3+b tasks are mod 97 (fig2-bottom, fig6)
    width: int = 500  # hidden width of Doshi et al.'s MLP experiments (our reading; override)
    activation: str = "relu"  # one of ACTIVATIONS; "quadratic" is Doshi and Gromov's x^2
    init: str = "unit"  # one of MLP_INITS
    matmul_precision: str = "highest"  # one of tasks.MATMUL_PRECISIONS: exact float32 products

    def __post_init__(self) -> None:
        _matmul.check_matmul_precision(self.matmul_precision)
        if self.p < 2:
            raise ValueError(f"p must be at least 2, got {self.p}")
        if self.width < 1:
            raise ValueError(f"width must be positive, got {self.width}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; expected {ACTIVATIONS}")
        if self.init not in MLP_INITS:
            raise ValueError(f"init must be one of {', '.join(MLP_INITS)}; got {self.init!r}")


def mlp_init(key: jax.Array, cfg: MLPConfig, dtype: DTypeLike) -> Params:
    """`cfg.init`'s init (`MLP_INITS`), drawn in float32 and cast to `dtype`; no biases
    (Gromov's analytic model has none)."""
    return _mlp_init(key, cfg, check_model_dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))  # one compile per (config, dtype)
def _mlp_init(key: jax.Array, cfg: MLPConfig, dt: np.dtype) -> Params:
    shapes = {"w_in": (2 * cfg.p, cfg.width), "w_out": (cfg.width, cfg.p)}
    if cfg.init == "doshi":
        std = math.sqrt(0.25) / (2 * cfg.width) ** (1 / 3)
        return cast_params(normal_init(key, shapes, dict.fromkeys(shapes, std)), dt)
    stds = {
        # Each input sums exactly two rows of w_in (the one-hot a and b), so std 1/sqrt(2)
        # starts every pre-activation at unit variance.
        "w_in": 1.0 / math.sqrt(2.0),
        # Fan-in init of the read-out: logits start O(1).
        "w_out": 1.0 / math.sqrt(cfg.width),
    }
    return cast_params(normal_init(key, shapes, stds), dt)


def mlp_apply(
    params: Params,
    tokens_BxT: jax.Array,
    activation: str = "relu",
    matmul_precision: str = "highest",
) -> jax.Array:
    """Logits (B, p) from tokens `[a, b, =]` (only a and b are read), both layers' matmuls
    at `matmul_precision` (module docstring)."""
    mp = _matmul.check_matmul_precision(matmul_precision)
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected {ACTIVATIONS}")
    w_in = params["w_in"]
    if w_in.dtype != params["w_out"].dtype:
        raise TypeError(
            f"parameters must share one dtype, got {w_in.dtype}, {params['w_out'].dtype}"
        )
    P = w_in.shape[0] // 2
    # Vocabulary p + 1 (the `=` token may sit at position 2); a and b must be residues.
    values = concrete_or_none(tokens_BxT)
    tokens_BxT = check_tokens(tokens_BxT, 3, P + 1)
    if values is not None and values.size and int(values[:, :2].max()) >= P:
        raise ValueError(f"a and b must lie in [0, {P})")
    w_in = _matmul.round_operand(w_in, mp)
    pre_BxN = w_in[tokens_BxT[:, 0]] + w_in[P + tokens_BxT[:, 1]]
    pre_BxN = _matmul.round_output_cotangent(pre_BxN, mp)
    h_BxN = jax.nn.relu(pre_BxN) if activation == "relu" else jnp.square(pre_BxN)
    return _matmul.dot(h_BxN, params["w_out"], mp)
