"""Precision-aware softmax, log-softmax and cross-entropy, and the per-token log-probability
and entropy.

The fixed functions compute in their input dtype (bf16, fp16, fp32, fp64) and
stay accurate where the standard ones break: past the precision cliff
(Softmax Collapse) and as student logits approach teacher logits (Softmax
Cancellation). `numerics.standard` holds the standard versions, `numerics.oracle`
the mpmath references (imported on first use, so training never loads mpmath).

Array arguments are array-likes: JAX or NumPy arrays, scalars, or (nested) lists, which
take JAX's default dtype as `jnp.asarray` gives it. float64 input needs x64 enabled
(`jax.enable_x64`); without it the functions raise rather than compute in float32.
"""

import importlib
from typing import Any

from numerics import standard as standard
from numerics._baselines import clipped_softmax as clipped_softmax
from numerics._baselines import clipped_softmax_gamma as clipped_softmax_gamma
from numerics._baselines import stablemax_cross_entropy as stablemax_cross_entropy
from numerics._baselines import zero_sum_cross_entropy as zero_sum_cross_entropy
from numerics._baselines import zero_sum_gradient as zero_sum_gradient
from numerics._cliffs import equilibrium_margin as equilibrium_margin
from numerics._cliffs import first_zero as first_zero
from numerics._cliffs import precision_cliff as precision_cliff
from numerics._collapse import CollapseStats as CollapseStats
from numerics._collapse import collapse_stats as collapse_stats
from numerics._collapse import collapse_stats_from_rows as collapse_stats_from_rows
from numerics._cross_entropy import cross_entropy as cross_entropy
from numerics._cross_entropy import logit_margin as logit_margin
from numerics._divergence import js_divergence as js_divergence
from numerics._divergence import kl_divergence as kl_divergence
from numerics._divergence import reverse_kl_divergence as reverse_kl_divergence
from numerics._linear import linear_cross_entropy as linear_cross_entropy
from numerics._linear import operand_dtype as linear_operand_dtype
from numerics._linear_divergence import linear_js_divergence as linear_js_divergence
from numerics._linear_divergence import linear_kl_divergence as linear_kl_divergence
from numerics._linear_divergence import (
    linear_topk_kl_divergence as linear_topk_kl_divergence,
)
from numerics._linear_divergence import linear_topk_log_probs as linear_topk_log_probs
from numerics._logsumexp import logsumexp as logsumexp
from numerics._per_token import entropy as entropy
from numerics._per_token import log_prob as log_prob
from numerics._sharded import sharded_cross_entropy as sharded_cross_entropy
from numerics._sharded import (
    sharded_linear_cross_entropy as sharded_linear_cross_entropy,
)
from numerics._soft_target import soft_target_cross_entropy as soft_target_cross_entropy
from numerics._softmax import log_softmax as log_softmax
from numerics._softmax import softmax as softmax

__all__ = [
    "CollapseStats",
    "clipped_softmax",
    "clipped_softmax_gamma",
    "collapse_stats",
    "collapse_stats_from_rows",
    "cross_entropy",
    "entropy",
    "equilibrium_margin",
    "first_zero",
    "js_divergence",
    "kl_divergence",
    "linear_cross_entropy",
    "linear_js_divergence",
    "linear_kl_divergence",
    "linear_operand_dtype",
    "linear_topk_kl_divergence",
    "linear_topk_log_probs",
    "log_prob",
    "log_softmax",
    "logit_margin",
    "logsumexp",
    "oracle",
    "precision_cliff",
    "reverse_kl_divergence",
    "sharded_cross_entropy",
    "sharded_linear_cross_entropy",
    "soft_target_cross_entropy",
    "softmax",
    "stablemax_cross_entropy",
    "standard",
    "zero_sum_cross_entropy",
    "zero_sum_gradient",
]


def __getattr__(name: str) -> Any:
    """`numerics.oracle`, imported on first access (it needs mpmath)."""
    if name == "oracle":
        return importlib.import_module("numerics.oracle")
    raise AttributeError(f"module 'numerics' has no attribute {name!r}")
