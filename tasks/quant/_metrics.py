"""Outlier metrics of the quantization lab, as the paper and its public code define them.

Shape letters: B batch (samples), T positions, D features, H heads, N = T * D.

- Infinity norm: per sample, max |x| over the whole (T, D) tensor; averaged over the
  evaluation samples per tensor (every tensor of `QuantModelConfig.metric_taps`); the
  reported "max inf-norm" is the max of those averages over
  `QuantModelConfig.max_inf_norm_taps` (the encoder's FFN outputs, the decoder's layer
  outputs: the tensors the paper's Table 2 reads).
- Kurtosis: per sample over the flattened (T, D) tensor, mean((x - mu)^4) / (s^4 + 1e-6)
  with mu the mean and s the standard deviation with Bessel's correction (torch's
  default, as the public code); a Gaussian gives 3. Averaged over the samples per
  tensor; "avg kurtosis" is the mean over `QuantModelConfig.kurtosis_taps`, "max
  kurtosis" the max.
- Outliers (our operational choice; the paper counts them without stating a
  threshold): entries more than `n_sigma` = 6 standard deviations from their sample's
  mean, the 6-sigma rule of Bondarenko et al. (2021). Counted per hidden dimension (which
  dims carry them) and per token id (which tokens they sit on: delimiters?).
- Attention mass on a token class: per head, the sum of a query's attention
  probabilities on keys of that class, averaged over queries and samples.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

KURTOSIS_EPS = 1e-6
"""Added to s^4 in the kurtosis denominator, as the paper's public code."""

OUTLIER_SIGMA = 6.0
"""An outlier is more than this many standard deviations from its sample's mean."""


def _flat(x: jax.Array) -> jax.Array:
    return x.reshape(x.shape[0], -1)


def inf_norm(x: jax.Array) -> jax.Array:
    """Per-sample infinity norm (B,) of x (B, ...) flattened over the other axes."""
    return jnp.max(jnp.abs(_flat(x)), axis=1)


def kurtosis(x: jax.Array) -> jax.Array:
    """Per-sample kurtosis (B,) of x (B, ...) flattened: mean((x-mu)^4) / (s^4 + 1e-6)."""
    x = _flat(x)
    n = x.shape[1]
    mu = jnp.mean(x, axis=1, keepdims=True)
    dev = x - mu
    var = jnp.sum(jnp.square(dev), axis=1) / (n - 1)  # Bessel's correction, as torch.std
    m4 = jnp.mean(jnp.square(jnp.square(dev)), axis=1)
    return m4 / (jnp.square(var) + KURTOSIS_EPS)


def outlier_mask(x_BxTxD: jax.Array, n_sigma: float = OUTLIER_SIGMA) -> jax.Array:
    """Boolean (B, T, D): |x - mu| > n_sigma * s, with mu and s per sample over (T, D)."""
    mu = jnp.mean(x_BxTxD, axis=(1, 2), keepdims=True)
    s = jnp.std(x_BxTxD, axis=(1, 2), keepdims=True)
    return jnp.abs(x_BxTxD - mu) > n_sigma * s


def attention_mass(probs_BxHxTxT: jax.Array, key_mask_BxT: jax.Array) -> jax.Array:
    """(B, H): per head, the attention mass on keys where `key_mask` holds, mean over queries."""
    on_keys = jnp.einsum("bhqk,bk->bhq", probs_BxHxTxT, key_mask_BxT.astype(probs_BxHxTxT.dtype))
    return jnp.mean(on_keys, axis=2)
