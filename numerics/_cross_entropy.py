"""Fixed hard-label cross-entropy and the logit margin."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from numerics import _validate, _vocab_parallel
from numerics._entropy import entropy
from numerics._lm_loss import (
    LossOptions,
    cap_slope,
    capped,
    loss_from,
    options_cross_entropy,
    validate_options,
)
from numerics._logsumexp import logsumexp
from numerics._softmax import (
    finite_row_max,
    logsumexp_or_neg_inf,
    set_along_rows,
    softmax_last,
)
from numerics._validate import Axis


def _normalizers(logits: jax.Array, labels: jax.Array, mask: jax.Array | None):
    """Per-row (z_max, z_t - z_max, [t is kept], S_others, S), keepdims, and `e0`.

    S sums the kept entries. S_others = sum_{j != t} e^(z_j - z_max) never contains
    the target's own term: when t is the argmax that term is the 1 that would
    swallow e^-m past the cliff. A masked-out target is not in S, so S_others = S.
    All six are in the compute dtype (`_compute_dtype`); e0 is None for bf16 and fp16.

    Two layouts, by dtype, chosen from measurements (benchmarks/bench_cross_entropy.py,
    docs/studies/cross-entropy-speed.md):

    - float32 and float64 logits (the compute dtype itself): e0 = e^(z - z_max) with
      the target's entry set to 0 (a scatter of one entry per row, in place) is one
      (rows, K) array, and S_others is its plain sum. The gradient is then e0 / S with
      the target's entry filled in, written in place over e0: one exp per entry, as
      optax, and XLA's CPU reduction reads a plain array (measured against optax's
      value_and_grad: a weighted sum 1.11-1.13x, a select in the exp pass 1.06-1.08x,
      this layout 1.01x).
    - bf16 and fp16 logits (float32 sums): a float32 e0 would be a temporary twice
      the size of the logits (it cannot become the bf16 gradient in place), so the sum
      recomputes e^(z - z_max) from the logits, the target left out by a float-iota
      weight that the reduction fuses (`_not_target`), and the gradient pass recomputes
      it again (`e0` is None). Memory over speed: the stored layout measured ~10%
      faster in bf16 (0.47x against 0.50-0.52x optax), at 2 bytes more per logit.
    """
    ctype = _compute_dtype(logits.dtype)
    masked = logits if mask is None else jnp.where(mask, logits, -jnp.inf)
    z_max = finite_row_max(masked).astype(ctype)  # a row of only -inf has sums 0, not NaN
    # Out-of-range labels (possible only under jit) are clipped for the gather and
    # turned into NaN by `valid_rows`.
    z_t = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip").astype(ctype)
    shift_t = z_t - z_max
    kept_t = target_kept(labels, mask)
    zero = jnp.zeros((), ctype)
    if logits.dtype == ctype:
        e0 = set_along_rows(jnp.exp(masked - z_max), labels, jnp.zeros(labels.shape, ctype))
        s_others = jnp.sum(e0, -1, keepdims=True)
    else:
        e0 = None
        # The barrier pins the sum's inputs, so that XLA merges the copies of this pass
        # that value_and_grad traces (the loss and the gradient's statistics) instead
        # of rewriting them apart, which stores the exps and weights as (rows, K) arrays.
        z, z_max_s = jax.lax.optimization_barrier((masked, z_max))
        z = z.astype(ctype)
        s_others = jnp.sum(jnp.exp(z - z_max_s) * _not_target(labels, z), -1, keepdims=True)
    # S >= 1 holds a max entry's e^0 = 1 (the target's or another's), so adding the
    # target's term to S_others rounds harmlessly.
    s_all = s_others + jnp.where(kept_t, jnp.exp(shift_t), zero)
    return z_max, shift_t, kept_t, s_others, s_all, e0


def _compute_dtype(dtype) -> jnp.dtype:
    """float64 for float64 logits, float32 for the others: the per-row sums, the loss
    and the gradient are computed there and rounded once to the logits' dtype."""
    return jnp.dtype(jnp.float64 if dtype == jnp.float64 else jnp.float32)


def _index_exact(n: int, dtype) -> bool:
    """Whether every class index below n is exact in float `dtype`."""
    return n <= 2 ** (jnp.finfo(dtype).nmant + 1)


def _not_target(labels: jax.Array, logits: jax.Array) -> jax.Array:
    """Weights 0 at each row's target and 1 elsewhere, in the dtype of `logits`.

    Computed as min(1, |j - t|) from a floating-point iota where the indices are
    exact in it: XLA's CPU reductions fuse that arithmetic into the sum, but not an
    integer comparison, which costs a (rows, K) temporary and several times the time.
    """
    shape, last = logits.shape, logits.ndim - 1
    if not _index_exact(shape[-1], logits.dtype):
        iota = jax.lax.broadcasted_iota(labels.dtype, shape, last)
        return (iota != labels[..., None]).astype(logits.dtype)
    iota = jax.lax.broadcasted_iota(logits.dtype, shape, last)
    gap = jnp.abs(iota - labels[..., None].astype(logits.dtype))
    return jnp.minimum(gap, jnp.ones((), logits.dtype))


def target_kept(labels: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Whether each row's target entry is kept by the mask (keepdims)."""
    if mask is None:
        return jnp.ones((*labels.shape, 1), bool)
    return jnp.take_along_axis(mask, labels[..., None], axis=-1, mode="clip")


def valid_rows(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Rows whose label lies in [0, K)."""
    return (labels >= 0) & (labels < logits.shape[-1])


def _any_kept(mask: jax.Array | None, shape) -> jax.Array:
    """Rows with at least one kept entry (keepdims); a fully masked row is padding."""
    if mask is None:
        return jnp.ones((*shape[:-1], 1), bool)
    return jnp.any(mask, axis=-1, keepdims=True)


def _forward(logits, labels, mask):
    """The loss and the per-row statistics (in the compute dtype) its gradient is built from."""
    z_max, shift_t, kept_t, s_others, s_all, e0 = _normalizers(logits, labels, mask)
    loss = loss_from(kept_t, shift_t, s_others, s_all)
    valid = valid_rows(logits, labels)[..., None]
    padding = ~_any_kept(mask, logits.shape)
    # Padding rows give loss 0 and gradient 0 whatever their label, as in optax;
    # other rows with an invalid label give NaN for both.
    zero, one, nan = (jnp.asarray(v, z_max.dtype) for v in (0, 1, jnp.nan))
    loss = jnp.where(padding, zero, jnp.where(valid, loss, nan))
    inv_s = jnp.where(padding, one, jnp.where(valid, one / s_all, nan))
    return loss[..., 0].astype(logits.dtype), (z_max, s_others, inv_s, e0)


@jax.custom_jvp
def margin_cross_entropy(logits, labels, mask):
    return _forward(logits, labels, mask)[0]


@margin_cross_entropy.defjvp
def _cross_entropy_jvp(primals, tangents):
    logits, labels, mask = primals
    # The primal through the custom function itself, so higher orders use this rule.
    loss = margin_cross_entropy(logits, labels, mask)
    grad = _gradient(logits, labels, mask, *_forward(logits, labels, mask)[1])
    # Linear in the tangent: reverse mode transposes it to grad * cotangent, fused
    # into `_gradient`'s elementwise pass.
    return loss, jnp.sum(grad * tangents[0], axis=-1)


@jax.custom_jvp
def _gradient(logits, labels, mask, z_max, s_others, inv_s, e0):
    """dL/dz from the forward statistics: q_j for j != t, q_t - 1 = -S_others / S at t.

    Non-target q_j = e^(z_j - z_max) / S: a small number computed directly. Target
    q_t - 1 = -S_others / S, never 1 - 1 = 0: it stays accurate past the precision
    cliff, so the K gradients still sum to zero within rounding.
    """
    if e0 is not None:  # float32 / float64: in place over the forward's exps
        return set_along_rows(e0, labels, -s_others[..., 0]) * inv_s
    # bf16 / fp16: recompute the exps (see `_normalizers`).
    z = logits if mask is None else jnp.where(mask, logits, -jnp.inf)  # masked: q = 0
    iota = jax.lax.broadcasted_iota(labels.dtype, z.shape, z.ndim - 1)
    is_target = iota == labels[..., None]
    # The barrier keeps XLA from sharing e^(z - z_max) with the forward sum, which
    # would store it as a (rows, K) array between the passes: inv_s rides along, so
    # this pass is ordered after the forward sum and cannot be merged with it.
    z, z_max, inv_s = jax.lax.optimization_barrier((z, z_max, inv_s))
    e = jnp.exp(z.astype(z_max.dtype) - z_max)
    grad = jnp.where(is_target, -s_others, e) * inv_s
    return grad.astype(logits.dtype)


@_gradient.defjvp
def _gradient_jvp(primals, tangents):
    # d(q - onehot) = dq: the softmax tangent, centred on the argmax. The statistics
    # are functions of the logits already accounted for in dq, so their tangents
    # are not used.
    logits, mask = primals[0], primals[2]
    dq = jax.jvp(lambda z: softmax_last(z, mask), (logits,), (tangents[0],))[1]
    return _gradient(*primals), jnp.where(_any_kept(mask, logits.shape), dq, jnp.zeros_like(dq))


def prepare(
    logits: ArrayLike, labels: ArrayLike, axis, where: ArrayLike | None = None, float8=False
):
    """Check inputs and flatten the class axes last; shared with the baselines (which,
    unlike `cross_entropy`, refuse float8 logits: `float8`)."""
    logits = _validate.float_array(logits, "logits", float8=float8)
    axes = _validate.class_axes(logits, axis, "logits")
    mask = _validate.loss_mask(where, logits.shape, axes)
    labels = _validate.class_labels(labels, logits, axes, mask)
    # Labels index the class axis; int32 is enough for any K and keeps the iota small.
    if labels.dtype.itemsize < 4 or jnp.issubdtype(labels.dtype, jnp.unsignedinteger):
        labels = labels.astype(jnp.int32)
    logits = _validate.classes_last(logits, axes)
    mask = None if mask is None else _validate.classes_last(mask, axes)
    return logits, labels, mask


def cross_entropy(
    logits: ArrayLike,
    labels: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
    *,
    z_loss: float = 0.0,
    soft_cap: float | None = None,
    label_smoothing: float = 0.0,
    vocab_axis: str | None = None,
    return_aux: bool = False,
) -> jax.Array | tuple[jax.Array, dict[str, jax.Array]]:
    r"""Cross-entropy with integer labels that survives the precision cliff.

    With the margin m = z_t - logsumexp_{j != t} z_j (paper eq. 6),

        L(z, t) = -log_softmax(z)_t = log(1 + e^-m),

    evaluated as log1p(e^-m) without ever adding 1 to e^-m. Shifting by the max
    as usual, S_others = sum_{j != t} e^(z_j - z_max) is summed apart from the
    target's own term, and the gradient is

        g_j = e^(z_j - z_max) / S  (j != t),      g_t = q_t - 1 = -S_others / S,

    with S = S_others + e^(z_t - z_max). So the target gradient stays
    -e^-m / (1 + e^-m) down to exponent underflow instead of rounding to 0 once
    m passes `precision_cliff(dtype)`, and the gradients sum to zero within
    rounding. Unlike the paper's target-shifted form, no entry is computed as
    exp(a - L) with a large L, so misclassified rows (m < 0) are as accurate as
    confident ones: within about 2 ulps in bf16 and fp16 (tests/tolerances.py).
    For bf16 and fp16 logits the sums, the loss and the gradient are computed in
    float32 and rounded once to the logits' dtype.

    Derivatives: a linear tangent rule (`jax.custom_jvp`), dL = sum_j g_j dz_j, so
    forward mode (`jax.jvp`, `jax.jacfwd`, Hessians) works and reverse mode is its
    transpose, g * cotangent; g's own tangent is the softmax tangent of
    `softmax`, centred on the argmax, so second derivatives survive the cliff too.
    Cost, under `jit` (benchmarks/bench_cross_entropy.py measures it against optax):
    float32 and float64 take optax's passes, the max, one exp pass that stores
    e^(z - z_max) with the target's entry zeroed, its plain sum, and the gradient
    written in place over it; bf16 and fp16 logits read the logits twice forward
    (the max, then S_others in float32, the target left out by an index weight that
    XLA fuses into the sum) and once backward, where g is recomputed and fused into
    the backward product, so no float32 (rows, K) array is stored.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> loss, grad = jax.value_and_grad(cross_entropy)(jnp.array([9.0, -9.0, -9.0]), jnp.array(0))
      >>> # optax gives 0.0 and [0.0, 1.523e-08, 1.523e-08]
      >>> print(loss, grad)  # doctest: +NUMBER
      3.04600e-08 [-3.04600e-08  1.52300e-08  1.52300e-08]

    Edge cases: -inf non-target logits contribute nothing; K = 1 gives 0. NaN in a
    row gives NaN for that row. Labels outside [0, K) raise ValueError when
    concrete; under `jit` they cannot be checked and give NaN (loss and gradient).
    Masks as in optax: a row masked out entirely (padding) gives loss 0 and
    gradient 0, whatever its label, and its label is not checked; a row whose
    target is masked out gives logsumexp(kept) - z_t; a row where every
    non-target entry is masked out gives loss 0 and gradient 0. An empty class
    axis has no valid label. Differences from optax: docs/compat.md.

    Options, as the trainers use them (the same semantics as `linear_cross_entropy`;
    formulas and where each moves the precision cliff: docs/lm-losses.md). With z the
    logits after the cap, lse = logsumexp(z) and n the number of kept classes,

        L = (1 - alpha) CE(z, t) + alpha (1/n) sum_j (lse - z_j) + w lse^2,

    z = c tanh(z_raw / c) with `soft_cap` c. Gradient: (1 + 2 w lse) q_j - alpha / n
    off the target and -S_others / S + 2 w lse q_t + alpha (n - 1) / n at it (never
    q_t - 1, never a rounded 1 + 2 w lse), times sech^2(z_raw / c) under a cap. With any
    option set, the sums, the loss and the gradient are computed in float32 (float64
    for float64 logits) in one pass over the logits, and derivatives beyond the first
    come from autodiff of the gradient formula.

      >>> z, t = jnp.array([9.0, -9.0, -9.0]), jnp.array(0)
      >>> w = 1e-4  # T5X's z-loss weight
      >>> bool(cross_entropy(z, t, z_loss=w) == cross_entropy(z, t) + w * 9.0**2)
      True

    Args:
      logits: floating-point array, class axis (or axes) at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`; with a
        tuple of axes, flat indices into the class slice (as optax).
      axis: the class axis, a tuple of axes, or None for all axes.
      where: optional boolean mask. Of the rank of `logits` (broadcastable to it),
        it masks entries, which are left out of the normaliser; of the rank of
        `labels` (broadcastable to it), it masks whole examples, as in optax.
        Other ranks raise ValueError.
      z_loss: w >= 0, the weight of lse^2 (T5X's `z_loss`, Liger's `lse_square_scale`).
      soft_cap: c > 0 or None: the logits become c tanh(z / c) first (Gemma 2's
        `final_logit_softcapping`, Liger's `softcap`).
      label_smoothing: alpha in [0, 1): the target distribution (1 - alpha) one-hot +
        alpha / n (optax's `smooth_labels`, torch's `label_smoothing`).
      vocab_axis: inside `jax.shard_map`, the mesh axis (P devices) the class axis is
        split over: `logits` (and an entry mask `where`) are this device's contiguous
        shard (..., K / P), device i holding classes [i K / P, (i + 1) K / P), and labels
        index all K. The class axis must be the last. The result is the unsharded call's
        (docs/lm-losses.md, "The vocabulary over devices"); reverse mode only
        (`jax.custom_vjp`), float8 logits refused. `numerics.sharded_cross_entropy` builds
        the `shard_map` from a mesh.
      return_aux: True or False: also return the per-token outputs of
        `linear_cross_entropy(..., return_aux=True)` on these logits, a dict of arrays of
        the labels' shape: `log_prob` (`numerics.log_prob`), `entropy` (`numerics.entropy`),
        `lse` (`numerics.logsumexp`), `argmax` (int32, the first maximum; with a tuple of
        axes a flat index into the class slice, as labels) and `z_loss` (w lse^2), all of
        the logits after the soft cap, computed in float32 (float64 for float64) and rounded
        once to the logits' dtype; differentiable but argmax (the cap's slope sech^2, as the
        loss's). Rows masked out entirely give 0 in each float output. Not with
        `vocab_axis`; float8 logits are refused there.

    Returns:
      Per-example losses of shape `labels.shape`, in the dtype of `logits`; with
      `return_aux`, (losses, aux).
    """
    opts = validate_options(z_loss, soft_cap, label_smoothing)
    if not isinstance(return_aux, bool):
        raise TypeError(f"return_aux must be True or False; got {return_aux!r}.")
    if return_aux:
        if vocab_axis is not None:
            raise ValueError(
                "return_aux is not supported with vocab_axis yet: call cross_entropy without "
                "it there, and numerics.log_prob / numerics.entropy on gathered logits."
            )
        loss = cross_entropy(
            logits,
            labels,
            axis,
            where,
            z_loss=z_loss,
            soft_cap=soft_cap,
            label_smoothing=label_smoothing,
        )
        return loss, _materialized_aux(logits, labels, axis, where, opts)
    if vocab_axis is not None:
        return _vocab_parallel.cross_entropy(logits, labels, axis, where, opts, vocab_axis)
    logits, labels, mask = prepare(logits, labels, axis, where, float8=True)
    if logits.shape[-1] == 0:  # no class, so no valid label (only traced ones get here)
        return jnp.full(labels.shape, jnp.nan, logits.dtype)
    if not opts.plain:
        return options_cross_entropy(logits, labels, mask, opts)
    return margin_cross_entropy(logits, labels, mask)


def logit_margin(logits: ArrayLike, labels: ArrayLike, axis: Axis = -1) -> jax.Array:
    r"""Logit margin m = z_t - logsumexp_{j != t} z_j, computed from differences.

    m is how far the target logit sits above the log-sum-exp of the others; the
    standard softmax collapses once m >= `precision_cliff(dtype)`. Computed as
    -log sum_{j != t} e^(z_j - z_t) with its own max shift, never through the
    loss, so it is accurate at any size, also far past exponent underflow (and
    +inf for K = 1). A metric, not a training loss: it uses an index mask and
    costs more than `cross_entropy`.

    Example:
      >>> import jax.numpy as jnp
      >>> logit_margin(jnp.array([9.0, -9.0, -9.0]), jnp.array(0))  # doctest: +NUMBER
      Array(17.3069, dtype=float32)

    NaN propagates; labels are checked as in `cross_entropy`.

    Args:
      logits: floating-point array, class axis at `axis`.
      labels: integer class indices, the shape of `logits` without `axis`.
      axis: the class axis of `logits`, a tuple of axes, or None for all axes.

    Returns:
      Margins of shape `labels.shape`, in the dtype of `logits`.
    """
    logits, labels, _ = prepare(logits, labels, axis, float8=True)
    if logits.shape[-1] == 0:
        return jnp.full(labels.shape, jnp.nan, logits.dtype)
    if logits.dtype.itemsize == 1:  # float8 (no -inf in e4m3fn): in float32, rounded once
        return logit_margin(logits.astype(jnp.float32), labels).astype(logits.dtype)
    iota = jax.lax.broadcasted_iota(labels.dtype, logits.shape, logits.ndim - 1)
    z_t = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip")
    # -m = log sum_{j != t} e^(z_j - z_t), with its own max shift, so m stays finite
    # and accurate even where e^-m is far below the dtype's range.
    others = jnp.where(iota == labels[..., None], -jnp.inf, logits - z_t)
    margin = -logsumexp_or_neg_inf(others)[..., 0]
    return jnp.where(valid_rows(logits, labels), margin, jnp.nan)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _capped(z: jax.Array, cap: float) -> jax.Array:
    """c tanh(z / c) with the slope sech^2(z / c) (`numerics._lm_loss.cap_slope`), never
    autodiff's 1 - tanh^2, which cancels where tanh rounds towards 1."""
    return capped(z, LossOptions(soft_cap=cap))


@_capped.defjvp
def _capped_jvp(cap, primals, tangents):
    (z,), (dz,) = primals, tangents
    return _capped(z, cap), dz * cap_slope(z, LossOptions(soft_cap=cap))


def _materialized_aux(logits, labels, axis, where, opts) -> dict[str, jax.Array]:
    """`cross_entropy(..., return_aux=True)`'s aux: the per-token outputs of the capped
    logits, in the compute dtype, rounded once to the logits' dtype."""
    raw = _validate.float_array(logits, "logits")
    axes = _validate.class_axes(raw, axis, "logits")
    mask = _validate.loss_mask(where, raw.shape, axes)
    z = raw.astype(_compute_dtype(raw.dtype))
    if opts.soft_cap is not None:
        z = _capped(z, opts.soft_cap)
    zl, labels_l, mask_l = prepare(z, labels, axis, where)
    lp = -margin_cross_entropy(zl, labels_l, mask_l)  # numerics.log_prob
    ent = entropy(z, axis, where)
    flat = _validate.classes_last(z, axes)
    flat_mask = None if mask is None else _validate.classes_last(mask, axes)
    kept = flat if flat_mask is None else jnp.where(flat_mask, flat, -jnp.inf)
    lse = logsumexp(kept, axis=-1)
    padding = ~_any_kept(flat_mask, flat.shape)[..., 0]
    zero = jnp.zeros((), z.dtype)
    lse = jnp.where(padding, zero, lse)
    argmax = jnp.argmax(kept, axis=-1).astype(jnp.int32)
    w = jnp.asarray(opts.z_loss, z.dtype)
    z_term = w * lse * lse if opts.z_loss else jnp.zeros(lse.shape, z.dtype)
    out = {"log_prob": lp, "entropy": ent, "lse": lse, "z_loss": z_term}
    out = {k: v.astype(raw.dtype) for k, v in out.items()}
    return {**out, "argmax": argmax}
