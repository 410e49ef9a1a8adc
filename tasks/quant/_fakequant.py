"""Simulated (fake) uniform quantization and range estimators for post-training quantization.

What is simulated: q(x; s, z, b) = s (clip(round(x / s) + z, lo, hi) - z) (Jacob et al.,
the paper's eq. 6), computed in float32 so the model keeps running in float.

- Weights: symmetric per-tensor, z = 0, signed grid [-2^(b-1), 2^(b-1) - 1] (unsigned
  [0, 2^b - 1] when the tensor has no negative entry), s = absmax / hi; absmax from the
  tensor (min-max) or from a grid search minimising the squared error (MSE).
- Activations: asymmetric per-tensor, grid [0, 2^b - 1], s = (x_max - x_min) / (2^b - 1),
  z = round(-x_min / s); the range always contains 0, so zeros (padding, clipped-softmax
  outputs) stay exact. Static ranges from calibration batches: running min-max (the
  first batch sets the range, then range = m range + (1 - m) batch range, m = 0.9),
  the same with per-batch percentiles instead of min/max, or MSE on a histogram.

Why our own module and not a library: AQT (`aqtp`) and Qwix quantize tensor
contractions (`lax.dot_general` / einsum) inside Flax modules. The paper quantizes
more than matmul operands: the softmax output, the residual sums, the embedding sum and
LayerNorm outputs, each with its own static range from calibration. Those are plain
elementwise tensors that contraction-injection libraries skip, and our models are plain
functions, not Flax modules. A quantize-dequantize function applied at named taps in the
forward pass (`tasks.quant._models`) covers all of them in ~150 lines, with no new
dependency; the formulas follow the paper's public code (ranges contain 0, momentum
0.9, symmetric weights with a signed grid).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

_MIN_SCALE = 1e-8  # an all-zero tensor gets this scale instead of 0/0


def _levels(n_bits: ArrayLike, dtype) -> jax.Array:
    """2^b - 1 as a float of `dtype` (b may be traced, so one compile serves every width)."""
    return jnp.exp2(jnp.asarray(n_bits).astype(dtype)) - 1


def asymmetric_qparams(
    x_min: ArrayLike, x_max: ArrayLike, n_bits: ArrayLike
) -> tuple[jax.Array, jax.Array]:
    """(scale, zero_point) of the grid [0, 2^b - 1] over [min(x_min, 0), max(x_max, 0)]."""
    x_min = jnp.minimum(jnp.asarray(x_min, jnp.float32), 0.0)
    x_max = jnp.maximum(jnp.asarray(x_max, jnp.float32), 0.0)
    levels = _levels(n_bits, jnp.float32)
    scale = jnp.maximum((x_max - x_min) / levels, _MIN_SCALE)
    zero_point = jnp.clip(jnp.round(-x_min / scale), 0.0, levels)
    return scale, zero_point


def fake_quant_asymmetric(x: jax.Array, x_min, x_max, n_bits) -> jax.Array:
    """Quantize-dequantize `x` on the asymmetric grid of the range [x_min, x_max] (scalars)."""
    scale, zero_point = asymmetric_qparams(x_min, x_max, n_bits)
    scale, zero_point = scale.astype(x.dtype), zero_point.astype(x.dtype)
    levels = _levels(n_bits, x.dtype)
    q = jnp.clip(jnp.round(x / scale) + zero_point, jnp.zeros((), x.dtype), levels)
    return scale * (q - zero_point)


def fake_quant_symmetric(x: jax.Array, absmax, n_bits, signed=True) -> jax.Array:
    """Quantize-dequantize `x` on the symmetric grid with scale absmax / (2^(b-1) - 1).

    `signed` (a bool or a boolean array): grid [-2^(b-1), 2^(b-1) - 1]; else [0, 2^b - 1]
    with scale absmax / (2^b - 1), for tensors without negative entries.
    """
    b = jnp.asarray(n_bits).astype(x.dtype)
    signed = jnp.asarray(signed)
    hi = jnp.where(signed, jnp.exp2(b - 1) - 1, jnp.exp2(b) - 1)
    lo = jnp.where(signed, -jnp.exp2(b - 1), jnp.zeros((), x.dtype))
    scale = jnp.maximum(jnp.asarray(absmax).astype(x.dtype) / hi, _MIN_SCALE)
    return scale * jnp.clip(jnp.round(x / scale), lo, hi)


def weight_absmax(w: jax.Array, n_bits: int, method: str = "minmax") -> jax.Array:
    """The symmetric range of weight tensor `w` (a float32 scalar): max |w| ('minmax') or the
    MSE-optimal clip ('mse') among 100 candidates absmax * k / 100, k = 1..100 (the public
    code's grid size, on the tensor's own range: its search up to absmax + 0.5 is too coarse
    for weights of size ~0.1)."""
    w = jnp.asarray(w, jnp.float32)
    absmax = jnp.max(jnp.abs(w))
    if method == "minmax":
        return absmax
    if method != "mse":
        raise ValueError(f"weight range method must be 'minmax' or 'mse', got {method!r}")
    signed = jnp.min(w) < 0
    cands = absmax * jnp.arange(1, 101, dtype=jnp.float32) / 100.0

    def err(c: jax.Array) -> jax.Array:
        return jnp.sum(jnp.square(fake_quant_symmetric(w, c, n_bits, signed) - w))

    return cands[jnp.argmin(jax.lax.map(err, cands))]


def quantize_weights(params: dict, names: tuple[str, ...], n_bits: int, method: str) -> dict:
    """`params` with each tensor in `names` quantize-dequantized symmetrically per tensor."""
    return _quantize_weights(params, tuple(names), jnp.float32(n_bits), method)


@functools.partial(jax.jit, static_argnames=("names", "method"))  # bit width traced
def _quantize_weights(params: dict, names: tuple[str, ...], n_bits: jax.Array, method: str) -> dict:
    out = dict(params)
    for name in names:
        w = params[name]
        absmax = weight_absmax(w, n_bits, method).astype(w.dtype)
        out[name] = fake_quant_symmetric(w, absmax, n_bits, jnp.min(w) < 0)
    return out


def running_minmax(
    stats: np.ndarray,
    momentum: float = 0.9,  # the paper's running min-max momentum
) -> tuple[float, float]:
    """Range from per-batch (lo, hi) rows, in order: first row, then m * range + (1 - m) * row."""
    stats = np.asarray(stats, np.float64)
    lo, hi = stats[0]
    for b_lo, b_hi in stats[1:]:
        lo = momentum * lo + (1 - momentum) * b_lo
        hi = momentum * hi + (1 - momentum) * b_hi
    return float(lo), float(hi)


def mse_range(
    hist: np.ndarray, lo: float, hi: float, n_bits: int, grid: int = 50
) -> tuple[float, float]:
    """The asymmetric range minimising the squared error of a histogram over [lo, hi].

    Each bin counts as its centre. Candidates shrink each end independently to
    lo * i / grid and hi * j / grid (i, j = 1..grid), so a one-sided tensor keeps 0.
    """
    hist = np.asarray(hist, np.float64)
    edges = np.linspace(lo, hi, len(hist) + 1)
    centres = jnp.asarray((edges[:-1] + edges[1:]) / 2, jnp.float32)
    fracs = jnp.arange(1, grid + 1, dtype=jnp.float32) / grid
    los = min(lo, 0.0) * fracs
    his = max(hi, 0.0) * fracs
    errs = _mse_grid(centres, jnp.asarray(hist, jnp.float32), los, his, n_bits)
    i, j = np.unravel_index(int(jnp.argmin(errs)), errs.shape)
    return float(los[i]), float(his[j])


@functools.partial(jax.jit, static_argnames="n_bits")
def _mse_grid(centres, counts, los, his, n_bits: int) -> jax.Array:
    def err(a, b):
        q = fake_quant_asymmetric(centres, a, b, n_bits)
        return jnp.sum(counts * jnp.square(q - centres))

    return jax.vmap(lambda a: jax.vmap(lambda b: err(a, b))(his))(los)
