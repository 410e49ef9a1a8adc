"""Fixed soft-target cross-entropy: q - p computed in log space (Softmax Cancellation fix)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate
from numerics._softmax import finite_row_max, log_softmax_last, shifted_sums, softmax_last
from numerics._validate import Axis


def _lowest(x: jax.Array) -> jax.Array:
    """The lowest finite value of x's dtype, as a 0-d array.

    Each pass takes it through its own optimization barrier with the logits: as
    one constant shared by the passes, XLA's CPU reduction fusion stores its
    broadcast as a (rows, K) array.
    """
    return jnp.asarray(jnp.finfo(x.dtype).min, x.dtype)


def _shifted(student, teacher, s_max, t_max, lowest):
    """a = z_S - max z_S and b = z_T - max z_T (both <= 0), -inf clamped to finite.

    Clamping -inf to the lowest finite value keeps every product p * a and every
    difference a - b free of 0 * inf and inf - inf, without a `where`: XLA's CPU
    reductions fuse arithmetic into the sum but not selects or index masks.
    """
    return jnp.maximum(student - s_max, lowest), jnp.maximum(teacher - t_max, lowest)


def signed_gap(x: jax.Array, y: jax.Array, log_ratio: jax.Array) -> jax.Array:
    """x - y from x, y >= 0 and t = log(x / y), without cancellation and without a `where`.

    x - y = sign(t) max(x, y) (1 - e^-|t|), and
    1 - e^-|t| = -expm1(-|t|) is accurate for every t: tiny differences keep
    their digits, and a y that underflowed to 0 (t = +inf) leaves x. Exactly 0
    when t = 0. (XLA's CPU reductions fuse this arithmetic, `sign` included, into
    a sum; a `where`, and so `jnp.copysign`, would make them store their inputs as
    (rows, K) arrays first.)
    """
    return jnp.sign(log_ratio) * (jnp.maximum(x, y) * -jnp.expm1(-jnp.abs(log_ratio)))


def accurate_log1p(x: jax.Array) -> jax.Array:
    """log1p(x), working around XLA's CPU float64 log1p, off by up to 127 ulps on
    [-0.5, -0.25] (measured here). There 1 + x is exact (Sterbenz), so log(1 + x)
    is as accurate as log. Per-row scalars only: the `where` costs nothing."""
    return jnp.where(x < -0.25, jnp.log(1 + x), jnp.log1p(x))


def _forward(student, teacher):
    """The loss and the per-row statistics its gradients are built from."""
    s_max, s_sum, s_rest = shifted_sums(student)
    # log q_k = a_k - log1p(S_S - 1): the margin form, S_S - 1 summed apart from
    # the max's own 1 by `shifted_sums`.
    log_norm = jnp.log1p(s_rest)
    t_max = finite_row_max(teacher)
    # Distinct barriers per pass: XLA would otherwise share the exps between the
    # sums and store them as (rows, K) arrays. Recomputing is far cheaper.
    teacher_t, t_max_t = jax.lax.optimization_barrier((teacher, t_max))
    t_sum = jnp.sum(jnp.exp(teacher_t - t_max_t), axis=-1, keepdims=True)
    pinned = (student, teacher, s_max, t_max, _lowest(student), log_norm)
    a, b = _shifted(*jax.lax.optimization_barrier(pinned)[:5])
    # p_k = e^b_k / S_T is accurate as it is (no 1 - p is ever needed), so the loss
    # is sum_k e^b_k (log_norm - a_k) / S_T, one pass over both logit arrays.
    weighted = jnp.sum(jnp.exp(b) * (log_norm - a), axis=-1, keepdims=True)
    loss = (weighted / t_sum)[..., 0]
    # Only O(rows) statistics are kept; the gradients rebuild q and p.
    return loss, (s_max, s_sum, log_norm, t_max, t_sum)


@jax.custom_jvp
def _soft_target(student, teacher):
    return _forward(student, teacher)[0]


@functools.partial(_soft_target.defjvp, symbolic_zeros=True)
def _soft_target_jvp(primals, tangents):
    student, teacher = primals
    # The primal through the custom function itself, so higher orders use this rule.
    loss = _soft_target(student, teacher)
    stats = _forward(student, teacher)[1]
    # Linear in the tangents, so reverse mode is grad * cotangent: one fused pass per
    # gradient. A teacher held constant (a symbolic zero) costs nothing.
    terms = [
        jnp.sum(grad(student, teacher, loss, *stats) * dz, axis=-1)
        for grad, dz in ((_student_grad, tangents[0]), (_teacher_grad, tangents[1]))
        if not isinstance(dz, jax.custom_derivatives.SymbolicZero)
    ]
    return loss, sum(terms[1:], terms[0])


def _pieces(student, teacher, s_max, t_max, lowest):
    """Elementwise (a, b, d): shifted student and teacher logits, centred difference."""
    a, b = _shifted(student, teacher, s_max, t_max, lowest)
    # d = (z_S - z_T) - (max z_S - max z_T) = a - b, but formed from the raw
    # difference, which is exact when the logits are close (Sterbenz): the
    # rounding of a and b separately would swamp a tiny student-teacher gap.
    d = (jnp.maximum(student, lowest) - jnp.maximum(teacher, lowest)) - (s_max - t_max)
    return a, b, d


@jax.custom_jvp
def _student_grad(student, teacher, loss, s_max, s_sum, log_norm, t_max, t_sum):
    """dL/dz_S = q - p, from the forward statistics."""
    # Each pass reads the logits afresh behind its own (distinct) barrier:
    # recomputing a few exps is far cheaper than XLA storing them as (rows, K).
    a, b, d = _pieces(
        *jax.lax.optimization_barrier((student, teacher, s_max, t_max, _lowest(student)))
    )
    # log(S_S / S_T) = log1p(sum_k (e^a_k - e^b_k) / S_T) = log1p(sum_k p_k expm1(d_k)):
    # the normaliser ratio from the logit differences, never as a difference of
    # two rounded logs (paper eq. 9, centred on the rows' maxima instead of on the
    # p-mean of d, which saves a pass and keeps the same accuracy). Divided by S_T
    # once after the sum: per-row factors inside it cost XLA's CPU reduction a
    # (rows, K) broadcast each.
    gaps = jnp.sum(signed_gap(jnp.exp(a), jnp.exp(b), d), axis=-1, keepdims=True)
    ratio = accurate_log1p(gaps / t_sum)

    # s_k = log(q_k / p_k) and u_k = q_k - p_k from it: no subtraction of nearly
    # equal probabilities; exactly 0 where s_k = 0 (student == teacher). The u_k
    # are each within a few ulps, so they sum to zero within rounding; the
    # paper's extra pass re-centring them along q (g = u - q sum u) is skipped.
    teacher, student, ratio, lowest = jax.lax.optimization_barrier(
        (teacher, student, ratio, _lowest(student))
    )
    a, b, d = _pieces(student, teacher, s_max, t_max, lowest)
    return signed_gap(jnp.exp(a) / s_sum, jnp.exp(b) / t_sum, d - ratio)


@_student_grad.defjvp
def _student_grad_jvp(primals, tangents):
    # d(q - p) = dq - dp, each the centred softmax tangent. The statistics are
    # functions of the logits already accounted for there, so their tangents are
    # not used.
    student, teacher = primals[:2]
    dq = jax.jvp(lambda z: softmax_last(z, None), (student,), (tangents[0],))[1]
    dp = jax.jvp(lambda z: softmax_last(z, None), (teacher,), (tangents[1],))[1]
    return _student_grad(*primals), dq - dp


@jax.custom_jvp
def _teacher_grad(student, teacher, loss, s_max, s_sum, log_norm, t_max, t_sum):
    """dL/dz_T = -p (log q + L) = p (log_norm - a - L): exact for the forward loss,
    for users who also differentiate through the teacher."""
    p, neg_log_q = _teacher_pieces(student, teacher, s_max, s_sum, log_norm, t_max, t_sum)
    return p * (neg_log_q - loss[..., None])


def _teacher_pieces(student, teacher, s_max, s_sum, log_norm, t_max, t_sum):
    """(p, -log q), elementwise, behind their own barrier."""
    student, teacher, log_norm, lowest = jax.lax.optimization_barrier(
        (student, teacher, log_norm, _lowest(student))
    )
    a, b, _ = _pieces(student, teacher, s_max, t_max, lowest)
    return jnp.exp(b) / t_sum, log_norm - a


@_teacher_grad.defjvp
def _teacher_grad_jvp(primals, tangents):
    # d(-p (log q + L)) = -dp (log q + L) - p (dlog q + dL), from the centred
    # softmax and log-softmax tangents and the loss's own tangent. (Autodiff of the
    # forward statistics is not used: reverse mode through the weights min(1, k gap)
    # of `shifted_sums` multiplies by k, 1 / the smallest normal number.)
    student, teacher, loss = primals[:3]
    d_student, d_teacher = tangents[:2]
    p, neg_log_q = _teacher_pieces(student, teacher, *primals[3:])
    dp = jax.jvp(lambda z: softmax_last(z, None), (teacher,), (d_teacher,))[1]
    dlog_q = jax.jvp(lambda z: log_softmax_last(z, None), (student,), (d_student,))[1]
    grad_teacher = _teacher_grad(*primals)
    d_loss = jnp.sum(_student_grad(*primals) * d_student, axis=-1, keepdims=True) + jnp.sum(
        grad_teacher * d_teacher, axis=-1, keepdims=True
    )
    return grad_teacher, dp * (neg_log_q - loss[..., None]) - p * (dlog_q + d_loss)


def soft_target_cross_entropy(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    r"""Soft-target cross-entropy whose gradient is exactly zero when student == teacher.

    Forward: L = -sum_k p_k log q_k with p = softmax(z_T / T), q = softmax(z_S / T),
    both in the fixed margin form. Gradient (after paper eq. 9): with
    the logits divided by T and each shifted by its row maximum,
    d_k = (z_S,k - max z_S) - (z_T,k - max z_T) (from the raw difference z_S - z_T),

        r = log1p(sum_i p_i expm1(d_i)) = log(S_S / S_T),   s_k = d_k - r = log(q_k / p_k),
        g_k = q_k - p_k = sign(s_k) max(q_k, p_k) (-expm1(-|s_k|)),

    where S_S, S_T are the shifted exponential sums. So q - p is never formed by
    subtracting two rounded probabilities. At z_S = z_T every d_k is exactly 0,
    hence r = 0, s = 0 and g = 0 exactly, in every dtype; the standard formula
    leaves a residual of about 1e-3 in bf16 and 1e-8 in fp32. (The paper centres
    d under p and re-centres g = u - q sum u; centring on the row maxima saves a
    pass, and the g_k, each within a few ulps, need no re-centring.)

    The gradient is with respect to z_S / T (no T^2 rescaling, as in
    `optax.softmax_cross_entropy`); multiply the loss by T^2 yourself if you
    want Hinton et al.'s scaling. The teacher also receives its exact gradient,
    -p (log q + L) / T, should you differentiate through it.

    Derivatives: a linear tangent rule (`jax.custom_jvp`), dL = sum_k g_k dz_S,k
    (+ the teacher's term when the teacher is differentiated), so forward mode
    and Hessians work and reverse mode is its transpose; a teacher held constant
    costs nothing. g's own tangent is dq - dp from `softmax`'s centred rule.
    Under `jit` each gradient is one fused pass; without it, reverse mode keeps
    the student gradient, a (rows, K) array (optax keeps two).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> z_t = jnp.array([2.0, 1.0, 0.0])
      >>> jax.grad(soft_target_cross_entropy)(z_t, z_t)
      Array([0., 0., 0.], dtype=float32)

    Edge cases: classes with -inf teacher logits (p = 0) contribute nothing, even
    where the student logit is -inf too; NaN in a row gives NaN for that row.

    Masks as in optax's `softmax_cross_entropy(z_S, softmax(z_T, where=where),
    where=where)`: masked entries are left out of both normalisers (p = q = 0 there,
    gradient 0), and a row masked out entirely (padding) gives loss 0 and gradient 0
    for student and teacher, where optax's gradient is NaN. The exact zero at
    student == teacher holds under any mask.

    Args:
      student_logits: floating-point logits, class axis at `axis`.
      teacher_logits: floating-point logits of the same shape and dtype.
      axis: the class axis, a tuple of axes normalised over together, or None.
      temperature: T > 0; both logit arrays are divided by it.
      where: optional boolean mask. Of the rank of the logits it masks entries; of
        their rank without the class axes it masks whole examples (as
        `cross_entropy`'s `where`).

    Returns:
      Per-example losses: the shape of the logits without `axis`, their dtype.
    """
    student, teacher, mask = _validate.student_teacher(
        student_logits, teacher_logits, axis, temperature, where
    )
    if student.dtype.itemsize == 1:  # float8 is a storage format: float32 math, one rounding
        wide = (student.astype(jnp.float32), teacher.astype(jnp.float32))
        loss = soft_target_cross_entropy(*wide, where=mask)
        return loss.astype(student.dtype)
    if mask is None:
        return _soft_target(student, teacher)
    # Masked entries become -inf in both, which the loss and both gradients already
    # treat as p = q = 0 (d = 0 there when student == teacher, so the exact zero
    # stays). A padding row would be 0 / 0: it is computed on zeros instead and its
    # loss set to 0, and the selects give its logits cotangent and tangent 0.
    padding = ~jnp.any(mask, axis=-1, keepdims=True)
    zero = jnp.zeros((), student.dtype)

    def kept(z):
        return jnp.where(padding, zero, jnp.where(mask, z, -jnp.inf))

    loss = _soft_target(kept(student), kept(teacher))
    return jnp.where(padding[..., 0], jnp.zeros((), loss.dtype), loss)
