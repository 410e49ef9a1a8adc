"""The standard (buggy) softmax family, computed the way jax.nn and optax do.

These exist so experiments compare like with like: the same entry checks and
signatures as the fixed functions, and the same sequence of operations as
`jax.nn.log_softmax`, `jax.nn.softmax`, `jax.nn.logsumexp`,
`optax.softmax_cross_entropy_with_integer_labels` and
`optax.softmax_cross_entropy` (optax 0.2.8), so they collapse at the precision
cliff exactly as those do. The tests check them bit-for-bit against jax.nn and
optax. `numerics` itself does not import optax (docs/architecture.md). The per-token
outputs are written as RL trainers write them: `log_prob` gathers the label's entry of
`jax.nn.log_softmax`, `entropy` is logsumexp(z) - sum softmax(z) z (verl's
`entropy_from_logits`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate
from numerics._cross_entropy import prepare
from numerics._lm_loss import validate_options
from numerics._validate import Axis


def log_softmax(
    x: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
    *,
    sink: ArrayLike | None = None,
) -> jax.Array:
    """`jax.nn.log_softmax`: x - max - log(sum(exp(x - max))); 1 + e^-m rounds to 1 past the cliff.

    With `sink`, `jax.nn.log_softmax` of the row [x, sink] without its last entry
    (`softmax`'s sink form).

    Args:
      x: floating-point logits.
      axis: the class axis.
      where: optional boolean mask; masked entries get -inf.
      sink: optional sink logit, as `numerics.log_softmax`'s.

    Returns:
      An array of the shape and dtype of `x`.
    """
    x = _validate.float_array(x, "x", float8=True)
    axes = _validate.class_axes(x, axis, "x")
    where = _validate.entry_mask(where, x.shape)
    if sink is not None:
        return _with_sink_column(jax.nn.log_softmax, x, axes, where, sink)
    return jax.nn.log_softmax(x, axis=axes, where=where)


def _with_sink_column(fn, x: jax.Array, axes, where, sink: ArrayLike) -> jax.Array:
    """fn (jax.nn's softmax or log_softmax) of the rows [x, sink] without the last entry.

    The way GPT-OSS's reference writes its attention sinks (torch.cat of the scores and
    the sink, softmax, drop the last column) and fused kernels compute them: the sink in
    the logits' dtype, the max taken over the row and the sink, exp, one sum, divide. Past
    the precision cliff of the row's margin over the others and the sink, 1 + the others'
    terms rounds to 1 as in the plain formula.
    """
    sink = _validate.sink_logits(sink, x.shape, axes).astype(x.dtype)
    if x.size == 0:
        return x
    flat = _validate.classes_last(x, axes)
    rows = jnp.concatenate([flat, sink[..., None]], axis=-1)
    mask = None
    if where is not None:
        kept = _validate.classes_last(where, axes)
        mask = jnp.concatenate([kept, jnp.ones((*kept.shape[:-1], 1), bool)], axis=-1)
    out = fn(rows, axis=-1, where=mask)[..., :-1]
    return _validate.classes_back(out, axes, x.shape)


def softmax(
    x: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
    *,
    sink: ArrayLike | None = None,
) -> jax.Array:
    """`jax.nn.softmax`: its backward pass zeroes the dominant entry's gradient past the cliff.

    With `sink`, the sink softmax e^x_k / (e^s + sum_j e^x_j) as kernels write it:
    `jax.nn.softmax` of the row [x, s] (s in x's dtype) without its last entry. Its value
    and the sink's gradient hold, but the dominant entry's gradient p_i (1 - p_i) is
    exactly 0 once the margin to the others and the sink passes the cliff.

    Args:
      x: floating-point logits.
      axis: the class axis.
      where: optional boolean mask; masked entries get 0.
      sink: optional sink logit, as `numerics.softmax`'s.

    Returns:
      Probabilities of the shape and dtype of `x`.
    """
    x = _validate.float_array(x, "x", float8=True)
    axes = _validate.class_axes(x, axis, "x")
    where = _validate.entry_mask(where, x.shape)
    if sink is not None:
        return _with_sink_column(jax.nn.softmax, x, axes, where, sink)
    return jax.nn.softmax(x, axis=axes, where=where)


def logsumexp(
    a: ArrayLike,
    axis: Axis = None,
    b: ArrayLike | None = None,
    keepdims: bool = False,
    return_sign: bool = False,
    where: ArrayLike | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """`jax.nn.logsumexp`: max + log(sum(b exp(a - max))); a tail below the max's ulp rounds away.

    log(1 + e^-m) rounds to 0 past `precision_cliff(dtype)`, so logsumexp([0, -20]) is 0 in
    float32 (exactly 2.06e-9). The arguments and checks of `numerics.logsumexp`.

    Args:
      a: floating-point array.
      axis: an axis, a tuple of axes, or None for all axes.
      b: optional scale factors of a's dtype, broadcastable to `a`.
      keepdims: keep the reduced axes, of size 1.
      return_sign: return (log|sum|, sign of the sum).
      where: optional boolean mask broadcastable to `a`.

    Returns:
      log(sum), or the pair (log|sum|, sign), of a's dtype.
    """
    a, axes, b, where, out_shape = _validate.reduction(a, axis, b, where, keepdims)
    out = jax.nn.logsumexp(a, axes, b, keepdims, return_sign, where)
    return tuple(o.reshape(out_shape) for o in out) if return_sign else out.reshape(out_shape)


def cross_entropy(
    logits: ArrayLike,
    labels: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
    *,
    z_loss: float = 0.0,
    soft_cap: float | None = None,
    label_smoothing: float = 0.0,
) -> jax.Array:
    """optax's integer-label cross-entropy: logsumexp(z) - z_t, and the options as peers add them.

    Past `precision_cliff(dtype)` both the loss and the target gradient
    q_t - 1 round to exactly 0 while the non-target gradients stay positive
    (Softmax Collapse), so the gradients no longer sum to zero.

    The options, in the logits' dtype, the way trainers write them: `soft_cap` first,
    z = c * tanh(z / c) (Gemma 2); `label_smoothing` as
    `optax.softmax_cross_entropy(z, optax.smooth_labels(one_hot(t), alpha))` (alpha / K
    on each of the K classes, masked ones included); `z_loss` adds
    w * logsumexp(z)^2 (T5X), whose autodiff gradient is (1 + 2 w lse) softmax -
    onehot, with the factor 1 + 2 w lse rounded in the dtype. Without options it is
    optax's function bit for bit.

    Args:
      logits: floating-point logits, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis.
      where: optional boolean mask broadcastable to `logits`.
      z_loss: weight w >= 0 of logsumexp^2.
      soft_cap: c > 0 or None.
      label_smoothing: alpha in [0, 1).

    Returns:
      Per-example losses of shape `labels.shape`, in the dtype of `logits`.
    """
    opts = validate_options(z_loss, soft_cap, label_smoothing)
    logits, labels, mask = prepare(logits, labels, axis, where, float8=True)
    if opts.soft_cap is not None:
        c = jnp.asarray(opts.soft_cap, logits.dtype)
        logits = c * jnp.tanh(logits / c)
    log_normalizers = jax.nn.logsumexp(logits, axis=-1, where=mask)
    if opts.label_smoothing:
        k = logits.shape[-1]
        alpha = jnp.asarray(opts.label_smoothing, logits.dtype)
        targets = jax.nn.one_hot(labels, k, dtype=logits.dtype) * (1 - alpha) + alpha / k
        log_q = jax.nn.log_softmax(logits, axis=-1, where=mask)
        out = -(targets * log_q).sum(-1, where=mask)
    else:
        label_logits = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
        out = log_normalizers - label_logits
    if opts.z_loss:
        out = out + jnp.asarray(opts.z_loss, logits.dtype) * log_normalizers**2
    if mask is not None:
        out = jnp.where(jnp.any(mask, axis=-1), out, jnp.zeros((), out.dtype))
    return out


def soft_target_cross_entropy(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    """optax's soft-target cross-entropy with p = softmax(z_T / T): -sum p log_softmax(z_S / T).

    Its gradient q - p subtracts two separately rounded probabilities, and the
    forward softmax and backward log-softmax differ, so it is not zero at
    z_S = z_T (Softmax Cancellation): about 1e-3 in bf16, 1e-8 in fp32. With
    `where`, `optax.softmax_cross_entropy(z_S, jax.nn.softmax(z_T, where=where),
    where=where)`.

    Args:
      student_logits: floating-point logits, class axis at `axis`.
      teacher_logits: floating-point logits of the same shape and dtype.
      axis: the class axis.
      temperature: T > 0; both logit arrays are divided by it.
      where: optional boolean mask, of the logits' rank (entries) or without the
        class axes (examples), as in `numerics.cross_entropy`.

    Returns:
      Per-example losses: the shape of the logits without `axis`, their dtype.
    """
    student, teacher, mask = _validate.student_teacher(
        student_logits, teacher_logits, axis, temperature, where
    )
    targets = jax.nn.softmax(teacher, axis=-1, where=mask)
    log_q = jax.nn.log_softmax(student, axis=-1, where=mask)
    return -(targets * log_q).sum(-1, where=mask)


def _log_probabilities(student_logits, teacher_logits, axis, temperature, where):
    """Checked (log q, log p, mask) from jax.nn.log_softmax, class axes flattened last."""
    student, teacher, mask = _validate.student_teacher(
        student_logits, teacher_logits, axis, temperature, where
    )
    log_q = jax.nn.log_softmax(student, axis=-1, where=mask)
    log_p = jax.nn.log_softmax(teacher, axis=-1, where=mask)
    return log_q, log_p, mask


def kl_divergence(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    """optax's `kl_divergence(log_softmax(z_S / T), softmax(z_T / T))`: sum p (log p - log q).

    log(softmax(z_T)) and log_softmax(z_S) round differently, so at z_S = z_T the value
    and the gradient q - p are rounding residuals, not 0 (about 1e-3 in bf16), and near
    the teacher the value, of order |z_S - z_T|^2, drowns in the rounding of two terms
    of order 1 (Softmax Cancellation).

    Args:
      student_logits: floating-point logits, class axis at `axis`.
      teacher_logits: floating-point logits of the same shape and dtype.
      axis: the class axis.
      temperature: T > 0; both logit arrays are divided by it.
      where: optional boolean mask, as in `soft_target_cross_entropy`.

    Returns:
      Per-example divergences: the shape of the logits without `axis`, their dtype.
    """
    student, teacher, mask = _validate.student_teacher(
        student_logits, teacher_logits, axis, temperature, where
    )
    log_q = jax.nn.log_softmax(student, axis=-1, where=mask)
    targets = jax.nn.softmax(teacher, axis=-1, where=mask)
    zero = jnp.zeros((), targets.dtype)
    loss = targets * (jnp.where(targets == 0, zero, jnp.log(targets)) - log_q)
    return jnp.sum(loss, axis=-1, where=mask)


def reverse_kl_divergence(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    """KL(q || p) as optax's `kl_divergence_with_log_targets(log p, log q)` (torch's
    `kl_div(log p, log q, log_target=True)`): sum exp(log q) (log q - log p).

    That is, with the teacher's log p as optax's `log_predictions` and the student's log q
    as its `log_targets`: called the other way round, student first as a trainer calls
    it, optax's function is KL(p || q), `numerics.kl_divergence`.

    The value is exactly 0 at z_S = z_T, but its gradient q (log q - log p - KL) + q
    (1 - sum q) carries the rounding of sum q and of exp(log q).

    Args:
      student_logits: floating-point logits, class axis at `axis`.
      teacher_logits: floating-point logits of the same shape and dtype.
      axis: the class axis.
      temperature: T > 0; both logit arrays are divided by it.
      where: optional boolean mask, as in `soft_target_cross_entropy`.

    Returns:
      Per-example divergences: the shape of the logits without `axis`, their dtype.
    """
    log_q, log_p, mask = _log_probabilities(
        student_logits, teacher_logits, axis, temperature, where
    )
    return jnp.sum(jnp.exp(log_q) * (log_q - log_p), axis=-1, where=mask)


def js_divergence(
    student_logits: ArrayLike,
    teacher_logits: ArrayLike,
    axis: Axis = -1,
    temperature: ArrayLike = 1.0,
    where: ArrayLike | None = None,
) -> jax.Array:
    """The Jensen-Shannon divergence as Liger-Kernel's JSD (beta = 1/2) writes it, from
    log-probabilities: sum (p log p + q log q - 2 m log m) / 2 with m = (p + q) / 2.

    Three terms of order 1 cancel to a value of order |z_S - z_T|^2, and a -inf logit
    makes 0 * -inf = NaN.

    Args:
      student_logits: floating-point logits, class axis at `axis`.
      teacher_logits: floating-point logits of the same shape and dtype.
      axis: the class axis.
      temperature: T > 0; both logit arrays are divided by it.
      where: optional boolean mask, as in `soft_target_cross_entropy`.

    Returns:
      Per-example divergences: the shape of the logits without `axis`, their dtype.
    """
    log_q, log_p, mask = _log_probabilities(
        student_logits, teacher_logits, axis, temperature, where
    )
    p, q = jnp.exp(log_p), jnp.exp(log_q)
    m = (p + q) / 2
    return jnp.sum(p * log_p + q * log_q - 2 * m * jnp.log(m), axis=-1, where=mask) / 2


def log_prob(
    logits: ArrayLike, labels: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    """The label's entry of `jax.nn.log_softmax`, as RL trainers gather it: z_y - max -
    log(sum(exp(z - max))).

    log(1 + e^-m) rounds to 0 past the precision cliff of the dtype the fused computation
    runs in, so a confident token's log-probability is exactly 0, and its gradient's
    target entry 1 - p_y with it (bf16 on XLA's CPU backend, which keeps the fusion in
    float32: from m = 16.75; fp16: from 7.625).
    The arguments and checks of `numerics.log_prob`; padding rows give 0.

    Args:
      logits: floating-point logits, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis.
      where: optional boolean mask, entries or whole rows (as `numerics.log_prob`).

    Returns:
      Log-probabilities of shape `labels.shape`, in the dtype of `logits`.
    """
    logits, labels, mask = prepare(logits, labels, axis, where)
    log_q = jax.nn.log_softmax(logits, axis=-1, where=mask)
    out = jnp.take_along_axis(log_q, labels[..., None], axis=-1)[..., 0]
    if mask is not None:
        out = jnp.where(jnp.any(mask, axis=-1), out, jnp.zeros((), out.dtype))
    return out


def entropy(logits: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None) -> jax.Array:
    """The entropy as RL trainers compute it (verl's `entropy_from_logits`):
    logsumexp(z) - sum_j softmax(z)_j z_j, in the logits' dtype.

    Two numbers of the size of the logits whose difference is H: in bf16 H is 0 or
    rounding noise once a row is peaked (both terms round to the max), and noise of
    order ulp(1e4) = 64 when every logit carries an offset of 1e4. The arguments and
    checks of `numerics.entropy`; padding rows give 0.

    Args:
      logits: floating-point logits, class axis at `axis`.
      axis: the class axis.
      where: optional boolean mask, entries or whole rows (as `numerics.entropy`).

    Returns:
      Entropies of the shape of `logits` without `axis`, in its dtype.
    """
    logits = _validate.float_array(logits, "logits")
    axes = _validate.class_axes(logits, axis, "logits")
    mask = _validate.loss_mask(where, logits.shape, axes)
    logits = _validate.classes_last(logits, axes)
    mask = None if mask is None else _validate.classes_last(mask, axes)
    lse = jax.nn.logsumexp(logits, axis=-1, where=mask)
    p = jax.nn.softmax(logits, axis=-1, where=mask)
    kept = logits if mask is None else jnp.where(mask, logits, jnp.zeros((), logits.dtype))
    out = lse - jnp.sum(p * kept, axis=-1, where=mask)
    if mask is not None:
        out = jnp.where(jnp.any(mask, axis=-1), out, jnp.zeros((), out.dtype))
    return out
