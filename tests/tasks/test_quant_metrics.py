"""Outlier metrics against NumPy on known tensors."""

import jax.numpy as jnp
import numpy as np
import pytest

from tasks.quant import attention_mass, inf_norm, kurtosis, outlier_mask


def test_gaussian_kurtosis_is_three():
    x = np.random.default_rng(0).normal(2.0, 3.0, (4, 250, 100)).astype(np.float32)
    k = np.asarray(kurtosis(jnp.asarray(x)))
    assert k.shape == (4,)
    # Standard error of the sample kurtosis is sqrt(24 / n) ~ 0.03 at n = 25,000.
    np.testing.assert_allclose(k, 3.0, atol=0.15)


def test_kurtosis_matches_numpy_formula():
    rng = np.random.default_rng(1)
    x = rng.standard_t(3, (3, 40, 16))  # heavy tails
    x[1, 7, 3] = 80.0  # one outlier
    flat = x.reshape(3, -1)
    mu = flat.mean(axis=1, keepdims=True)
    s = flat.std(axis=1, ddof=1)  # torch.std, as the paper's code
    want = ((flat - mu) ** 4).mean(axis=1) / (s**4 + 1e-6)
    got = np.asarray(kurtosis(jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[1] > 100  # one entry at ~30 sigma dominates


def test_kurtosis_of_a_single_spike():
    # n - 1 zeros and one 1: mean((x - mu)^4) / s^4 ~ n for large n.
    x = np.zeros((1, 1000), np.float32)
    x[0, 0] = 1.0
    n = 1000
    mu = 1 / n
    m4 = ((1 - mu) ** 4 + (n - 1) * mu**4) / n
    var = ((1 - mu) ** 2 + (n - 1) * mu**2) / (n - 1)
    assert float(kurtosis(jnp.asarray(x))[0]) == pytest.approx(m4 / (var**2 + 1e-6), rel=1e-4)


def test_inf_norm_per_sample():
    x = np.random.default_rng(2).normal(size=(5, 7, 3)).astype(np.float32)
    x[2, 1, 1] = -40.0
    got = np.asarray(inf_norm(jnp.asarray(x)))
    np.testing.assert_array_equal(got, np.abs(x).reshape(5, -1).max(axis=1))
    assert got[2] == 40.0


def test_outlier_mask_six_sigma():
    x = np.random.default_rng(3).normal(size=(2, 64, 32)).astype(np.float32)
    x[0, 5, 7] = 50.0
    x[1, 9, 2] = -50.0
    got = np.asarray(outlier_mask(jnp.asarray(x)))
    flat = x.reshape(2, -1)
    mu, s = flat.mean(axis=1), flat.std(axis=1)
    want = np.abs(x - mu[:, None, None]) > 6 * s[:, None, None]
    np.testing.assert_array_equal(got, want)
    assert got[0, 5, 7] and got[1, 9, 2]
    assert got.sum() == 2


def test_attention_mass_on_keys():
    probs = np.zeros((1, 2, 3, 3), np.float32)
    probs[0, 0] = [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]
    probs[0, 1] = [[0, 0, 1], [0, 0, 1], [0, 0, 1]]
    keys = np.array([[True, False, True]])
    got = np.asarray(attention_mass(jnp.asarray(probs), jnp.asarray(keys)))
    np.testing.assert_allclose(got, [[(1 + 0.5 + 0.7) / 3, 1.0]], rtol=1e-6)
