r"""KL, reverse KL and Jensen-Shannon divergences on student and teacher logits.

All three are written as sums of non-negative terms in the log-ratio
s_k = log(q_k / p_k), q the student's and p the teacher's softmax. With
phi(t) = e^t - 1 - t >= 0 and any weights w_k, x_k = w_k e^(t_k) that sum to 1,

    sum_k w_k log(w_k / x_k) = sum_k w_k phi(t_k)      (sum_k w_k (e^t_k - 1) = 0),

so KL(p || q) = sum p phi(s), KL(q || p) = sum q phi(-s) and, with
m = (p + q) / 2 and psi(s) = log((1 + e^s) / 2) = log(m / p),
JS = (sum p phi(psi(s)) + sum q phi(psi(-s))) / 2. No term cancels another, and phi
is evaluated from its Taylor series near 0, so a divergence of order s^2 keeps its
digits where KL = CE(p, q) - H(p) loses all of them (the Softmax Cancellation of the fix
paper's Sec. 3, in each divergence's own form). s itself comes from the logits'
difference, as in `soft_target_cross_entropy`: d_k = (z_S,k - z_T,k) - (max z_S -
max z_T) and s = d - log1p(sum_k p_k expm1(d_k)). At student == teacher every d_k is
exactly 0, hence s = 0 and every value and gradient is exactly 0, in every dtype.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate
from numerics._soft_target import accurate_log1p, signed_gap
from numerics._softmax import compute_dtype, finite_row_max
from numerics._validate import Axis

_SERIES_TERMS = {jnp.dtype(jnp.float32): 12, jnp.dtype(jnp.float64): 20}
"""phi(t) = t^2 sum_{k=2}^{N} t^(k-2) / k! on |t| <= 1: the first omitted term, 1/(N+1)!,
is below half an ulp of phi(t) / t^2 >= phi(-1) = e^-1 (float32: 1/13! = 1.6e-10 against
2^-25 e^-1 = 1.1e-8; float64: 1/21! = 2e-20 against 2^-54 e^-1 = 2e-17)."""

_LARGE = 30.0  # beyond it e^t dwarfs 1 + t: w phi(t) = x - w (1 + t), with no cancellation


def phi_weighted(w: jax.Array, t: jax.Array, x: jax.Array) -> jax.Array:
    """w (e^t - 1 - t) >= 0, given x = w e^t, accurate for every t (and w = 0, t = inf).

    |t| <= 1: w t^2 P(t) from phi's Taylor series (expm1(t) - t would cancel);
    1 < |t| <= 30: w (expm1(t) - t); t > 30: x - w (1 + t), where x is the other
    distribution's probability, never w e^t (which overflows); w = 0 gives x there.
    """
    small = jnp.abs(t) <= 1
    ts = jnp.where(small, t, jnp.zeros((), t.dtype))
    n = _SERIES_TERMS[jnp.dtype(t.dtype)]
    poly = jnp.full(t.shape, 1 / math.factorial(n), t.dtype)
    for k in range(n - 1, 1, -1):  # Horner, from 1/N! down to 1/2
        poly = poly * ts + 1 / math.factorial(k)
    series = w * (ts * ts) * poly
    mid = jnp.where(small | (t > _LARGE), jnp.ones((), t.dtype), t)
    middle = w * (jnp.expm1(mid) - mid)
    zero = jnp.zeros((), t.dtype)
    large = (x - w) - jnp.where(w > 0, w * t, zero)
    return jnp.where(small, series, jnp.where(t > _LARGE, large, middle))


def psi(s: jax.Array) -> jax.Array:
    """psi(s) = log((1 + e^s) / 2), from log1p(expm1(s) / 2) (accurate at 0; -log 2 at
    -inf), and s - log 2 + log1p(e^-s) past 30, where expm1 would overflow."""
    big = s > _LARGE
    low = jnp.where(big, jnp.zeros((), s.dtype), s)
    high = jnp.where(big, s, jnp.full((), _LARGE, s.dtype))
    return jnp.where(
        big, high - math.log(2.0) + jnp.log1p(jnp.exp(-high)), jnp.log1p(jnp.expm1(low) / 2)
    )


def _pieces(student: jax.Array, teacher: jax.Array):
    """(p, q, s) elementwise in the compute dtype: teacher and student probabilities and
    s = log(q / p) from the logits' difference. An entry at -inf in both is p = q = 0,
    s = 0; at -inf in one of them, s is -inf or +inf."""
    s_max, t_max = finite_row_max(student), finite_row_max(teacher)
    e_a, e_b = jnp.exp(student - s_max), jnp.exp(teacher - t_max)
    s_sum = jnp.sum(e_a, axis=-1, keepdims=True)
    t_sum = jnp.sum(e_b, axis=-1, keepdims=True)
    out = jnp.isneginf(student) & jnp.isneginf(teacher)
    # The raw difference is exact when the logits are close (Sterbenz): rounding a and b
    # apart would swamp a tiny student-teacher gap.
    d = jnp.where(out, jnp.zeros((), student.dtype), (student - teacher) - (s_max - t_max))
    # log(S_S / S_T) = log1p(sum_k (e^a_k - e^b_k) / S_T), each difference from d without
    # cancellation (`signed_gap`): exactly 0 where every d_k is 0.
    ratio = accurate_log1p(jnp.sum(signed_gap(e_a, e_b, d), axis=-1, keepdims=True) / t_sum)
    return e_b / t_sum, e_a / s_sum, d - ratio


def zero_where_no_mass(weight: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.where(weight > 0, weight * value, jnp.zeros((), value.dtype))


def _kl(p, q, s):
    """KL(p || q) per row, and its gradients (student, teacher)."""
    value = jnp.sum(phi_weighted(p, s, q), axis=-1)
    # d/dz_S = q - p, from s without subtracting rounded probabilities; d/dz_T =
    # p (log(p / q) - KL).
    return value, signed_gap(q, p, s), zero_where_no_mass(p, -s - value[..., None])


def _reverse_kl(p, q, s):
    """KL(q || p) per row, and its gradients (student, teacher)."""
    value = jnp.sum(phi_weighted(q, -s, p), axis=-1)
    return value, zero_where_no_mass(q, s - value[..., None]), -signed_gap(q, p, s)


def _js(p, q, s):
    """JS(p, q) per row, and its gradients (student, teacher)."""
    m = (p + q) / 2
    psi_p, psi_q = psi(s), psi(-s)  # log(m / p), log(m / q)
    kl_pm = jnp.sum(phi_weighted(p, psi_p, m), axis=-1)
    kl_qm = jnp.sum(phi_weighted(q, psi_q, m), axis=-1)
    # d JS / d q_k = log(q_k / m_k) / 2, through the softmax: q (log(q / m) - KL(q || m)) / 2.
    g_student = zero_where_no_mass(q, -psi_q - kl_qm[..., None]) / 2
    g_teacher = zero_where_no_mass(p, -psi_p - kl_pm[..., None]) / 2
    return (kl_pm + kl_qm) / 2, g_student, g_teacher


_FORMS = {"kl": _kl, "reverse_kl": _reverse_kl, "js": _js}


def _evaluate(form: str, student: jax.Array, teacher: jax.Array):
    """(value, student gradient, teacher gradient) in the compute dtype."""
    ctype = compute_dtype(student.dtype)
    return _FORMS[form](*_pieces(student.astype(ctype), teacher.astype(ctype)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _divergence(form, student, teacher):
    return _evaluate(form, student, teacher)[0].astype(student.dtype)


@functools.partial(_divergence.defjvp, symbolic_zeros=True)
def _divergence_jvp(form, primals, tangents):
    student, teacher = primals
    value, g_student, g_teacher = _evaluate(form, student, teacher)
    # Linear in the tangents: reverse mode is grad * cotangent, each gradient rounded
    # once to the logits' dtype. A teacher held constant (a symbolic zero) costs nothing.
    terms = [
        jnp.sum(g.astype(student.dtype) * dz, axis=-1)
        for g, dz in ((g_student, tangents[0]), (g_teacher, tangents[1]))
        if not isinstance(dz, jax.custom_derivatives.SymbolicZero)
    ]
    return value.astype(student.dtype), sum(terms[1:], terms[0])


def divergence(form: str, student_logits, teacher_logits, axis, temperature, where):
    """Check the inputs and evaluate `form` ('kl', 'reverse_kl' or 'js') per example."""
    student, teacher, mask = _validate.student_teacher(
        student_logits, teacher_logits, axis, temperature, where
    )
    if mask is None:
        return _divergence(form, student, teacher)
    # Masked entries become -inf in both: p = q = 0 and s = 0 there, so the exact zero
    # at student == teacher stays. A padding row is computed on zeros and set to 0; the
    # selects give its logits cotangent 0.
    padding = ~jnp.any(mask, axis=-1, keepdims=True)
    zero = jnp.zeros((), student.dtype)

    def kept(z):
        return jnp.where(padding, zero, jnp.where(mask, z, -jnp.inf))

    value = _divergence(form, kept(student), kept(teacher))
    return jnp.where(padding[..., 0], jnp.zeros((), value.dtype), value)


_COMMON = """
    Computed in float32 for bf16, fp16 and float8 logits (float64 for float64) and rounded
    once to the logits' dtype; the gradient is exactly 0 at student == teacher in every
    dtype, and so is the value. Derivatives: a linear tangent rule (`jax.custom_jvp`) with
    the gradients below for student and teacher, so reverse mode is one pass; derivatives
    beyond the first come from autodiff of those formulas. The gradient is with respect
    to the logits (dividing by T included), as `soft_target_cross_entropy`.

    Masks as in `soft_target_cross_entropy`: masked entries are left out of both
    distributions, a row masked out entirely gives 0 and gradient 0. NaN in a row gives
    NaN for that row.

    Args:
      student_logits: floating-point logits, class axis at `axis`.
      teacher_logits: floating-point logits of the same shape and dtype.
      axis: the class axis, a tuple of axes normalised over together, or None.
      temperature: T > 0; both logit arrays are divided by it.
      where: optional boolean mask, of the logits' rank (entries) or without the class
        axes (examples), as in `cross_entropy`.

    Returns:
      Per-example divergences: the shape of the logits without `axis`, their dtype.
    """


def kl_divergence(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    return divergence("kl", student_logits, teacher_logits, axis, temperature, where)


kl_divergence.__doc__ = (
    r"""KL(p || q) of the teacher's softmax p from the student's q, exact at student == teacher.

    KL = sum_k p_k log(p_k / q_k) = sum_k p_k phi(s_k), phi(t) = e^t - 1 - t, with
    s = log(q / p) from the logits' difference (module docstring), so each term is >= 0
    and no digit is lost near the teacher, where KL ~ Var_p(s) / 2. Student gradient
    q - p, formed from s (never as a difference of rounded probabilities); teacher
    gradient p (log(p / q) - KL). Classes where the teacher's p is 0 (a -inf logit, or
    one whose probability underflows) contribute 0, and their gradient q stays finite.
    The value optax's `kl_divergence(log_softmax(z_S), softmax(z_T))` computes, without
    its residual at student == teacher; optax's `kl_divergence_with_log_targets(
    log_predictions, log_targets)` is this function with the student's log-probabilities
    as `log_predictions` and the teacher's as `log_targets` (same argument order).

    Both arguments are logits, so both rows are normalised: log-probabilities whose
    probabilities sum to s != 1 are read as those probabilities / s. optax takes its
    inputs as they are, so a target row summing to s (and predictions summing to r)
    gives optax's s KL + s log s - s log r where this gives KL (docs/compat.md, on optax's
    own test inputs). For optax's number on unnormalised targets, call optax.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> z_t = jnp.array([2.0, 1.0, 0.0], jnp.bfloat16)
      >>> # optax gives 0.00130463 and [0.00390625 0.00195312 0.000976562]
      >>> kl_divergence(z_t, z_t), jax.grad(kl_divergence)(z_t, z_t)
      (Array(0, dtype=bfloat16), Array([0, 0, 0], dtype=bfloat16))
      >>> z_s = jnp.array([1e-4, 0.0])  # KL = 1e-8 / 8; optax gives 0.0
      >>> print(f"{float(kl_divergence(z_s, jnp.zeros(2))):.6e}")
      1.250000e-09
"""
    + _COMMON
)


def reverse_kl_divergence(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    return divergence("reverse_kl", student_logits, teacher_logits, axis, temperature, where)


reverse_kl_divergence.__doc__ = (
    r"""KL(q || p) of the student's softmax q from the teacher's p (mode-seeking distillation).

    KL(q || p) = sum_k q_k s_k = sum_k q_k phi(-s_k) with s = log(q / p) from the
    logits' difference: no cancellation near the teacher. Student gradient
    q (s - KL(q || p)); teacher gradient p - q. Where the teacher's probability
    underflows but its logit is finite, s stays finite and so does the value; where the
    teacher's logit is -inf and the student's is not, KL(q || p) is +inf, as it is exactly.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> z_t = jnp.array([2.0, 1.0, 0.0], jnp.float16)
      >>> jax.grad(reverse_kl_divergence)(z_t, z_t)
      Array([0., 0., 0.], dtype=float16)
"""
    + _COMMON
)


def js_divergence(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    return divergence("js", student_logits, teacher_logits, axis, temperature, where)


js_divergence.__doc__ = (
    r"""Jensen-Shannon divergence of the student's and teacher's softmaxes, in nats.

    With m = (p + q) / 2 and psi(s) = log((1 + e^s) / 2) = log(m / p),

        JS = (KL(p || m) + KL(q || m)) / 2 = (sum p phi(psi(s)) + sum q phi(psi(-s))) / 2,

    every term >= 0, psi from log1p(expm1(s) / 2). Bounded by log 2, and finite
    wherever either probability is 0. Student gradient q (log(q / m) - KL(q || m)) / 2,
    teacher gradient p (log(p / m) - KL(p || m)) / 2. The generalized JSD of Liger-Kernel
    and the distillation literature at beta = 1/2.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> z_t = jnp.array([2.0, 1.0, 0.0])
      >>> jax.grad(js_divergence)(z_t, z_t)
      Array([0., 0., 0.], dtype=float32)
      >>> round(float(js_divergence(jnp.array([0.0, -jnp.inf]), jnp.array([-jnp.inf, 0.0]))), 6)
      0.693147
"""
    + _COMMON
)
