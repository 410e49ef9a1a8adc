"""The public contract of `numerics`: names, dtypes, shapes, errors, edge cases, baselines."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import numerics
from grokbench import runtime
from numerics import oracle, standard
from tests.tolerances import BF16, DTYPES, F32

LOSSES = [
    numerics.cross_entropy,
    standard.cross_entropy,
    numerics.stablemax_cross_entropy,
    numerics.zero_sum_cross_entropy,
]
SOFT = [numerics.soft_target_cross_entropy, standard.soft_target_cross_entropy]
NORMALIZERS = [numerics.log_softmax, numerics.softmax, standard.log_softmax, standard.softmax]


def test_every_export_has_a_docstring():
    for name in numerics.__all__:
        assert getattr(numerics, name).__doc__, name
    for name in [
        "log_softmax",
        "softmax",
        "logsumexp",
        "cross_entropy",
        "soft_target_cross_entropy",
    ]:
        assert getattr(standard, name).__doc__, name


@pytest.mark.parametrize(
    ("dtype", "cliff"), [(BF16, 5.545), (np.float16, 7.625), (F32, 16.636), (np.float64, 36.737)]
)
def test_precision_cliff_values(dtype, cliff):
    assert numerics.precision_cliff(dtype) == pytest.approx(cliff, abs=5e-4)
    assert numerics.precision_cliff(dtype) == oracle.precision_cliff(jnp.finfo(dtype).nmant + 1)


def test_precision_cliff_and_equilibrium_reject_bad_input():
    with pytest.raises(TypeError):
        numerics.precision_cliff(np.int32)
    with pytest.raises(ValueError):
        numerics.equilibrium_margin(-1e-8)
    assert numerics.equilibrium_margin(0.0) == np.inf
    assert [round(numerics.equilibrium_margin(e), 2) for e in (1e-8, 1e-12, 1e-16)] == [
        18.42,
        27.63,
        36.84,
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("loss", LOSSES)
def test_losses_keep_dtype_and_batch_shape(dtype, loss):
    # Dtypes and shapes are the trace's (`jax.eval_shape`: the same primitives an eager call
    # runs one by one, nothing compiled); the values come from one jitted program.
    z = jnp.zeros((2, 3, 5), dtype)
    labels = jnp.zeros((2, 3), jnp.int32)
    with jax.enable_x64(dtype == np.float64):
        out = jax.eval_shape(loss, z, labels)
        grad = jax.eval_shape(jax.grad(lambda z: loss(z, labels).sum()), z)
        assert out.shape == (2, 3) and out.dtype == dtype
        assert grad.shape == z.shape and grad.dtype == dtype
        # The class axis can sit anywhere.
        both = jax.jit(lambda z: (loss(z, labels), loss(jnp.moveaxis(z, -1, 1), labels, axis=1)))
        values, moved = both(z)
        assert moved.shape == values.shape == out.shape and moved.dtype == dtype
        np.testing.assert_array_equal(np.asarray(moved), np.asarray(values))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fn", NORMALIZERS + SOFT)
def test_normalizers_and_soft_targets_keep_dtype(dtype, fn):
    z = jnp.linspace(-3, 3, 12).astype(dtype).reshape(3, 4)
    with jax.enable_x64(dtype == np.float64):  # the trace's dtype and shape, as above
        out = jax.eval_shape(fn, z, z) if fn in SOFT else jax.eval_shape(fn, z)
    assert out.dtype == dtype
    assert out.shape == ((3,) if fn in SOFT else (3, 4))


@jax.jit  # test_empty_batch_and_single_class in one program, not one per primitive
def _empty_and_single(empty_z, empty_t, z, t):
    return (
        numerics.cross_entropy(empty_z, empty_t),
        jax.value_and_grad(numerics.cross_entropy)(z, t),
        numerics.logit_margin(z, t),
        numerics.log_softmax(z[None] + 2.0),
    )


def test_empty_batch_and_single_class():
    empty, (loss, grad), margin, logs = _empty_and_single(
        jnp.zeros((0, 4)), jnp.zeros((0,), jnp.int32), jnp.array([3.0]), jnp.array(0)
    )
    assert empty.shape == (0,)
    assert float(loss) == 0.0 and float(grad[0]) == 0.0
    assert float(margin) == np.inf
    np.testing.assert_array_equal(logs, [[0.0]])  # log_softmax([[5.0]])


def test_bad_inputs_raise_clear_errors():
    z = jnp.zeros((2, 3))
    with pytest.raises(TypeError, match="floating-point"):
        numerics.cross_entropy(jnp.zeros((2, 3), jnp.int32), jnp.zeros(2, jnp.int32))
    with pytest.raises(TypeError, match="integer"):
        numerics.cross_entropy(z, jnp.zeros(2))
    with pytest.raises(ValueError, match="shape"):
        numerics.cross_entropy(z, jnp.zeros(3, jnp.int32))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        numerics.cross_entropy(z, jnp.array([0, 3]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        numerics.cross_entropy(z, jnp.array([-1, 0]))
    with pytest.raises(ValueError, match="axis"):
        numerics.log_softmax(z, axis=2)
    with pytest.raises(TypeError, match="boolean"):
        numerics.softmax(z, where=jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="floating-point"):
        numerics.soft_target_cross_entropy(z, jnp.zeros((2, 3), jnp.int32))
    with pytest.raises(TypeError, match="same dtype"):
        numerics.soft_target_cross_entropy(z, jnp.zeros((2, 3), jnp.bfloat16))
    with pytest.raises(ValueError, match="same shape"):
        numerics.soft_target_cross_entropy(z, jnp.zeros((2, 4)))
    with pytest.raises(ValueError, match="temperature"):
        numerics.soft_target_cross_entropy(z, z, temperature=0.0)


def test_out_of_range_labels_under_jit_give_nan():
    z = jnp.zeros((3, 4))
    labels = jnp.array([0, 4, -1])
    per_row = jax.jit(numerics.cross_entropy)(z, labels)
    assert np.isfinite(per_row[0]) and np.isnan(per_row[1]) and np.isnan(per_row[2])
    grads = jax.jit(jax.grad(lambda z, t: numerics.cross_entropy(z, t).sum()))(z, labels)
    assert np.all(np.isfinite(grads[0])) and np.all(np.isnan(grads[1:]))


@pytest.mark.parametrize("fn", [numerics.log_softmax, numerics.softmax])
def test_nan_propagates_to_the_row(fn):
    z = jnp.array([[1.0, jnp.nan, 2.0], [1.0, 2.0, 3.0]])
    out = np.asarray(fn(z))
    assert np.all(np.isnan(out[0])) and np.all(np.isfinite(out[1]))


def test_nan_propagates_through_losses():
    z = jnp.array([[1.0, jnp.nan, 2.0], [1.0, 2.0, 3.0]])
    loss = numerics.cross_entropy(z, jnp.array([0, 0]))
    assert np.isnan(loss[0]) and np.isfinite(loss[1])
    soft = numerics.soft_target_cross_entropy(z, jnp.ones_like(z))
    assert np.isnan(soft[0]) and np.isfinite(soft[1])
    assert np.isnan(numerics.logit_margin(z, jnp.array([0, 0]))[0])


def test_infinite_and_huge_logits():
    # docs/style.md 10: [36., 10000.] and -inf entries. Jitted: one program per function
    # and shape, not one per primitive.
    value_and_grad = jax.jit(jax.value_and_grad(numerics.cross_entropy))
    loss, grad = value_and_grad(jnp.array([36.0, 10000.0]), jnp.array(1))
    assert float(loss) == 0.0 and np.all(np.asarray(grad) == 0.0)  # e^-9964 underflows
    loss, grad = value_and_grad(jnp.array([36.0, 10000.0]), jnp.array(0))
    assert float(loss) == 9964.0 and np.asarray(grad).tolist() == [-1.0, 1.0]
    z = jnp.array([-jnp.inf, 0.0, 1.0])
    loss, grad = value_and_grad(z, jnp.array(2))
    assert np.isfinite(loss) and float(grad[0]) == 0.0
    log_probs, g = jax.jit(
        lambda a, b: (numerics.log_softmax(a), jax.grad(lambda z: numerics.log_softmax(z)[1])(b))
    )(jnp.array([jnp.inf, 0.0]), jnp.array([-jnp.inf, 0.0]))
    np.testing.assert_array_equal(np.asarray(log_probs), [0.0, -np.inf])
    assert np.all(np.isfinite(g))


@jax.jit  # every masked computation of test_masks in one program, not one per primitive
def _masked(z, keep):
    none = jnp.zeros_like(keep)
    return dict(
        logs=numerics.log_softmax(z, where=keep),
        subset_logs=jax.nn.log_softmax(z[0, [0, 2, 3]]),
        probs=numerics.softmax(z, where=keep),
        none_logs=numerics.log_softmax(z, where=none),
        none_probs=numerics.softmax(z, where=none),
        loss_grad=jax.value_and_grad(
            lambda z: numerics.cross_entropy(z, jnp.array([2]), where=keep)[0]
        )(z),
        sub_loss_grad=jax.value_and_grad(lambda z: numerics.cross_entropy(z, jnp.array(1)))(
            z[0, [0, 2, 3]]
        ),
        masked_target=numerics.cross_entropy(z, jnp.array([1]), where=keep)[0],
        optax_form=jax.nn.logsumexp(z[0, [0, 2, 3]]) - z[0, 1],
    )


def test_masks():
    z = jnp.array([[1.0, 2.0, 3.0, 4.0]])
    keep = jnp.array([[True, False, True, True]])
    out = _masked(z, keep)
    logs = out["logs"]
    assert logs[0, 1] == -np.inf
    np.testing.assert_allclose(logs[0, [0, 2, 3]], out["subset_logs"], rtol=1e-6)
    assert out["probs"][0, 1] == 0
    # Fully masked rows: -inf log-probabilities, 0 probabilities.
    assert np.all(np.asarray(out["none_logs"]) == -np.inf)
    assert np.all(np.asarray(out["none_probs"]) == 0)
    # Cross-entropy over the kept entries equals cross-entropy on the subset.
    loss, grad = out["loss_grad"]
    sub_loss, sub_grad = out["sub_loss_grad"]
    np.testing.assert_allclose(loss, sub_loss, rtol=1e-6)
    np.testing.assert_allclose(grad[0, [0, 2, 3]], sub_grad, rtol=1e-6)
    assert grad[0, 1] == 0
    # A masked-out target gives optax's logsumexp(kept) - z_t (issue 19).
    np.testing.assert_allclose(out["masked_target"], out["optax_form"], rtol=1e-6)


def test_cross_entropy_past_exact_float_indices(monkeypatch):
    # Beyond 2^24 classes float32 cannot hold every index, and the target is left
    # out of S_others by an integer comparison instead: same weights, same numbers.
    from numerics import _cross_entropy

    z = jnp.array([[3.0, 3.0, 1.0, -jnp.inf], [9.0, -9.0, -9.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    t = jnp.array([0, 0, 1])
    keep = jnp.array([[True, True, True, False], [True] * 4, [True, False, True, True]])

    def loss_and_grads():
        # A fresh jit each call, so the second traces again under the monkeypatch.
        return jax.jit(
            lambda z: [
                jax.value_and_grad(lambda z, w=w: numerics.cross_entropy(z, t, where=w).sum())(z)
                for w in (None, keep)
            ]
        )(z)

    fused = loss_and_grads()
    monkeypatch.setattr(_cross_entropy, "_index_exact", lambda n, dtype: False)
    for ours, theirs in zip(loss_and_grads(), fused, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# The slow tier's (-m slow), every function (each ~40 eager primitives compiled, eager under
# vmap as many again, cross_entropy's bf16 gradient eager ~60 more). Their fast siblings:
# test_jit_and_vmap_agree_with_eager_on_small_rows below (cross_entropy eager,
# jitted and vmapped: the same jit, vmap and eager machinery), and the eager calls of
# logit_margin and soft_target_cross_entropy in test_nan_propagates_through_losses (each
# function under jit against the oracle: test_random_oracle.py, and
# test_stablemax_against_oracle here).
@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["cross_entropy", "logit_margin", "stablemax_cross_entropy", "soft_target_cross_entropy"],
)
def test_jit_and_vmap_agree_with_eager(name):
    # Fusion may reorder a sum, so agreement is to a few ulps, not bit-for-bit.
    z = jax.random.normal(jax.random.key(0), (4, 6), jnp.float32)
    t = jnp.array([0, 5, 2, 3])
    fn = getattr(numerics, name)

    def close(a, b):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=4 * np.finfo(np.float32).eps)

    if name == "soft_target_cross_entropy":
        close(jax.jit(fn)(z, z[::-1]), fn(z, z[::-1]))
        return
    close(jax.jit(fn)(z, t), fn(z, t))
    close(jax.vmap(fn)(z, t), fn(z, t))
    if name != "cross_entropy":
        return
    # The gradient too, in bf16 (test_random_oracle.py measures accuracy under jit).
    zb = (3 * z).astype(jnp.bfloat16)
    grad = jax.grad(lambda a: numerics.cross_entropy(a, t).sum())
    eager, jitted = np.asarray(grad(zb), np.float32), np.asarray(jax.jit(grad)(zb), np.float32)
    eps = float(jnp.finfo(jnp.bfloat16).eps)
    np.testing.assert_allclose(jitted, eager, rtol=eps, atol=eps * np.abs(eager).max())


def test_jit_and_vmap_agree_with_eager_on_small_rows():
    # The fast tier's share of the test above: cross_entropy eager, under jit and vmapped,
    # within the same 4 ulps of the dtype, on (2, 3) logits in x64's default float64, the
    # shapes and dtypes of test_nan_propagates_through_losses, whose eager programs this
    # reuses (the vmap under jit here: one program, not one per batched primitive).
    z = jax.random.normal(jax.random.key(0), (2, 3), jnp.float64)
    t = jnp.array([0, 2])
    eager = np.asarray(numerics.cross_entropy(z, t))
    for other in (jax.jit(numerics.cross_entropy), jax.jit(jax.vmap(numerics.cross_entropy))):
        np.testing.assert_allclose(
            np.asarray(other(z, t)), eager, rtol=4 * np.finfo(np.float64).eps
        )


# slow: float16; fast sibling: the bfloat16 case (the same 16-bit path of the same formulas)
@pytest.mark.parametrize(
    "dtype", [BF16, pytest.param(np.float16, marks=pytest.mark.slow), F32], ids=str
)
def test_standard_is_jax_nn_and_optax_bit_for_bit(dtype):
    z = (3 * jax.random.normal(jax.random.key(1), (5, 7))).astype(dtype)
    t = jnp.array([0, 1, 6, 3, 2])
    teacher = z[::-1]
    # Each side in one program of its own (not one per primitive), so neither is compiled
    # together with the other.
    mine = jax.jit(
        lambda z: [
            standard.log_softmax(z),
            standard.softmax(z),
            standard.logsumexp(z, (1,), b=teacher, where=z > -3, return_sign=True),
            standard.cross_entropy(z, t),
            jax.grad(lambda z: standard.cross_entropy(z, t).sum())(z),
            standard.soft_target_cross_entropy(z, teacher),
        ]
    )(z)
    theirs = jax.jit(
        lambda z: [
            jax.nn.log_softmax(z),
            jax.nn.softmax(z),
            jax.nn.logsumexp(z, (1,), b=teacher, where=z > -3, return_sign=True),
            optax.softmax_cross_entropy_with_integer_labels(z, t),
            jax.grad(lambda z: optax.softmax_cross_entropy_with_integer_labels(z, t).sum())(z),
            optax.softmax_cross_entropy(z, jax.nn.softmax(teacher)),
        ]
    )(z)
    for got, want in zip(mine, theirs, strict=True):
        np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64))


def test_fixed_equals_standard_where_standard_is_exact():
    z = jnp.array([[0.5, -0.25, 1.0, 0.0]], jnp.float64)
    t = jnp.array([2])
    with jax.enable_x64(True):
        z = jnp.asarray(z, jnp.float64)
        # Each side in one program (op by op the four calls compiled ~100 small ones).
        fixed, standard_ = (
            jax.jit(lambda z, f=f: (f(z, t), jax.grad(lambda z: f(z, t).sum())(z)))(z)
            for f in (numerics.cross_entropy, standard.cross_entropy)
        )
        np.testing.assert_allclose(fixed[0], standard_[0], rtol=1e-15)
        np.testing.assert_allclose(fixed[1], standard_[1], rtol=1e-14)


def test_integer_labels_equal_a_one_hot_teacher():
    z = jax.random.normal(jax.random.key(2), (3, 5))
    t = jnp.array([4, 0, 2])
    one_hot_logits = jnp.where(jax.nn.one_hot(t, 5, dtype=bool), 0.0, -jnp.inf)
    hard, hard_grad = jax.jit(jax.value_and_grad(lambda z: numerics.cross_entropy(z, t).sum()))(z)
    soft, soft_grad = jax.jit(
        jax.value_and_grad(lambda z: numerics.soft_target_cross_entropy(z, one_hot_logits).sum())
    )(z)
    np.testing.assert_allclose(soft, hard, rtol=1e-6)
    np.testing.assert_allclose(soft_grad, hard_grad, atol=1e-7)


@jax.jit  # the whole example in one program, not one per primitive
def _section_2(z, t):
    return (
        standard.log_softmax(z),
        jax.grad(lambda z: standard.softmax(z)[0])(z),
        jax.value_and_grad(standard.cross_entropy)(z, t),
        numerics.log_softmax(z),
        jax.grad(lambda z: numerics.softmax(z)[0])(z),
        jax.value_and_grad(numerics.cross_entropy)(z, t),
    )


def test_paper_section_2_example():
    z, t = jnp.array([9.0, -9.0, -9.0], jnp.float32), jnp.array(0)
    std_log, std_dq0, (std_loss, std_grad), log, dq0, (loss, grad) = _section_2(z, t)
    # Standard: all three collapse to exactly 0 on the target.
    assert std_log[0] == 0.0
    assert std_dq0[0] == 0.0
    assert std_loss == 0.0 and std_grad[0] == 0.0 and std_grad[1] > 0
    # Fixed: the paper's values, summing to zero.
    np.testing.assert_allclose(log, [-3.046e-8, -18.0, -18.0], rtol=1e-3)
    np.testing.assert_allclose(dq0, [3.046e-8, -1.523e-8, -1.523e-8], rtol=1e-3)
    np.testing.assert_allclose(loss, 3.046e-8, rtol=1e-3)
    np.testing.assert_allclose(grad, [-3.046e-8, 1.523e-8, 1.523e-8], rtol=1e-3)


@jax.jit  # the whole example in one program, not one per primitive
def _section_3(z_s, z_t):
    return (
        jax.grad(standard.soft_target_cross_entropy)(z_s, z_t),
        jax.grad(numerics.soft_target_cross_entropy)(z_s, z_t),
        jax.grad(numerics.soft_target_cross_entropy)(z_t, z_t),
    )


def test_paper_section_3_example():
    z_t = jnp.array([2.0, 1.0, 0.0], jnp.float32)
    z_s = z_t + jnp.array([-1e-7, 1e-7, 0.0], jnp.float32)
    std, fixed, at_teacher = _section_3(z_s, z_t)
    exact = oracle.soft_target_cross_entropy_grad(np.asarray(z_s), np.asarray(z_t))
    if runtime.has_fma():  # the paper's digits are those of a fused multiply-add's rounding
        np.testing.assert_allclose(std, [-5.960e-8, 1.452e-8, -1.123e-9], rtol=2e-3)
    # Without it the standard gradient rounds otherwise, and is as wrong (the paper's point).
    assert np.max(np.abs(np.asarray(std, np.float64) - exact) / np.abs(exact)) > 0.1
    np.testing.assert_allclose(fixed, [-4.596e-8, 4.144e-8, 4.513e-9], rtol=1e-3)
    np.testing.assert_allclose(fixed, exact, rtol=1e-5)
    assert np.all(np.asarray(at_teacher) == 0)


@pytest.mark.parametrize("dtype", [BF16, F32], ids=str)
def test_standard_soft_target_is_not_zero_at_the_teacher(dtype):
    # Regression for Softmax Cancellation (paper section 3): the residual the fixed
    # version removes, about 1e-3 in bf16 and 1e-8 in fp32.
    z = (3 * jax.random.normal(jax.random.key(3), (64, 16))).astype(dtype)
    # One program for each gradient, not one per primitive.
    residual = jax.jit(jax.grad(lambda s: standard.soft_target_cross_entropy(s, z).sum()))(z)
    fixed = jax.jit(jax.grad(lambda s: numerics.soft_target_cross_entropy(s, z).sum()))(z)
    assert float(jnp.abs(residual).max()) > 0
    assert float(jnp.abs(fixed).max()) == 0


def test_stablemax_against_oracle():
    z = np.array([[2.0, -1.0, 0.5, -3.0], [100.0, -50.0, 0.0, 1.0]])
    t = np.array([0, 3])
    with jax.enable_x64(True):  # value and gradient in one program, not one per primitive

        def loss(z):
            return numerics.stablemax_cross_entropy(z, jnp.asarray(t))

        per_row, grad = jax.jit(lambda z: (loss(z), jax.grad(lambda z: loss(z).sum())(z)))(
            jnp.asarray(z)
        )
    exact_loss, exact_grad = oracle.stablemax_cross_entropy_value_and_grad(z, t)
    np.testing.assert_allclose(per_row, exact_loss, rtol=1e-14)
    np.testing.assert_allclose(grad, exact_grad, rtol=1e-13, atol=1e-16)


def test_zero_sum_projection():
    z = jnp.array([[30.0, 0.0, -1.0]], jnp.float32)  # past the fp32 cliff
    t = jnp.array([0])
    # Each gradient in one program, not one per primitive.
    grad = jax.jit(jax.grad(lambda z: numerics.zero_sum_cross_entropy(z, t).sum()))(z)
    std = jax.jit(jax.grad(lambda z: standard.cross_entropy(z, t).sum()))(z)
    assert std[0, 0] == 0.0  # collapsed
    np.testing.assert_allclose(
        np.asarray(grad, np.float64), oracle.zero_sum_projection(np.asarray(std)), rtol=1e-6
    )
    assert abs(float(grad.sum())) < 1e-20
    # The target gets only -1/K of the non-target total (paper section 6).
    np.testing.assert_allclose(grad[0, 0], -std[0, 1:].sum() / 3, rtol=1e-6)


def test_clipped_softmax_against_oracle_and_dead_attention():
    x = np.array([[4.0, 0.0, -1.0, 2.0]])
    gamma = numerics.clipped_softmax_gamma(4.0, 128)
    assert gamma == -4.0 / 128
    with jax.enable_x64(True):
        out = jax.jit(numerics.clipped_softmax)(jnp.asarray(x), gamma)
    np.testing.assert_allclose(out, oracle.clipped_softmax(x, gamma), rtol=1e-14, atol=1e-15)
    assert np.all(np.asarray(jax.jit(numerics.clipped_softmax)(jnp.asarray(x), 0.0)) > 0)
    # Near-uniform attention over T >> alpha tokens: every stretched probability
    # is below zero, the output and its gradient vanish (the "dead attention" of
    # the quantization lab).
    uniform = jnp.zeros((1, 130))
    dead = jax.jit(numerics.clipped_softmax)(uniform, numerics.clipped_softmax_gamma(4.0, 130))
    assert np.all(np.asarray(dead) == 0)
    grad = jax.jit(jax.grad(lambda u: numerics.clipped_softmax(u, -4.0 / 130).sum()))(uniform)
    assert np.all(np.asarray(grad) == 0)
    with pytest.raises(ValueError):
        numerics.clipped_softmax_gamma(0.0, 10)


@pytest.mark.parametrize("ulps", [-2, -1, 1, 2])
def test_loss_survives_a_target_logit_off_the_max_by_rounding(ulps):
    # Under jit XLA may recompute a fused producer of the logits once for the target's
    # gather and once for the row max, with different rounding (a multiply-add contracted
    # in one copy only), so z_t - z_max can come out a few ulps off 0 for a target that is
    # the max. The loss must stay log1p(e^-m) of what it was given, never ~ulp(z) or < 0.
    from numerics._lm_loss import loss_from

    z = np.float32(65.254)
    shift = np.float32(ulps * np.spacing(z))
    s_others = np.float32(1e-20)  # sum_{j != t} e^(z_j - z_max): the target far above
    s_all = s_others + np.exp(shift)
    loss = float(loss_from(jnp.asarray(True), jnp.asarray(shift), s_others, s_all))
    exact = 1e-20 * np.exp(-float(shift))
    assert loss == pytest.approx(exact, rel=1e-5)


def test_first_zero_finds_the_exact_threshold_and_checks_its_bracket():
    assert numerics.first_zero(lambda m: m[0] < 5.0, 0.0, 100.0, np.float16) == 5.0
    below_one = np.nextafter(np.float32(1.0), np.float32(0.0))
    assert numerics.first_zero(lambda m: m[0] < below_one, 0.5, 1.0, np.float32) == below_one
    with pytest.raises(ValueError):
        numerics.first_zero(lambda m: 0, 1.0, 1.0, np.float32)
