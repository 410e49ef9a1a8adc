"""The PTQ quantizers and range estimators against hand-computed answers."""

import jax.numpy as jnp
import numpy as np
import pytest

from tasks.quant import (
    fake_quant_asymmetric,
    fake_quant_symmetric,
    mse_range,
    quantize_weights,
    running_minmax,
)
from tasks.quant._fakequant import asymmetric_qparams, weight_absmax


def test_asymmetric_grid_zero_point_and_clipping():
    # Range [-1, 3] at 2 bits: 3 steps of s = 4/3, zero point round(1 / (4/3)) = round(0.75) = 1,
    # so the grid is s * ({0, 1, 2, 3} - 1) = {-4/3, 0, 4/3, 8/3}.
    scale, zero_point = asymmetric_qparams(-1.0, 3.0, 2)
    assert float(scale) == pytest.approx(4 / 3)
    assert float(zero_point) == 1.0
    x = jnp.asarray([-2.0, -0.5, 0.1, 1.0, 2.5, 5.0], jnp.float32)
    got = np.asarray(fake_quant_asymmetric(x, -1.0, 3.0, 2))
    # -2 -> round(-1.5) + 1 = -1, clipped to 0; 5 -> round(3.75) + 1 = 5, clipped to 3.
    want = np.array([-4 / 3, 0.0, 0.0, 4 / 3, 8 / 3, 8 / 3], np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.dtype == np.float32


def test_asymmetric_range_always_contains_zero():
    # A positive range [0.5, 2] is widened to [0, 2]: zero point 0 and zeros stay exact
    # (clipped-softmax zeros, padding).
    scale, zero_point = asymmetric_qparams(0.5, 2.0, 8)
    assert float(zero_point) == 0.0
    assert float(scale) == pytest.approx(2.0 / 255)
    x = jnp.asarray([0.0, 0.25, 0.9, 3.0], jnp.float32)
    got = np.asarray(fake_quant_asymmetric(x, 0.5, 2.0, 8))
    assert got[0] == 0.0
    # 0.25 / s = 31.875 -> 32; 0.9 / s = 114.75 -> 115; 3.0 clips to the top, 255 s = 2.
    np.testing.assert_allclose(got[1:], [32 * 2 / 255, 115 * 2 / 255, 2.0], rtol=1e-6)


def test_asymmetric_8_bit_error_is_at_most_half_a_step_inside_the_range():
    x = jnp.linspace(-0.7, 2.3, 1001, dtype=jnp.float32)
    scale, _ = asymmetric_qparams(-0.7, 2.3, 8)
    err = np.abs(np.asarray(fake_quant_asymmetric(x, -0.7, 2.3, 8) - x))
    assert err.max() <= float(scale) / 2 * (1 + 1e-4)  # float32 rounding of s and x / s


def test_symmetric_signed_grid():
    # absmax 1 at 8 bits: s = 1/127, grid [-128, 127] * s.
    x = jnp.asarray([0.5, -1.0, 2.0, -2.0, 0.0], jnp.float32)
    got = np.asarray(fake_quant_symmetric(x, 1.0, 8))
    # 0.5 / s = 63.5 rounds half to even -> 64.
    np.testing.assert_allclose(got, [64 / 127, -1.0, 1.0, -128 / 127, 0.0], rtol=1e-6)


def test_symmetric_unsigned_grid_for_nonnegative_tensors():
    x = jnp.asarray([0.0, 0.5, 1.0, 1.5], jnp.float32)
    got = np.asarray(fake_quant_symmetric(x, 1.0, 2, signed=False))  # s = 1/3, levels 0..3
    np.testing.assert_allclose(got, [0.0, 2 / 3, 1.0, 1.0], rtol=1e-6)


def test_running_minmax_update():
    rows = [(-1.0, 1.0), (-3.0, 2.0), (0.0, 5.0)]
    # First batch sets the range; then range = 0.9 range + 0.1 batch.
    lo, hi = running_minmax(np.array(rows), momentum=0.9)
    assert lo == pytest.approx(0.9 * (0.9 * -1 + 0.1 * -3) + 0.1 * 0.0)  # -1.08
    assert hi == pytest.approx(0.9 * (0.9 * 1 + 0.1 * 2) + 0.1 * 5.0)  # 1.49
    assert running_minmax(np.array(rows[:1])) == (-1.0, 1.0)


def test_weight_ranges_minmax_and_mse():
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.02, (64, 64)).astype(np.float32)
    w[3, 5] = 0.5  # one outlier weight
    assert float(weight_absmax(w, 8, "minmax")) == pytest.approx(0.5)
    clip = float(weight_absmax(w, 4, "mse"))
    assert clip < 0.5  # at 4 bits clipping the outlier beats spending the grid on it

    def mse(absmax):
        return float(
            np.mean((np.asarray(fake_quant_symmetric(jnp.asarray(w), absmax, 4)) - w) ** 2)
        )

    assert mse(clip) < mse(0.5)
    with pytest.raises(ValueError):
        weight_absmax(w, 8, "max")
    params = {"a": jnp.asarray(w), "b": jnp.asarray(w)}
    q = quantize_weights(params, ("a",), 4, "mse")
    np.testing.assert_array_equal(np.asarray(q["b"]), w)
    np.testing.assert_allclose(
        np.asarray(q["a"]), np.asarray(fake_quant_symmetric(params["a"], clip, 4)), rtol=1e-6
    )


def test_mse_activation_range_clips_a_far_tail():
    # 10^6 entries in [0, 1] and 3 at 50: an 8-bit grid over [0, 50] rounds the bulk badly
    # (squared error 10^6 (50/255)^2 / 12 ~ 3200), clipping the 3 far ones costs less.
    edges = np.linspace(0.0, 50.0, 1001)
    centres = (edges[:-1] + edges[1:]) / 2
    hist = np.where(centres <= 1.0, 50_000.0, 0.0)
    hist[-1] = 3.0
    lo, hi = mse_range(hist, 0.0, 50.0, 8)
    assert lo == 0.0
    assert hi < 50.0
