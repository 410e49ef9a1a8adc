"""One entry point for the harness: a config in, `init` and `apply` out."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
from jax.typing import DTypeLike

from tasks._common import Params
from tasks._mlp import MLPConfig, mlp_apply, mlp_init
from tasks._transformer import (
    TransformerConfig,
    transformer_apply,
    transformer_apply_fast,
    transformer_init,
)


class Model(NamedTuple):
    """A model as two pure functions: `init(key, dtype)` and `apply(params, tokens_BxT)`."""

    init: Callable[[jax.Array, DTypeLike], Params]
    apply: Callable[[Params, jax.Array], jax.Array]


def build_model(cfg: TransformerConfig | MLPConfig, fast: bool = True) -> Model:
    """Bind a config; transformers use the fast forward pass unless `fast=False`."""
    if isinstance(cfg, TransformerConfig):
        apply = transformer_apply_fast if fast else transformer_apply
        return Model(functools.partial(_init_transformer, cfg=cfg), apply)
    if isinstance(cfg, MLPConfig):
        return Model(
            functools.partial(_init_mlp, cfg=cfg),
            functools.partial(mlp_apply, activation=cfg.activation),
        )
    raise TypeError(f"unknown model config {type(cfg).__name__}")


def _init_transformer(key: jax.Array, dtype: DTypeLike, *, cfg: TransformerConfig) -> Params:
    return transformer_init(key, cfg, dtype)


def _init_mlp(key: jax.Array, dtype: DTypeLike, *, cfg: MLPConfig) -> Params:
    return mlp_init(key, cfg, dtype)
