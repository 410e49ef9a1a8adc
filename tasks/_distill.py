"""Soft-target distillation (fig7): the two losses, and student-teacher metrics that do not cancel.

Shape letters: N examples, K classes. The student and the teacher share the task and the
model (the student starts as the teacher); a loss compares student logits z_S with the
teacher's z_T at temperature T, with soft targets p = softmax(z_T / T) and student
probabilities q = softmax(z_S / T). The run itself (teacher training, the jitted student
loop, the store) lives in `grokbench.distill`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

import numerics

DISTILL_LOSSES: dict[str, Callable[..., jax.Array]] = {
    "fixed": numerics.soft_target_cross_entropy,
    "standard": numerics.standard.soft_target_cross_entropy,
}
"""Per-example soft-target losses by `RunConfig.loss` name: `fixed` takes the teacher logits
and forms q - p from the logit difference (exactly 0 at z_S = z_T); `standard` is optax's
-sum p log_softmax(z_S / T), whose gradient subtracts p from q (Softmax Cancellation)."""

DISTILL_OBJECTIVES: dict[str, dict[str, Callable[..., jax.Array]]] = {
    "soft_target": DISTILL_LOSSES,
    "kl": {"fixed": numerics.kl_divergence, "standard": numerics.standard.kl_divergence},
}
"""The distillation loss by `RunConfig.distill_objective`, then `RunConfig.loss`: the paper's
soft-target cross-entropy, or the KL divergence KL(p || q) = CE(p, q) - H(p), whose gradient
is the same q - p (optax's `kl_divergence`, the standard one, computes it bit for bit as its
soft-target CE does) and whose value is 0 at the teacher."""

# Taylor coefficients 1/n! of e^d - 1 - d (n = 2..12): on |d| < 1/8 the 13th term is below
# 1e-19 of the sum, so the series is exact to rounding there.
_EXPM1_MINUS_X = tuple(1.0 / math.factorial(n) for n in range(2, 13))
_SERIES_BELOW = 0.125


def _expm1_minus_x(d: jax.Array) -> jax.Array:
    """e^d - 1 - d >= 0 without cancellation: a series near 0, expm1(d) - d elsewhere.

    expm1(d) - d loses log2(2 / |d|) bits to cancellation; past |d| = 1/8 that is at most
    4 bits (relative error ~2e-15), inside it the series takes over.
    """
    small = jnp.abs(d) < _SERIES_BELOW
    x = jnp.where(small, d, jnp.zeros_like(d))  # no overflow in the unused branch
    poly = jnp.full_like(d, _EXPM1_MINUS_X[-1])
    for c in reversed(_EXPM1_MINUS_X[:-1]):
        poly = poly * x + c
    return jnp.where(small, x * x * poly, jnp.expm1(d) - d)


def _x_minus_log1p(w: jax.Array) -> jax.Array:
    """w - log1p(w) >= 0 (w > -1) without cancellation.

    With u = w / (2 + w), log1p(w) = 2 atanh(u) = 2 (u + u^3/3 + ...), and w - 2u =
    w^2 / (2 + w), so w - log1p(w) = w^2 / (2 + w) - 2 (u^3/3 + u^5/5 + ...): each term at
    most u/6 of the one before, nothing cancels. Used for |w| < 1/8 (u < 1/15); the
    direct form elsewhere.
    """
    small = jnp.abs(w) < _SERIES_BELOW
    x = jnp.where(small, w, jnp.zeros_like(w))
    u = x / (2 + x)
    u2 = u * u
    tail = u2 * (1 / 3 + u2 * (1 / 5 + u2 * (1 / 7 + u2 * (1 / 9 + u2 * (1 / 11)))))
    series = x * x / (2 + x) - 2 * u * tail
    return jnp.where(small, series, w - jnp.log1p(w))


def kl_divergence(
    student_logits_NxK: ArrayLike, teacher_logits_NxK: ArrayLike, temperature: float = 1.0
) -> jax.Array:
    """KL(p || q) per row in float64 from the logits, accurate down to KL ~ 1e-300; needs x64.

    Student first, as every loss here and in `numerics` (p from the teacher, q the student's).

    With delta = (z_S - z_T) / T (exact: the logits are widened to float64 first) centred
    under p as d = delta - sum p delta, KL = log sum_k p_k e^{d_k} - sum_k p_k d_k
    = S - psi(y + S), where S = sum p (e^d - 1 - d) >= 0, y = sum p d (~0) and
    psi(w) = w - log1p(w): every piece is a sum of non-negative terms or a series that
    does not cancel, so tiny KLs keep their digits (the textbook sum p (log p - log q)
    loses them to rounding at ~1e-16 |delta|). Exactly 0 when the logits are equal.
    """
    if not jax.config.read("jax_enable_x64"):
        raise ValueError("kl_divergence computes in float64: use `with jax.enable_x64(True):`")
    return _kl_divergence(student_logits_NxK, teacher_logits_NxK, temperature)


@jax.jit  # one compiled program instead of dozens of small eager ones
def _kl_divergence(
    student_logits_NxK: jax.Array, teacher_logits_NxK: jax.Array, temperature: float
) -> jax.Array:
    f64 = jnp.float64
    t = jnp.asarray(temperature, f64)
    teacher = teacher_logits_NxK.astype(f64)
    delta = (student_logits_NxK.astype(f64) - teacher) / t
    p = numerics.softmax(teacher / t)
    d = delta - jnp.sum(p * delta, axis=-1, keepdims=True)
    s = jnp.sum(p * _expm1_minus_x(d), axis=-1)
    y = jnp.sum(p * d, axis=-1)
    return s - _x_minus_log1p(y + s)


def soft_target_gradient(
    loss: str,
    student_logits_NxK: ArrayLike,
    teacher_logits_NxK: ArrayLike,
    temperature: float,
    objective: str = "soft_target",
) -> jax.Array:
    """d loss_i / d(z_S / T) per example, (N, K) in the logits' dtype: the q - p of `loss`
    (of `DISTILL_OBJECTIVES[objective]`).

    At z_S = z_T this is the residual gradient: exactly 0 for `fixed`; for `standard` the
    mismatch of its forward softmax and backward log-softmax (about 1e-3 in bf16, 1e-8 in
    fp32, 1e-17 in fp64; tests/tasks/test_distill.py measures it).
    """
    return _soft_target_gradient(
        DISTILL_OBJECTIVES[objective][loss], student_logits_NxK, teacher_logits_NxK, temperature
    )


@functools.partial(jax.jit, static_argnums=0)
def _soft_target_gradient(
    objective: Callable[..., jax.Array],
    student_logits_NxK: jax.Array,
    teacher_logits_NxK: jax.Array,
    temperature: float,
) -> jax.Array:
    # Differentiate with respect to z / T itself (passed in with T = 1): the same tempered
    # logits the losses form internally, so this is q - p as the backward pass computes it.
    t = jnp.asarray(temperature, student_logits_NxK.dtype)
    teacher = teacher_logits_NxK / t
    return jax.grad(lambda u: jnp.sum(objective(u, teacher)))(student_logits_NxK / t)
