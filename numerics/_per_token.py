r"""Per-token outputs on materialized logits: the label's log-probability and the entropy.

What RL trainers take per token (issue 47): log pi(y | x) for the policy-gradient loss and
the softmax's entropy for its bonus, both accurate in bf16 where the standard formulas
round to 0 or cancel.

**log_prob.** With the margin m = z_y - logsumexp_{j != y} z_j,

    log p_y = -log(1 + sum_{j != y} e^-(z_y - z_j)) = -log1p(e^-m),

the fixed cross-entropy negated (the same statistics, `numerics.cross_entropy`'s margin
form): e^-m is summed apart from the target's own 1 and handed to log1p, so log p_y stays
-e^-m to exponent underflow. The standard `log_softmax(z)[y]` forms log(1 + e^-m) and is
exactly 0 once 1 + e^-m rounds to 1 in the precision it is computed in: in bf16 on XLA's
CPU backend, which evaluates the fused computation in float32, from m = 16.75 (float32's
cliff, 24 ln 2 = 16.64); rounding each operation to bf16 would give 0 from m = 5.5625
(8 ln 2 = 5.545); in fp16 from 7.625. Gradient onehot(y) - p, its target entry
S_others / S, never 1 - p_y.

**entropy.** With M the row max, the gaps g_j = M - z_j >= 0 (g = 0 at the max),
S_others = sum_{j != i} e^-g_j over every entry but one maximum i and S = 1 + S_others,

    p_j = e^-g_j / S,    log p_j = -g_j - log S,

    H = -sum_j p_j log p_j = sum_j p_j (g_j + log S) = log S sum_j p_j + sum_j p_j g_j
      = log1p(S_others) + A,    A = (sum_j g_j e^-g_j) / S,

using sum_j p_j = 1. Both terms are non-negative, so H is never a difference: its
relative error is that of its two terms, whatever the row. The maximum's own term
g_i e^-g_i = 0 * 1 = 0 drops out of the sum by itself (no index). For a peaked row
(two classes, margin m) H = log1p(e^-m) + m e^-m / (1 + e^-m), about (1 + m) e^-m.
The standard form that trainers use, H = logsumexp(z) - sum_j p_j z_j (verl's
`entropy_from_logits`), subtracts two numbers of the size of |z| whose difference is
H: in bf16 its error is about ulp(M), so H is 0 (or noise) past the cliff, and with a
common offset of 1e4 on every logit it is noise of order 64.

Gradient: dH/dz_k = -sum_j (dp_j / dz_k)(log p_j + 1) = -p_k (log p_k + H), and with
log p_k = -g_k - log S and H = log S + A,

    dH/dz_k = p_k (g_k - A).

At the max (g_i = 0) that is -p_i A: no cancellation, accurate past the cliff, where
1 - p_i and the standard autodiff through lse - sum p z give 0. Off the max, g_k - A is
a difference of two non-negative numbers that cancels only where the gradient itself
crosses 0 (g_k = A, the entry whose log-probability is -H): the conditioning of the
function, not of the formula. The gradients sum to sum_k p_k g_k - A sum_k p_k = 0.

`entropy`'s code lives in `numerics._entropy` (re-exported here), so that
`cross_entropy(..., return_aux=True)` uses it without an import cycle. Both are computed in
float32 for bf16 and fp16 (float64 for float64) and rounded once;
the derivatives are linear tangent rules (`jax.custom_jvp`): forward and reverse mode,
and higher orders by autodiff of the gradient formula.

Underflow: the terms e^-g_j are flushed to 0 by XLA's CPU kernels once below the
smallest normal number (g_j > 87.3 in float32 and in bf16 / fp16, which compute in it;
708.4 in float64). H is then the sum of the terms that remain: on logits [m, 0] it is 0
from m = 87.34 in float32, where the exact (1 + m) e^-m is still about 1e-36, as the
fixed cross-entropy's target gradient is 0 from there on.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics._cross_entropy import margin_cross_entropy, prepare
from numerics._entropy import entropy as entropy
from numerics._validate import Axis


def log_prob(
    logits: ArrayLike, labels: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""The label's log-probability per row, log softmax(z)_y, accurate near 0.

    With the margin m = z_y - logsumexp_{j != y} z_j,

        log_prob(z, y) = -log(1 + sum_{j != y} e^-(z_y - z_j)) = -log1p(e^-m),

    computed as `cross_entropy` computes its loss (and negated): e^-m is never added to
    1, so a confident token's log-probability stays -e^-m down to exponent underflow,
    where `jax.nn.log_softmax(z)[y]` (`numerics.standard.log_prob`) is exactly 0 from a
    precision cliff on (bf16 on XLA's CPU backend: from m = 16.75, float32's cliff, as the
    fusion computes in float32; fp16: 7.625). bf16 and fp16 compute in float32 and
    round once. The gradient is onehot(y) - softmax(z), its target entry
    S_others / S (never 1 - p_y, which rounds to 0 past the cliff): what a
    policy-gradient loss sum_t A_t log_prob_t needs. A linear tangent rule
    (`jax.custom_jvp`): forward and reverse mode, second order too.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> z = jnp.array([9.0, -9.0, -9.0], jnp.bfloat16)
      >>> log_prob(z, jnp.array(0))  # standard.log_prob gives 0  # doctest: +NUMBER
      Array(-3.05e-08, dtype=bfloat16)
      >>> jax.grad(log_prob)(z, jnp.array(0))  # doctest: +NUMBER
      Array([3.05e-08, -1.525e-08, -1.525e-08], dtype=bfloat16)

    Edge cases, as `cross_entropy` (negated): K = 1 gives 0; NaN in a row gives NaN;
    labels outside [0, K) raise when concrete and give NaN under `jit`; a row masked out
    entirely (padding) gives 0 and gradient 0; a masked-out label gives
    z_y - logsumexp(kept).

    Args:
      logits: floating-point array (bf16, fp16, fp32, fp64), class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis` (flat indices
        into the class slice for a tuple of axes).
      axis: the class axis, a tuple of axes, or None for all axes.
      where: optional boolean mask, of the logits' rank (entries) or of the labels'
        (whole rows), as in `cross_entropy`.

    Returns:
      Log-probabilities (<= 0) of shape `labels.shape`, in the dtype of `logits`.
    """
    logits, labels, mask = prepare(logits, labels, axis, where)
    if logits.shape[-1] == 0:  # no class, so no valid label (only traced ones get here)
        return jnp.full(labels.shape, jnp.nan, logits.dtype)
    return -margin_cross_entropy(logits, labels, mask)
