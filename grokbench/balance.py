"""The update balance at a margin plateau: D and S of `grokbench.equilibrium`'s docstring.

Kept apart from `grokbench.equilibrium` so that `grokbench.summary`, which puts the terms
in each run's summary, does not import the analyzer (which reads run directories through
`grokbench.sweep`, which trains through `grokbench.experiment`, which loads through
`grokbench.summary`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import numerics
from grokbench import engine
from grokbench.config import RunConfig
from grokbench.precision import get_precision, precision_scope
from tasks import compiled_cache

__all__ = []  # package-internal: only other harness modules use these names


@compiled_cache(maxsize=16)
def _radial_slope(static: RunConfig):
    """jit(params, x, y) -> mean over examples of d m_n(c theta) / dc at c = 1."""
    _, forward = engine.build_forward(static, get_precision(static.precision), fast=True)

    def margins(scale: jax.Array, params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        logits = forward(jax.tree.map(lambda w: scale.astype(w.dtype) * w, params), x)
        return numerics.logit_margin(logits[:, : static.p], y)

    def slope(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        one = jnp.ones((), jnp.float32)
        if static.matmul_precision != "highest":
            # The emulated matmuls' rounding is a custom_vjp (tasks.dot), which has no
            # forward mode: the same derivative of the mean, by reverse mode.
            def mean_margin(c: jax.Array) -> jax.Array:
                return jnp.mean(margins(c, params, x, y).astype(jnp.float32))

            return jax.grad(mean_margin)(one)
        _, d = jax.jvp(lambda c: margins(c, params, x, y), (one,), (one,))
        return jnp.mean(d.astype(jnp.float32))

    return jax.jit(slope)


def balance_terms(cfg: RunConfig, params: Mapping[str, Any]) -> dict[str, float] | None:
    """The radial update balance's D and S (`grokbench.equilibrium`'s docstring) at
    `params`, `cfg`'s final parameters; None where no balance exists (lambda = 0, eps = 0,
    a distillation run) or where some lambda |theta_i| >= 1 (beyond any normalised step)."""
    if not cfg.weight_decay or not cfg.eps or cfg.teacher_steps:
        return None
    flat = np.concatenate([np.ravel(np.asarray(w, np.float64)) for w in params.values()])
    decay = cfg.weight_decay * np.abs(flat)
    if not np.isfinite(flat).all() or (decay >= 1).any():
        return None
    with precision_scope(cfg.precision):
        data = engine.load_data(cfg)
        slope = _radial_slope(engine.static_config(cfg))(
            jax.tree.map(jnp.asarray, dict(params)), data.x_train, data.y_train
        )
    return {
        "radial_margin_slope": float(slope),
        "balance_norm": float(np.sum(flat**2 / (1 - decay))),
    }


def balance_margin(cfg: RunConfig, slope: float | None, norm: float | None) -> float | None:
    """log(1/eps) + log(D / (lambda S)): the balance's plateau (None without D and S)."""
    if slope is None or norm is None or slope <= 0 or norm <= 0:
        return None
    return math.log(1 / cfg.eps) + math.log(slope / (cfg.weight_decay * norm))
