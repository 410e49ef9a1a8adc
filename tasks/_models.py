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
    """Bind a config; transformers use the fast forward pass unless `fast=False` or their
    `matmul_precision` is emulated (the fast pass is exact at 'highest' only: see
    `transformer_apply_fast`)."""
    if isinstance(cfg, TransformerConfig):
        init = functools.partial(_init_transformer, cfg=cfg)
        if cfg.matmul_precision != "highest":
            return Model(
                init, functools.partial(transformer_apply, matmul_precision=cfg.matmul_precision)
            )
        return Model(init, transformer_apply_fast if fast else transformer_apply)
    if isinstance(cfg, MLPConfig):
        apply = functools.partial(mlp_apply, activation=cfg.activation)
        if cfg.matmul_precision != "highest":
            apply = functools.partial(apply, matmul_precision=cfg.matmul_precision)
        return Model(functools.partial(_init_mlp, cfg=cfg), apply)
    raise TypeError(f"unknown model config {type(cfg).__name__}")


def _init_transformer(key: jax.Array, dtype: DTypeLike, *, cfg: TransformerConfig) -> Params:
    return transformer_init(key, cfg, dtype)


def _init_mlp(key: jax.Array, dtype: DTypeLike, *, cfg: MLPConfig) -> Params:
    return mlp_init(key, cfg, dtype)
