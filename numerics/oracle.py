"""mpmath references for every function of `numerics`: values and gradients.

Each reference reads its inputs exactly as the dtype holds them (bf16, fp16 and
fp32 convert to float64 without rounding), then works at `PRECISION_BITS` bits
and, like the fixed functions, from differences z_j - z_t and log1p/expm1, so
no digit is lost to cancellation. Results come back as float64 arrays, or as
object arrays of `mpmath.mpf` with `exact=True` (for measuring fp64 errors below
float64's own half-ulp).

The references loop in Python over rows: about 20 us per entry, fine for the
65,536 bf16 values or a few rows of K = 50,000, too slow for a training step.
mpmath does its arithmetic through gmpy2 (GMP) where that is installed, as the lab's
dependencies install it: about 1.3x faster here, with the same digits as its
pure-Python backend (tests/numerics/test_oracle_backend.py).
"""

from __future__ import annotations

import math

import ml_dtypes
import mpmath
import numpy as np

from numerics._cliffs import bits_type

PRECISION_BITS = 256  # far beyond fp64's 53 bits: rounding here never shows in a test


def _rows(x, axis: int) -> tuple[np.ndarray, tuple[int, ...]]:
    x = np.moveaxis(np.asarray(x).astype(np.float64), axis, -1)
    return x.reshape(-1, x.shape[-1]), x.shape


def _finish(rows: list, shape: tuple[int, ...], axis: int | None, exact: bool):
    out = np.empty(len(rows) * (shape[-1] if axis is not None else 1), dtype=object)
    out[:] = [v for row in rows for v in (row if axis is not None else [row])]
    out = out.reshape(shape if axis is not None else shape[:-1])
    if not exact:
        out = out.astype(np.float64) if out.size else np.zeros(out.shape)
    return np.moveaxis(out, -1, axis) if axis is not None else out


def _mp(v: float) -> mpmath.mpf:
    return mpmath.mpf(float(v))


def _nan_row(k: int) -> list:
    return [mpmath.mpf("nan")] * k


def _log_softmax_row(row: np.ndarray, kept: np.ndarray) -> list:
    k = len(row)
    if np.isnan(row).any():
        return _nan_row(k)
    if not kept.any():
        return [mpmath.mpf("-inf")] * k
    i = int(np.argmax(np.where(kept, row, -np.inf)))
    x_i = _mp(row[i])
    diffs = [(_mp(row[j]) - x_i) if j != i else mpmath.mpf(0) for j in range(k)]
    if any(mpmath.isnan(d) for d in diffs):
        return _nan_row(k)
    total = mpmath.fsum(mpmath.exp(diffs[j]) for j in range(k) if j != i and kept[j])
    lognorm = mpmath.log1p(total)
    return [diffs[j] - lognorm if kept[j] else mpmath.mpf("-inf") for j in range(k)]


def log_softmax(x, axis: int = -1, where=None, *, exact: bool = False) -> np.ndarray:
    """Reference log_softmax (masked entries -inf, NaN rows NaN)."""
    rows, shape = _rows(x, axis)
    masks = (
        np.ones(rows.shape, bool)
        if where is None
        else _rows(np.broadcast_to(where, np.shape(x)), axis)[0].astype(bool)
    )
    with mpmath.workprec(PRECISION_BITS):
        out = [_log_softmax_row(r, m) for r, m in zip(rows, masks, strict=True)]
    return _finish(out, shape, axis, exact)


def softmax(x, axis: int = -1, where=None, *, exact: bool = False) -> np.ndarray:
    """Reference softmax."""
    with mpmath.workprec(PRECISION_BITS):
        logs = log_softmax(x, axis, where, exact=True)
        out = np.vectorize(mpmath.exp, otypes=[object])(logs)
    return out if exact else out.astype(np.float64)


def _vjp_rows(x, cotangent, axis: int):
    rows, _ = _rows(x, axis)
    cots, _ = _rows(np.broadcast_to(cotangent, np.shape(x)), axis)
    for row, cot in zip(rows, cots, strict=True):
        q = [mpmath.exp(v) for v in _log_softmax_row(row, np.ones(len(row), bool))]
        yield q, [_mp(v) for v in cot]


def softmax_vjp(x, cotangent, axis: int = -1, *, exact: bool = False) -> np.ndarray:
    """Reference vector-Jacobian product of softmax: q_k (c_k - sum_j q_j c_j).

    Written as q_k sum_j q_j (c_k - c_j) (the q sum to 1), so no 1 - q_k is formed.
    """
    shape = np.moveaxis(np.asarray(x), axis, -1).shape
    with mpmath.workprec(PRECISION_BITS):
        out = [
            [
                qk * mpmath.fsum(qj * (ck - cj) for qj, cj in zip(q, c, strict=True))
                for qk, ck in zip(q, c, strict=True)
            ]
            for q, c in _vjp_rows(x, cotangent, axis)
        ]
    return _finish(out, shape, axis, exact)


def log_softmax_vjp(x, cotangent, axis: int = -1, *, exact: bool = False) -> np.ndarray:
    """Reference vector-Jacobian product of log_softmax: c_k - q_k sum_j c_j.

    Written as c_k (sum_{j != k} q_j) - q_k sum_{j != k} c_j: no 1 - q_k is formed.
    """
    shape = np.moveaxis(np.asarray(x), axis, -1).shape
    with mpmath.workprec(PRECISION_BITS):
        out = []
        for q, c in _vjp_rows(x, cotangent, axis):
            k_range = range(len(q))
            out.append(
                [
                    c[k] * mpmath.fsum(q[j] for j in k_range if j != k)
                    - q[k] * mpmath.fsum(c[j] for j in k_range if j != k)
                    for k in k_range
                ]
            )
    return _finish(out, shape, axis, exact)


def _logsumexp_row(row: np.ndarray, scale: np.ndarray, kept: np.ndarray):
    """(log|T|, sign T, d/dx, d/db) of T = sum_k b_k e^x_k over the kept entries of one row."""
    k = len(row)
    zero, nan = mpmath.mpf(0), mpmath.mpf("nan")
    live = kept & (scale != 0)  # entries with b = 0 are left out, as in jax.nn
    if np.isnan(row[live]).any() or np.isnan(scale[kept]).any():
        return nan, nan, _nan_row(k), _nan_row(k)
    x = [_mp(v) if live[j] else mpmath.mpf("-inf") for j, v in enumerate(row)]
    b = [_mp(v) if kept[j] else zero for j, v in enumerate(scale)]
    top = max(x)
    if top == mpmath.inf:  # the sum is the +inf entries' b times inf
        head = mpmath.fsum(b[j] for j in range(k) if x[j] == top)
        if head == 0:  # their b cancel: inf - inf
            return nan, nan, _nan_row(k), _nan_row(k)
        return mpmath.inf, mpmath.sign(head), _nan_row(k), _nan_row(k)
    if top == -mpmath.inf:  # the empty sum
        return mpmath.mpf("-inf"), zero, [zero] * k, [zero] * k
    # T e^-top = head + tail: the maxima's b, and the entries below them, kept apart so
    # that log1p(tail / head) keeps a tail below any working precision.
    head = mpmath.fsum(b[j] for j in range(k) if x[j] == top)
    tail = mpmath.fsum(b[j] * mpmath.exp(x[j] - top) for j in range(k) if x[j] < top)
    total = head + tail
    if total == 0:
        return mpmath.mpf("-inf"), zero, _nan_row(k), _nan_row(k)
    if head != 0 and abs(tail) < abs(head) / 2:
        log_abs = mpmath.log(abs(head)) + mpmath.log1p(tail / head)
    else:
        log_abs = mpmath.log(abs(total))
    # d/db_k = e^(x_k - top) / (T e^-top), also where b_k = 0 (not where masked out).
    e = [mpmath.exp(_mp(v) - top) if kept[j] else zero for j, v in enumerate(row)]
    grad_b = [v / total for v in e]
    grad_x = [b[j] * e[j] / total if live[j] else zero for j in range(k)]
    return top + log_abs, mpmath.sign(total), grad_x, grad_b


def logsumexp_value_and_grad(x, axis: int = -1, b=None, where=None, *, exact: bool = False):
    """Reference (log|T|, sign of T, d/dx, d/db) of T = sum_k b_k e^x_k along `axis` (b = 1
    when None), as `jax.nn.logsumexp(x, axis, b, return_sign=True, where=where)`.

    Entries masked out by `where` and entries with b = 0 are left out; the empty sum is
    -inf with sign 0 and derivatives 0; +inf entries give +inf (NaN where their b cancel)
    and NaN derivatives. log|T| is max + log|head| + log1p(tail / head), head the b of the
    maxima and tail the terms below them, so a tail below 2^-`PRECISION_BITS` of the head
    keeps its digits. d/dx_k = b_k e^x_k / T (the b-weighted softmax); d/db_k = e^x_k / T,
    also where b_k = 0.
    """
    rows, shape = _rows(x, axis)
    full = np.shape(x)
    scales = np.ones(rows.shape) if b is None else _rows(np.broadcast_to(b, full), axis)[0]
    masks = (
        np.ones(rows.shape, bool)
        if where is None
        else _rows(np.broadcast_to(where, full), axis)[0].astype(bool)
    )
    with mpmath.workprec(PRECISION_BITS):
        res = [_logsumexp_row(*r) for r in zip(rows, scales, masks, strict=True)]
    value = _finish([r[0] for r in res], shape, None, exact)
    sign = _finish([r[1] for r in res], shape, None, exact)
    grads = (_finish([r[i] for r in res], shape, axis, exact) for i in (2, 3))
    return value, sign, *grads


def logsumexp(x, axis: int = -1, b=None, where=None, *, exact: bool = False) -> np.ndarray:
    """Reference log|sum_k b_k e^x_k| along `axis` (`logsumexp_value_and_grad`)."""
    return logsumexp_value_and_grad(x, axis, b, where, exact=exact)[0]


def _cross_entropy_row(row: np.ndarray, t: int, z_loss=0.0, soft_cap=None, label_smoothing=0.0):
    """(loss, grad, margin) of one row, with the options of `cross_entropy`."""
    k = len(row)
    if np.isnan(row).any() or not 0 <= t < k:
        return mpmath.mpf("nan"), _nan_row(k), mpmath.mpf("nan")
    return _cross_entropy_mp([_mp(v) for v in row], t, z_loss, soft_cap, label_smoothing)


def _cross_entropy_mp(raw: list, t: int, z_loss, soft_cap, label_smoothing):
    """`_cross_entropy_row` on finite logits held as mpmath numbers, t in range."""
    k = len(raw)
    if soft_cap is None:
        z, slope = raw, [mpmath.mpf(1)] * k
    else:
        c = _mp(soft_cap)
        z = [c * mpmath.tanh(v / c) for v in raw]
        slope = [mpmath.sech(v / c) ** 2 for v in raw]
    z_t = z[t]
    # e^(z_j - z_t), each computed once (the sum and the gradient both read it).
    exps = [mpmath.exp(z[j] - z_t) if j != t else None for j in range(k)]
    # S = e^-m = sum_{j != t} e^(z_j - z_t); everything below is a function of S
    # and the differences, with no 1 - q_t.
    total = mpmath.fsum(e for e in exps if e is not None)
    loss = mpmath.log1p(total)
    denom = 1 + total
    grad = [e / denom if e is not None else -total / denom for e in exps]
    margin = -mpmath.log(total) if total > 0 else mpmath.inf
    if z_loss or label_smoothing:
        w, alpha = _mp(z_loss), _mp(label_smoothing)
        lse = z_t + loss
        if label_smoothing:  # a -inf logit has -log q = inf: so is the smoothed loss
            loss = (1 - alpha) * loss + alpha * mpmath.fsum(lse - v for v in z) / k
        loss = loss + w * lse**2
        # dL/dz_j = (1 + 2 w lse) q_j - (1 - alpha) [j = t] - alpha / k, with the target's
        # q_t - 1 kept as -S / (1 + S).
        q_t = 1 / denom
        grad = [
            (g + 2 * w * lse * q_t + alpha * (k - 1) / k)
            if j == t
            else (1 + 2 * w * lse) * g - alpha / k
            for j, g in enumerate(grad)
        ]
    grad = [g * s for g, s in zip(grad, slope, strict=True)]
    return loss, grad, margin


def _labelled_rows(logits, labels, axis: int):
    rows, shape = _rows(logits, axis)
    return rows, np.asarray(labels).reshape(-1), shape


def cross_entropy_value_and_grad(
    logits,
    labels,
    axis: int = -1,
    *,
    exact: bool = False,
    z_loss: float = 0.0,
    soft_cap: float | None = None,
    label_smoothing: float = 0.0,
):
    """Reference (loss, d loss / d logits) of integer-label cross-entropy.

    With the options of `numerics.cross_entropy`: z = c tanh(z_raw / c) exactly, and
    L = (1 - alpha) CE + alpha mean_j (lse - z_j) + w lse^2 over all K classes.
    """
    rows, labels, shape = _labelled_rows(logits, labels, axis)
    opts = (z_loss, soft_cap, label_smoothing)
    with mpmath.workprec(PRECISION_BITS):
        res = [_cross_entropy_row(r, int(t), *opts) for r, t in zip(rows, labels, strict=True)]
    loss = _finish([r[0] for r in res], shape, None, exact)
    return loss, _finish([r[1] for r in res], shape, axis, exact)


def cross_entropy(logits, labels, axis: int = -1, *, exact: bool = False, **options) -> np.ndarray:
    """Reference cross-entropy: log(1 + sum_{j != t} e^(z_j - z_t)); `options` as in
    `cross_entropy_value_and_grad`."""
    return cross_entropy_value_and_grad(logits, labels, axis, exact=exact, **options)[0]


def cross_entropy_grad(
    logits, labels, axis: int = -1, *, exact: bool = False, **options
) -> np.ndarray:
    """Reference gradient q - onehot(t) of cross-entropy (with `options`)."""
    return cross_entropy_value_and_grad(logits, labels, axis, exact=exact, **options)[1]


def linear_cross_entropy_value_and_grad(
    hidden, weight, labels, *, exact: bool = False, **options
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference (per-row loss, d sum / d hidden, d sum / d weight) of the cross-entropy of
    hidden @ weight (hidden (N, D), weight (D, V)), with `options` as in
    `cross_entropy_value_and_grad`. The logits are exact sums of exact products."""
    h = np.asarray(hidden).astype(np.float64)
    w = np.asarray(weight).astype(np.float64)
    labels = np.asarray(labels).reshape(-1)
    n, d = h.shape
    v = w.shape[1]
    opts = (
        options.get("z_loss", 0.0),
        options.get("soft_cap"),
        options.get("label_smoothing", 0.0),
    )
    with mpmath.workprec(PRECISION_BITS):
        hm = [[_mp(x) for x in row] for row in h]
        wm = [[_mp(x) for x in row] for row in w]
        losses, grads = [], []
        for i in range(n):
            logits = [mpmath.fsum(hm[i][a] * wm[a][j] for a in range(d)) for j in range(v)]
            # The row is exact at 256 bits; handed over without rounding to float64.
            loss, grad, _ = _cross_entropy_mp(logits, int(labels[i]), *opts)
            losses.append(loss)
            grads.append(grad)
        d_hidden = [
            [mpmath.fsum(grads[i][j] * wm[a][j] for j in range(v)) for a in range(d)]
            for i in range(n)
        ]
        d_weight = [
            [mpmath.fsum(hm[i][a] * grads[i][j] for i in range(n)) for j in range(v)]
            for a in range(d)
        ]
    out = [np.array(x, dtype=object) for x in (losses, d_hidden, d_weight)]
    return tuple(o if exact else o.astype(np.float64) for o in out)


def logit_margin(logits, labels, axis: int = -1, *, exact: bool = False) -> np.ndarray:
    """Reference margin z_t - log sum_{j != t} e^(z_j) (+inf when K = 1)."""
    rows, labels, shape = _labelled_rows(logits, labels, axis)
    with mpmath.workprec(PRECISION_BITS):
        res = [_cross_entropy_row(r, int(t))[2] for r, t in zip(rows, labels, strict=True)]
    return _finish(res, shape, None, exact)


def _tempered(student_logits, teacher_logits, temperature):
    """Both logit arrays divided by T in their dtype, as the functions do (float8: the
    quotient of float32, rounded once to float8)."""
    s, t = np.asarray(student_logits), np.asarray(teacher_logits)
    if temperature == 1:
        return s, t
    if s.dtype.itemsize == 1:
        wide = np.float32(temperature)
        return (s.astype(np.float32) / wide).astype(s.dtype), (t.astype(np.float32) / wide).astype(
            t.dtype
        )
    return s / s.dtype.type(temperature), t / t.dtype.type(temperature)


def _soft_target_row(student: np.ndarray, teacher: np.ndarray):
    k = len(student)
    if np.isnan(student).any() or np.isnan(teacher).any():
        return mpmath.mpf("nan"), _nan_row(k)
    log_q = _log_softmax_row(student, np.ones(k, bool))
    log_p = _log_softmax_row(teacher, np.ones(k, bool))
    p = [mpmath.exp(v) for v in log_p]
    loss = -mpmath.fsum(a * b for a, b in zip(p, log_q, strict=True) if a != 0)
    delta = [
        _mp(s) - _mp(t) if pk != 0 else mpmath.mpf(0)
        for s, t, pk in zip(student, teacher, p, strict=True)
    ]
    # log(Z_S / Z_T) = log1p(sum_i p_i expm1(delta_i)): exact even though the
    # p_i only sum to 1 within 2^-PRECISION_BITS, so tiny deltas stay accurate.
    ratio = mpmath.log1p(mpmath.fsum(pk * mpmath.expm1(d) for pk, d in zip(p, delta, strict=True)))
    grad = [pk * mpmath.expm1(d - ratio) for pk, d in zip(p, delta, strict=True)]
    return loss, grad


def soft_target_cross_entropy_value_and_grad(
    student_logits, teacher_logits, axis: int = -1, temperature: float = 1.0, *, exact: bool = False
):
    """Reference (loss, d loss / d student_logits) of soft-target cross-entropy.

    Logits are divided by `temperature` in the input dtype first, as the fixed
    and standard functions do, so all three see the same scaled inputs.
    """
    s, t = _tempered(student_logits, teacher_logits, temperature)
    s_rows, shape = _rows(s, axis)
    t_rows, _ = _rows(t, axis)
    with mpmath.workprec(PRECISION_BITS):
        res = [_soft_target_row(a, b) for a, b in zip(s_rows, t_rows, strict=True)]
        # d/d z_S of L(z_S / T) carries the chain-rule factor 1/T.
        scale = 1 / _mp(temperature)
        grads = [[g * scale for g in r[1]] for r in res]
    loss = _finish([r[0] for r in res], shape, None, exact)
    return loss, _finish(grads, shape, axis, exact)


def soft_target_cross_entropy(
    student_logits, teacher_logits, axis: int = -1, temperature: float = 1.0, *, exact: bool = False
) -> np.ndarray:
    """Reference soft-target cross-entropy -sum_k p_k log q_k."""
    return soft_target_cross_entropy_value_and_grad(
        student_logits, teacher_logits, axis, temperature, exact=exact
    )[0]


def soft_target_cross_entropy_grad(
    student_logits, teacher_logits, axis: int = -1, temperature: float = 1.0, *, exact: bool = False
) -> np.ndarray:
    """Reference gradient (q - p) / T of soft-target cross-entropy w.r.t. the student."""
    return soft_target_cross_entropy_value_and_grad(
        student_logits, teacher_logits, axis, temperature, exact=exact
    )[1]


def _divergence_row(student: np.ndarray, teacher: np.ndarray, form: str):
    """(value, d value / d student logits) of one row: 'kl' KL(p || q), 'reverse_kl'
    KL(q || p), 'js' JS(p, q), with p the teacher's and q the student's softmax."""
    k = len(student)
    if np.isnan(student).any() or np.isnan(teacher).any():
        return mpmath.mpf("nan"), _nan_row(k)
    log_q = _log_softmax_row(student, np.ones(k, bool))
    log_p = _log_softmax_row(teacher, np.ones(k, bool))
    q = [mpmath.exp(v) for v in log_q]
    p = [mpmath.exp(v) for v in log_p]
    inf = mpmath.inf

    def kl(a, log_a, log_b):  # sum a log(a / b) over a > 0; +inf where b = 0 < a
        if any(x != 0 and lb == -inf for x, lb in zip(a, log_b, strict=True)):
            return inf
        return mpmath.fsum(x * (la - lb) for x, la, lb in zip(a, log_a, log_b, strict=True) if x)

    if form == "kl":
        value = kl(p, log_p, log_q)
        return value, [b - a for a, b in zip(p, q, strict=True)]
    if form == "reverse_kl":
        value = kl(q, log_q, log_p)
        grad = [
            x * ((lq - lp) - value) if x else mpmath.mpf(0)
            for x, lq, lp in zip(q, log_q, log_p, strict=True)
        ]
        return value, grad

    # log(p / m) and log(q / m) from s = log q - log p, m = (p + q) / 2: exactly 0 where
    # s = 0 (log(m) from m itself would differ from log p by the working precision).
    def log_over_m(log_a, log_other):  # log(a / m) for a > 0: log 2 where the other is 0
        return -mpmath.log1p(mpmath.expm1(log_other - log_a) / 2)

    log_pm = [log_over_m(a, b) if x else None for x, a, b in zip(p, log_p, log_q, strict=True)]
    log_qm = [log_over_m(a, b) if x else None for x, a, b in zip(q, log_q, log_p, strict=True)]
    kl_pm = mpmath.fsum(x * v for x, v in zip(p, log_pm, strict=True) if x)
    kl_qm = mpmath.fsum(x * v for x, v in zip(q, log_qm, strict=True) if x)
    grad = [x * (v - kl_qm) / 2 if x else mpmath.mpf(0) for x, v in zip(q, log_qm, strict=True)]
    return (kl_pm + kl_qm) / 2, grad


def divergence_value_and_grad(
    student_logits,
    teacher_logits,
    form: str,
    axis: int = -1,
    temperature: float = 1.0,
    *,
    exact: bool = False,
):
    """Reference (divergence, d divergence / d student_logits) of `form`: 'kl' for
    KL(p || q), 'reverse_kl' for KL(q || p), 'js' for the Jensen-Shannon divergence,
    with p = softmax(teacher / T) and q = softmax(student / T).

    Logits are divided by `temperature` in their dtype first, as the functions do. The
    log-probabilities come from logit differences at `PRECISION_BITS` bits, so the
    divergences of nearby rows keep their digits; a class with probability 0 on the
    weighting side contributes 0, and KL(a || b) is +inf where b = 0 < a.
    """
    if form not in ("kl", "reverse_kl", "js"):
        raise ValueError(f"form must be 'kl', 'reverse_kl' or 'js'; got {form!r}.")
    s, t = _tempered(student_logits, teacher_logits, temperature)
    s_rows, shape = _rows(s, axis)
    t_rows, _ = _rows(t, axis)
    with mpmath.workprec(PRECISION_BITS):
        res = [_divergence_row(a, b, form) for a, b in zip(s_rows, t_rows, strict=True)]
        scale = 1 / _mp(temperature)
        grads = [[g * scale for g in r[1]] for r in res]
    return _finish([r[0] for r in res], shape, None, exact), _finish(grads, shape, axis, exact)


def kl_divergence(
    student_logits, teacher_logits, axis: int = -1, temperature: float = 1.0, *, exact: bool = False
) -> np.ndarray:
    """Reference KL(p || q) of the teacher's softmax p from the student's q."""
    return divergence_value_and_grad(
        student_logits, teacher_logits, "kl", axis, temperature, exact=exact
    )[0]


def reverse_kl_divergence(
    student_logits, teacher_logits, axis: int = -1, temperature: float = 1.0, *, exact: bool = False
) -> np.ndarray:
    """Reference KL(q || p) of the student's softmax q from the teacher's p."""
    return divergence_value_and_grad(
        student_logits, teacher_logits, "reverse_kl", axis, temperature, exact=exact
    )[0]


def js_divergence(
    student_logits, teacher_logits, axis: int = -1, temperature: float = 1.0, *, exact: bool = False
) -> np.ndarray:
    """Reference Jensen-Shannon divergence (KL(p || m) + KL(q || m)) / 2, m = (p + q) / 2."""
    return divergence_value_and_grad(
        student_logits, teacher_logits, "js", axis, temperature, exact=exact
    )[0]


def _stablemax_row(row: np.ndarray, t: int):
    k = len(row)
    if np.isnan(row).any():
        return mpmath.mpf("nan"), _nan_row(k)
    z = [_mp(v) for v in row]
    s = [v + 1 if v >= 0 else 1 / (1 - v) for v in z]
    ds = [mpmath.mpf(1) if v >= 0 else 1 / (1 - v) ** 2 for v in z]
    total = mpmath.fsum(s)
    loss = mpmath.log(total) - mpmath.log(s[t])
    grad = [ds[j] / total - (ds[j] / s[j] if j == t else 0) for j in range(k)]
    return loss, grad


def stablemax_cross_entropy_value_and_grad(logits, labels, axis: int = -1, *, exact: bool = False):
    """Reference (loss, gradient) of StableMax cross-entropy."""
    rows, labels, shape = _labelled_rows(logits, labels, axis)
    with mpmath.workprec(PRECISION_BITS):
        res = [_stablemax_row(r, int(t)) for r, t in zip(rows, labels, strict=True)]
    loss = _finish([r[0] for r in res], shape, None, exact)
    return loss, _finish([r[1] for r in res], shape, axis, exact)


def zero_sum_projection(grad, axis: int = -1, *, exact: bool = False) -> np.ndarray:
    """Reference g - mean(g) along `axis`, in exact arithmetic."""
    rows, shape = _rows(grad, axis)
    with mpmath.workprec(PRECISION_BITS):
        out = []
        for r in rows:
            r = [_mp(v) for v in r]
            mean = mpmath.fsum(r) / len(r)
            out.append([v - mean for v in r])
    return _finish(out, shape, axis, exact)


def clipped_softmax(x, gamma: float, zeta: float = 1.0, axis: int = -1, *, exact: bool = False):
    """Reference clip((zeta - gamma) softmax(x) + gamma, 0, 1)."""
    with mpmath.workprec(PRECISION_BITS):
        q = softmax(x, axis, exact=True)
        g, z = _mp(gamma), _mp(zeta)
        out = np.vectorize(lambda v: min(max((z - g) * v + g, 0), 1), otypes=[object])(q)
    return out if exact else out.astype(np.float64)


def precision_cliff(significand_bits: int) -> float:
    """Reference cliff: the m with e^-m = 2^-p exactly, i.e. p ln 2."""
    with mpmath.workprec(PRECISION_BITS):
        return float(significand_bits * mpmath.log(2))


def ulp(x, dtype) -> np.ndarray:
    """Spacing of `dtype` at |x| (the subnormal spacing below the normal range)."""
    info = ml_dtypes.finfo(dtype)
    mag = np.abs(np.asarray(x).astype(np.float64))
    tiny = float(info.smallest_normal)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(mag > 0, mag, tiny)))
    return np.exp2(np.maximum(exponent, math.log2(tiny)) - info.nmant)


def ulp_error(computed, exact, dtype, flush_to_zero: bool = True) -> np.ndarray:
    """|computed - exact| in ulps of `dtype` at |exact|, elementwise.

    `exact` may be float64 or an object array of mpf (see `exact=True`). With
    `flush_to_zero`, a computed 0 where |exact| is below the smallest normal
    counts as exact: XLA's CPU kernels flush subnormal results to zero. Equal
    infinities count as 0 error; NaN anywhere gives NaN.
    """
    exact = np.asarray(exact)
    computed = np.asarray(computed).astype(np.float64)
    with mpmath.workprec(PRECISION_BITS):
        if exact.dtype == object:
            diff = np.vectorize(lambda c, e: float(abs(mpmath.mpf(c) - e)), otypes=[float])(
                computed, exact
            )
            exact = exact.astype(np.float64)
        else:
            with np.errstate(invalid="ignore"):  # inf - inf, handled by `same`
                diff = np.abs(computed - exact)
    same = computed == exact  # covers equal infinities, where diff is NaN
    with np.errstate(over="ignore"):  # an error past float64's range is +inf ulps
        err = np.where(same, 0.0, diff / ulp(exact, dtype))
    if flush_to_zero:
        tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
        err = np.where((computed == 0) & (np.abs(exact) < tiny), 0.0, err)
    return np.where(np.isnan(computed) | np.isnan(exact), np.nan, err)


def representable_values(dtype) -> np.ndarray:
    """Every finite value of an 8- or 16-bit float dtype (float8, bfloat16, float16), ascending."""
    dtype = np.dtype(dtype)
    if dtype.itemsize not in (1, 2):
        raise ValueError(f"only 8- and 16-bit dtypes can be enumerated; got {dtype}.")
    uint = np.uint8 if dtype.itemsize == 1 else np.uint16
    values = np.arange(2 ** (8 * dtype.itemsize), dtype=uint).view(dtype)
    values = values[np.isfinite(values.astype(np.float32))]
    return np.unique(values)  # sorted; +0 and -0 merge


def ulp_window(center: float, dtype, half_width: int) -> np.ndarray:
    """The 2 * half_width + 1 consecutive values of `dtype` around `center`."""
    dtype = np.dtype(dtype)
    uint = bits_type(dtype)
    start = int(np.array(center, dtype).view(uint))
    bits = np.arange(start - half_width, start + half_width + 1, dtype=np.int64).astype(uint)
    return bits.view(dtype)


def log_prob_value_and_grad(logits, labels, axis: int = -1, *, exact: bool = False):
    """Reference (log p_y, d log p_y / d logits): minus the cross-entropy's value and
    gradient, -log1p(sum_{j != y} e^(z_j - z_y)) and onehot(y) - p (its target entry
    S / (1 + S), never 1 - p_y)."""
    loss, grad = cross_entropy_value_and_grad(logits, labels, axis, exact=exact)
    # At the oracle's precision: mpmath rounds even a negation to the context's, 53 bits
    # outside (the exact values lost all but float64's precision before this).
    with mpmath.workprec(PRECISION_BITS):
        return -loss, -grad


def _entropy_row(row: np.ndarray, kept: np.ndarray):
    """(H, dH/dz) of one row over its kept entries: H = log1p(S) + sum_j g_j e^-g_j / (1 + S)
    and p_k (g_k - A), from the gaps g_j = z_max - z_j (exact differences)."""
    k = len(row)
    zero = mpmath.mpf(0)
    if np.isnan(row[kept]).any():
        return mpmath.mpf("nan"), _nan_row(k)
    if not kept.any():  # padding: 0 and 0, as the functions
        return zero, [zero] * k
    live = np.where(kept, row, -np.inf)
    i = int(np.argmax(live))
    if live[i] == -np.inf:  # only -inf: 0 / 0
        return mpmath.mpf("nan"), _nan_row(k)
    if live[i] == np.inf:  # n +inf entries share the mass: log n, gradient 0
        n = int(np.sum(live == np.inf))
        return mpmath.log(n), [zero] * k
    top = _mp(live[i])
    gaps = [top - _mp(v) if np.isfinite(v) else None for v in live]
    e = [mpmath.exp(-g) if g is not None else zero for g in gaps]
    s_others = mpmath.fsum(e[j] for j in range(k) if j != i)
    denom = 1 + s_others
    mean_gap = mpmath.fsum(g * x for g, x in zip(gaps, e, strict=True) if g is not None) / denom
    value = mpmath.log1p(s_others) + mean_gap
    grad = [
        (x / denom) * (g - mean_gap) if g is not None else zero
        for g, x in zip(gaps, e, strict=True)
    ]
    return value, grad


def entropy_value_and_grad(logits, axis: int = -1, where=None, *, exact: bool = False):
    """Reference (H, dH/d logits) of the softmax's entropy along `axis`, over the entries
    `where` keeps: H = -sum p log p, computed as log1p(S_others) + sum_j g_j e^-g_j / S with
    g_j = z_max - z_j (no cancellation at any working precision), dH/dz_k = p_k (g_k - A),
    A = H - log1p(S_others). -inf and masked-out entries have p = 0 and gradient 0; a row
    masked out entirely gives 0 and 0."""
    rows, shape = _rows(logits, axis)
    masks = (
        np.ones(rows.shape, bool)
        if where is None
        else _rows(np.broadcast_to(where, np.shape(logits)), axis)[0].astype(bool)
    )
    with mpmath.workprec(PRECISION_BITS):
        res = [_entropy_row(r, m) for r, m in zip(rows, masks, strict=True)]
    value = _finish([r[0] for r in res], shape, None, exact)
    return value, _finish([r[1] for r in res], shape, axis, exact)


def entropy(logits, axis: int = -1, where=None, *, exact: bool = False) -> np.ndarray:
    """Reference entropy of softmax(logits) along `axis` (`entropy_value_and_grad`)."""
    return entropy_value_and_grad(logits, axis, where, exact=exact)[0]


def _with_sink(x, sink, axis: int, where):
    """The rows [x, sink] along `axis` (moved last), float64, and their mask (the sink's
    entry kept), for the sink references: a sink is one more logit whose output is dropped."""
    x = np.moveaxis(np.asarray(x).astype(np.float64), axis, -1)
    s = np.broadcast_to(np.asarray(sink).astype(np.float64), x.shape[:-1])[..., None]
    mask = None
    if where is not None:
        kept = np.moveaxis(np.broadcast_to(where, np.moveaxis(x, -1, axis).shape), axis, -1)
        mask = np.concatenate([kept.astype(bool), np.ones(s.shape, bool)], -1)
    return np.concatenate([x, s], -1), mask


def sink_log_softmax(x, sink, axis: int = -1, where=None, *, exact: bool = False) -> np.ndarray:
    """Reference log-softmax with a sink logit s: log(e^x_k / (e^s + sum_j e^x_j)).

    `log_softmax` of the row [x, s] without its last entry, exact as that is (differences
    from the row's max, which may be s, and log1p of the others). `sink` broadcasts to
    x's shape without `axis`; -inf gives `log_softmax`, 0 softmax off by one.
    """
    rows, mask = _with_sink(x, sink, axis, where)
    return np.moveaxis(log_softmax(rows, -1, mask, exact=exact)[..., :-1], -1, axis)


def sink_softmax(x, sink, axis: int = -1, where=None, *, exact: bool = False) -> np.ndarray:
    """Reference softmax with a sink logit s: e^x_k / (e^s + sum_j e^x_j) (`sink_log_softmax`)."""
    rows, mask = _with_sink(x, sink, axis, where)
    return np.moveaxis(softmax(rows, -1, mask, exact=exact)[..., :-1], -1, axis)


def sink_probability(x, sink, axis: int = -1, *, exact: bool = False) -> np.ndarray:
    """Reference P_sink = e^s / (e^s + sum_j e^x_j), the mass the sink softmax drops (x's
    shape without `axis`)."""
    rows, _ = _with_sink(x, sink, axis, None)
    return softmax(rows, -1, exact=exact)[..., -1]


def _sink_vjp(vjp, x, sink, cotangent, axis: int, exact: bool):
    rows, _ = _with_sink(x, sink, axis, None)
    c = np.moveaxis(np.broadcast_to(np.asarray(cotangent, np.float64), np.shape(x)), axis, -1)
    c = np.concatenate([c, np.zeros((*c.shape[:-1], 1))], -1)  # the dropped entry: none
    grad = vjp(rows, c, -1, exact=exact)
    return np.moveaxis(grad[..., :-1], -1, axis), grad[..., -1]


def sink_softmax_vjp(x, sink, cotangent, axis: int = -1, *, exact: bool = False):
    """Reference (d/dx, d/dsink) of sum_k c_k p_k for the sink softmax: `softmax_vjp` on the
    row [x, s] with cotangent [c, 0]; d/dsink = -P_sink sum_k c_k p_k (shape of x without
    `axis`)."""
    return _sink_vjp(softmax_vjp, x, sink, cotangent, axis, exact)


def sink_log_softmax_vjp(x, sink, cotangent, axis: int = -1, *, exact: bool = False):
    """Reference (d/dx, d/dsink) of sum_k c_k log p_k for the sink log-softmax:
    `log_softmax_vjp` on [x, s] with cotangent [c, 0]; d/dsink = -P_sink sum_k c_k."""
    return _sink_vjp(log_softmax_vjp, x, sink, cotangent, axis, exact)
