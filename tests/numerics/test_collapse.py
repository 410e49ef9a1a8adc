"""`numerics.collapse_stats`: the Softmax Collapse monitor against its definitions."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import numerics
from numerics import oracle
from tests.tolerances import BF16, F32

# Everything under jit: eager dispatch would compile each operation on its own.
_stats = jax.jit(numerics.collapse_stats)
_rows = jax.jit(numerics.collapse_stats_from_rows, static_argnames="dtype")


@jax.jit
def _optax_grads(z, labels):
    return jax.grad(lambda z: optax.softmax_cross_entropy_with_integer_labels(z, labels).sum())(z)


def _batch(dtype, seed=0):
    """Rows [m, 0, ..., 0]-like logits with margins spread across the bf16 and fp32 cliffs."""
    rng = np.random.default_rng(seed)
    margins = np.array([-2.0, 1.0, 4.0, 5.0, 6.0, 9.0, 15.0, 17.0, 20.0, 30.0])
    z = rng.standard_normal((len(margins), 7))
    labels = rng.integers(0, 7, len(margins))
    for i, (m, t) in enumerate(zip(margins, labels, strict=True)):
        others = np.delete(z[i], t)
        z[i, t] = np.log(np.sum(np.exp(others))) + m
    return jnp.asarray(z.astype(dtype)), jnp.asarray(labels.astype(np.int32))


# slow: float16; fast sibling: the bfloat16 case (the same 16-bit path; each reads its own
# dtype's cliff from numerics.precision_cliff)
@pytest.mark.parametrize(
    "dtype", [BF16, pytest.param(np.float16, marks=pytest.mark.slow), F32], ids=str
)
def test_stats_follow_their_definitions(dtype):
    z, labels = _batch(dtype)
    stats = _stats(z, labels)
    cliff = numerics.precision_cliff(dtype)
    margins = oracle.logit_margin(np.asarray(z).astype(np.float64), np.asarray(labels))
    grads = _optax_grads(z, labels).astype(np.float64)
    target = grads[np.arange(len(labels)), np.asarray(labels)]
    sums = np.abs(grads.sum(-1))
    assert stats.frac_past_cliff.dtype == np.float32
    assert float(stats.frac_past_cliff) == pytest.approx(np.mean(margins >= cliff))
    assert float(stats.frac_zero_target_grad) == pytest.approx(np.mean(target == 0))
    # The row sums cancel: float32 sums of the exactly widened gradients are within
    # K roundings of the largest partial sum, about K eps32 sum |g| (not relative).
    slack = 7 * np.finfo(np.float32).eps * np.abs(grads).sum(-1).max()
    assert float(stats.grad_sum_max) == pytest.approx(sums.max(), abs=slack)
    assert float(stats.grad_sum_mean) == pytest.approx(sums.mean(), abs=slack)
    ratio = sums.sum() / np.abs(grads).sum()
    assert float(stats.grad_sum_ratio) == pytest.approx(ratio, abs=slack * len(sums))
    for got, want in (
        (stats.margin_min, margins.min()),
        (stats.margin_median, np.median(margins)),
        (stats.margin_max, margins.max()),
    ):
        assert float(got) == pytest.approx(want, rel=1e-6, abs=1e-6)
    assert float(stats.max_logit) == float(np.asarray(z).astype(np.float64).max())
    # Past the dtype's cliff optax's target gradient is exactly 0; below it, it is not.
    if dtype == BF16:
        assert 0 < float(stats.frac_zero_target_grad) < 1


def test_fixed_loss_gradient_never_collapses():
    z, labels = _batch(BF16)
    grads = jax.jit(jax.grad(lambda z: numerics.cross_entropy(z, labels).sum()))(z)
    stats = _stats(z, labels, grads=grads)
    assert float(stats.frac_past_cliff) > 0.5
    assert float(stats.frac_zero_target_grad) == 0.0
    assert float(_stats(z, labels).frac_zero_target_grad) > 0.5


def test_rows_variant_matches_and_masks():
    z, labels = _batch(F32)
    full = _stats(z, labels)
    g = jnp.asarray(_optax_grads(z, labels))
    rows = _rows(
        jax.jit(numerics.logit_margin)(z, labels),
        g[np.arange(len(labels)), np.asarray(labels)],
        g.sum(-1),
        jnp.abs(g).sum(-1),
        z.max(-1),
        dtype=F32,
    )
    for a, b in zip(full, rows, strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-6)
    # An example mask drops rows; the statistics are those of the kept rows alone.
    keep = np.arange(len(labels)) % 2 == 0
    masked = _stats(z, labels, where=keep)
    alone = _stats(z[::2], labels[::2])
    for a, b in zip(masked, alone, strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-6)
    # No kept row: NaN everywhere, never a silent number.
    empty = _stats(z, labels, where=jnp.zeros(len(labels), bool))
    assert all(np.isnan(float(v)) for v in empty)


def test_entry_mask_leaves_masked_classes_out():
    z = jnp.array([[3.0, 1.0, 50.0]])
    labels = jnp.array([0])
    stats = _stats(z, labels, where=jnp.array([[True, True, False]]))
    assert float(stats.max_logit) == 3.0
    assert float(stats.margin_min) == pytest.approx(2.0)


def test_nan_logits_give_nan_quantiles():
    z = jnp.array([[jnp.nan, 0.0], [2.0, 0.0]])
    stats = _stats(z, jnp.array([0, 0]), where=jnp.array([True, True]))
    assert np.isnan(float(stats.margin_median)) and np.isnan(float(stats.margin_min))


def test_bad_input_raises_clearly():
    z, labels = _batch(F32)
    with pytest.raises(TypeError, match="floating-point"):
        numerics.collapse_stats(jnp.zeros((2, 3), jnp.int32), jnp.zeros(2, jnp.int32))
    with pytest.raises(ValueError, match="shape of logits"):
        numerics.collapse_stats(z, labels, grads=z[:2])
    with pytest.raises(ValueError, match="one shape"):
        numerics.collapse_stats_from_rows(z[:, 0], z[:, 0], z[:, 0], z[:, 0], z[:3, 0], dtype=F32)
