"""The dtypes `numerics.testing` covers and the bounds its checks hold functions to.

The tables (`ULPS`, `OPTIONS`, `OPTION_ULPS`, `CAP_ULPS`) are documented where
`numerics.testing` exports them; here are the functions that turn them into a bound
per element, and the ulp errors measured against them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from numerics import oracle

DTYPES = tuple(np.dtype(d) for d in (ml_dtypes.bfloat16, np.float16, np.float32, np.float64))

FLOAT8_DTYPES = tuple(np.dtype(d) for d in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2))

_NAMES = ("bf16", "fp16", "fp32", "fp64", "e4m3fn", "e5m2")
_SHORT = dict(zip(_NAMES, DTYPES + FLOAT8_DTYPES, strict=True))


def as_dtype(dtype) -> np.dtype:
    """One of `DTYPES` or `FLOAT8_DTYPES`, from 'bf16', 'fp16', 'fp32', 'fp64', 'e4m3fn',
    'e5m2', NumPy's names or a dtype.

    Raises TypeError for anything else, naming the float8 formats it refuses.
    """
    known = DTYPES + FLOAT8_DTYPES
    if isinstance(dtype, str):
        by_name = {**_SHORT, **{d.name: d for d in known}}
        if dtype in by_name:
            return by_name[dtype]
    try:
        found = None if dtype is None else np.dtype(dtype)  # np.dtype(None) is float64
    except TypeError:
        found = None
    if found is None or found not in known:
        narrow = found is not None and found.itemsize == 1 and found.kind == "V"
        refused = f" ({found.name} is refused: only the OCP float8 formats)" if narrow else ""
        raise TypeError(
            "expected bf16, fp16, fp32 or fp64 (or NumPy's names; float8: e4m3fn or e5m2); "
            f"got {dtype!r}{refused}"
        )
    return found


ULPS = {
    # log1p of a ratio of two sums: a division, a log1p and a final rounding.
    "value": dict.fromkeys(DTYPES + FLOAT8_DTYPES, 2.0),
    # e^(z_j - z_max) times a per-row scale cotangent / S: exp, one division, one
    # multiply, each up to half an ulp, plus the rounding of S itself.
    "grad": dict.fromkeys(DTYPES + FLOAT8_DTYPES, 3.0),
    # log_softmax / softmax gradients come from a tangent rule: probabilities (each a
    # few roundings), a centred sum and one or two products, each rounded.
    "autodiff_grad": dict.fromkeys(DTYPES + FLOAT8_DTYPES, 4.0),
}

OPTIONS = {
    "z-loss": {"z_loss": 1e-4},
    "soft-cap": {"soft_cap": 30.0},
    "label-smoothing": {"label_smoothing": 0.1},
}

OPTION_ULPS = {
    # z-loss: lse = M + log S within 1.5 ulps, squared, scaled and added (three more
    # roundings): 4.5 in all. Smoothing: log S, the mean gap and three products.
    "value": 2.5,
    # (1 + 2 w lse) rounds once before it multiplies q_j, and the option's term adds one
    # more rounding at the target; under a cap, sech^2 = 1 / cosh^2 (cosh, a division,
    # a square) and one product.
    "grad": 3.0,
}

CAP_ULPS = 8.0


def conditioned_bound(base: float, exponent_args, num_classes: int) -> np.ndarray:
    """`base` ulps plus the conditioning of exp at `exponent_args` and log2 K roundings
    of a sum over `num_classes` terms (`numerics.testing.general_bound`)."""
    return base + np.abs(np.asarray(exponent_args, np.float64)) + np.log2(max(num_classes, 2))


def finite_gaps(z: np.ndarray) -> np.ndarray:
    """z_max - z_j per entry (float64), 0 for infinite entries (they carry no rounding)."""
    z = z.astype(np.float64)
    finite = np.isfinite(z)
    z_max = np.max(np.where(finite, z, -np.inf), axis=-1, keepdims=True)
    return np.where(finite, z_max - z, 0.0)


def weighted_gap(gaps: np.ndarray, exclude: np.ndarray) -> np.ndarray:
    """Per row, the e^-gap-weighted mean gap over entries not in `exclude`: the
    conditioning of the sum of e^-gap_j, each carrying |gap_j| / 2 ulps."""
    weights = np.where(exclude, 0.0, np.exp(-gaps))
    return np.sum(weights * gaps, -1) / np.maximum(np.sum(weights, -1), 1e-300)


def ulp_errors(actual, expected, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(ulp error, unexpected non-finite): NaN matching NaN and equal infinities count 0."""
    actual = np.asarray(actual).astype(np.float64)
    exact = np.asarray(expected).astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf - -inf in mpmath, handled below
        err = oracle.ulp_error(actual, expected, dtype)
    same_nan = np.isnan(actual) & np.isnan(exact)
    wrong = ~np.isfinite(actual) & ~(same_nan | (actual == exact))
    return np.where(same_nan | wrong, 0.0, np.nan_to_num(err, nan=np.inf)), wrong


def errors_in_ulps_of(grad, exact, scale, dtype) -> np.ndarray:
    """|grad - exact| in ulps of `scale` (one smallest normal forgiven: flush to zero).

    For gradients formed from larger terms that cancel (q - p, an option's term), whose
    error no implementation can make small relative to the result itself.
    """
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    got, want = np.asarray(grad, np.float64), np.asarray(exact).astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))  # equal infinities, NaN for NaN
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - want)
        err = np.maximum(diff - tiny, 0) / oracle.ulp(np.maximum(scale, tiny), dtype)
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))


def option_conditioning(z: np.ndarray, labels: np.ndarray, **options):
    """For logits z (rows, K) and labels, with the options of `numerics.cross_entropy`:
    the ulps added to the value bound (rows,) and to the gradient bound (rows, K) under a
    cap (`CAP_ULPS`), and the scale (the largest term) each gradient entry is formed from
    (rows, K), in whose ulps option gradients are measured; all float64.

    Example:
      >>> import numpy as np
      >>> value, grad, scale = option_conditioning(np.array([[20.0, 0.0]]), np.array([0]),
      ...                                          z_loss=1e-4)
      >>> float(value[0]), round(float(scale[0, 0]), 6)  # 2 w lse q_t ~ 0.004 dominates
      (0.0, 0.004)
    """
    z64 = z.astype(np.float64)
    cap = options.get("soft_cap")
    w, alpha = options.get("z_loss", 0.0), options.get("label_smoothing", 0.0)
    zc = cap * np.tanh(z64 / cap) if cap else z64
    finite = np.isfinite(zc)
    k = z.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        top = np.max(np.where(finite, zc, -np.inf), -1, keepdims=True)
        e = np.where(finite, np.exp(zc - top), 0.0)
        total = e.sum(-1, keepdims=True)
        q = e / total
        lse = top + np.log(total)
        is_t = np.arange(k) == labels[:, None]
        others = np.where(is_t, 0.0, e).sum(-1, keepdims=True) / total
        q_t = np.where(is_t, q, 0.0).sum(-1, keepdims=True)
        terms = [np.where(is_t, others, q * (1 + 2 * w * lse))]
        if w:
            terms.append(np.where(is_t, 2 * w * lse * q_t, 0.0))
        if alpha:
            terms.append(np.where(is_t, alpha * (k - 1) / k, alpha / k))
        scale = np.max(np.abs(np.stack(terms)), 0)
        if cap:
            scale = scale / np.cosh(z64 / cap) ** 2
            conditioning = CAP_ULPS * np.max(np.where(finite, np.abs(zc), 0.0), -1)
            slope = np.where(np.isfinite(z64), 3 * np.abs(z64 / cap) + 2, 0.0)
            grad_conditioning = conditioning[:, None] + slope
        else:
            conditioning = np.zeros(len(z))
            grad_conditioning = np.zeros(z.shape)
    return conditioning, grad_conditioning, np.nan_to_num(scale)
