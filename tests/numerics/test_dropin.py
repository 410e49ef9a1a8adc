"""`numerics` as a drop-in for optax and jax.nn (issue 19).

Forward-mode autodiff, empty class axes, tuple and None axes, masks and padded
batches read as optax reads them, and residual memory under `jax.grad`; `logsumexp` on
`jax.nn.logsumexp`'s arguments, and the KL divergence on optax's own test inputs (issue
43). The remaining deliberate differences are listed in docs/compat.md.
"""

import contextlib
import functools
import io
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.ad_checkpoint import print_saved_residuals
from jax.test_util import check_grads

import numerics
from tests.tolerances import BF16, F16, F32, F64

Z = np.array([[0.3, -1.2, 2.0, 0.5], [1.5, 0.25, -0.75, 1.0]])  # well-conditioned rows
T = np.array([2, 0])
TEACHER = np.array([[0.1, -0.4, 1.5, 0.2], [0.9, 0.6, -1.0, 0.4]])


def _ce(z):
    return numerics.cross_entropy(z, T)


def _soft(z):
    return numerics.soft_target_cross_entropy(z, TEACHER.astype(z.dtype))


def _soft_both(z):
    # The teacher differentiated too: z holds both logit arrays side by side.
    return numerics.soft_target_cross_entropy(z[:, :4], z[:, 4:])


def _zero_sum(z):
    return numerics.zero_sum_cross_entropy(z, T)


def _lse(z):
    return numerics.logsumexp(z, axis=-1)


# Each fixed function and the jax.nn / optax function it stands in for.
PAIRS = {
    "cross_entropy": (_ce, lambda z: optax.softmax_cross_entropy_with_integer_labels(z, T)),
    "soft_target": (
        _soft,
        lambda z: optax.softmax_cross_entropy(z, jax.nn.softmax(TEACHER.astype(z.dtype))),
    ),
    "log_softmax": (numerics.log_softmax, jax.nn.log_softmax),
    "softmax": (numerics.softmax, jax.nn.softmax),
    "logsumexp": (_lse, lambda z: jax.nn.logsumexp(z, axis=-1)),
}
FORWARD_MODE = [_ce, _soft, _soft_both, numerics.log_softmax, numerics.softmax, _zero_sum, _lse]


def _weighted(fn):
    """A scalar with a non-trivial Hessian: a fixed weighting of every output (the plain
    sum of a softmax is constant)."""

    def scalar(z):
        out = fn(z)
        weights = jnp.cos(jnp.arange(out.size, dtype=out.dtype)).reshape(out.shape)
        return jnp.sum(out * weights)

    return scalar


def _inputs(fn, dtype):
    z = np.concatenate([Z, TEACHER], axis=1) if fn is _soft_both else Z
    return jnp.asarray(z, dtype)


# -- 1. forward mode ---------------------------------------------------------------------


@pytest.mark.fast_compile  # two paths that must agree (conftest.py, _fast_compile)
@pytest.mark.parametrize("name", list(PAIRS))
def test_jvp_jacfwd_and_hessian_agree_with_the_peers(name):
    ours, theirs = PAIRS[name]
    z = jnp.asarray(Z, F64)
    dz = jnp.asarray(np.cos(np.arange(Z.size)).reshape(Z.shape), F64)
    close = functools.partial(np.testing.assert_allclose, rtol=1e-12, atol=1e-14)

    def derivatives(f, z, dz):
        return (
            jax.jvp(f, (z,), (dz,))[1],
            jax.jacfwd(f)(z),
            jax.hessian(_weighted(f))(z),
            # Forward over reverse: a Hessian-vector product.
            jax.jvp(jax.grad(_weighted(f)), (z,), (dz,))[1],
        )

    @jax.jit  # every derivative of both functions in one program per case
    def everything(z, dz):
        return derivatives(ours, z, dz), derivatives(theirs, z, dz), jax.jacrev(ours)(z)

    mine, peers, reverse = everything(z, dz)
    for got, want in zip(mine, peers, strict=True):
        close(got, want)
    close(reverse, mine[1])  # jacrev against jacfwd


# Finite-difference step per dtype: large enough that rounding f(z +- eps v) in the
# dtype stays below the check's tolerance (jax's own per-dtype gradient tolerance:
# 1e-5 f64, 2e-3 f32), small enough for the truncation error.
FD_EPS = {F64: 1e-4, F32: 3e-2}


def _matrix(dtypes, default):
    """Every (function, dtype) pair; all but the `default` ones are marked slow."""
    return [
        pytest.param(
            fn,
            dtype,
            marks=() if (fn, dtype) in default else pytest.mark.slow,
            id=f"{fn.__name__}-{np.dtype(dtype).name}",
        )
        for fn in FORWARD_MODE
        for dtype in dtypes
    ]


# The slow tier's, every case (each compiles ~15 programs, 2.5 to 4 s). Their fast siblings:
# test_jvp_jacfwd_and_hessian_agree_with_the_peers (every function's first and second
# derivatives in both modes, float64: jvp, jacfwd, jacrev, the Hessian and Hessian-vector
# products through the custom rules) and test_sixteen_bit_derivatives_match_float64
# (cross_entropy's and _soft_both's first and second order, reverse over forward too).
@pytest.mark.parametrize(("fn", "dtype"), _matrix([F64, F32], set()))
def test_check_grads_to_order_two_in_both_modes(fn, dtype):
    # jit: each derivative compiles once instead of dispatching op by op.
    check_grads(
        jax.jit(fn), (_inputs(fn, dtype),), order=2, modes=("fwd", "rev"), eps=FD_EPS[dtype]
    )


# Finite differences in 8 or 11 significand bits cannot meet both bounds at once:
# with jax's f16 tolerance (1e-2), a step of 1e-1 failed one reverse-over-reverse
# check of the soft target and a step of 5e-2 one forward-then-reverse check of
# log_softmax, by the rounding of f(z +- eps v) in f16 (the first passes at the
# same step in f64; both derivatives pass the float64 comparison below). So the
# 16-bit types are held to the float64 derivatives of the same inputs instead, a
# sharper check: first order within 8 ulps of the largest entry, second order
# (one more product and sum of rounded terms) within 16.
@pytest.mark.parametrize(("fn", "dtype"), _matrix([BF16, F16], {(_ce, BF16), (_soft_both, F16)}))
def test_sixteen_bit_derivatives_match_float64(fn, dtype):
    z = _inputs(fn, dtype)
    exact_z = z.astype(F64)
    dz = jnp.asarray(np.sin(np.arange(z.size)).reshape(z.shape), dtype)

    scalar = _weighted(fn)

    @jax.jit
    def derivatives(z, dz):
        return (
            jax.jvp(fn, (z,), (dz,))[1],
            jax.grad(scalar)(z),
            jax.jvp(jax.grad(scalar), (z,), (dz,))[1],  # forward over reverse
            jax.grad(lambda z: jax.jvp(scalar, (z,), (dz,))[1])(z),  # reverse over forward
        )

    eps = float(jnp.finfo(dtype).eps)
    for order, got, want in zip(
        [1, 1, 2, 2], derivatives(z, dz), derivatives(exact_z, dz.astype(F64)), strict=True
    ):
        got, want = np.asarray(got, F64), np.asarray(want)
        tol = (8 if order == 1 else 16) * eps * max(1.0, np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)


# -- 2. empty class axes ------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
@pytest.mark.parametrize("fn", [numerics.log_softmax, numerics.softmax])
def test_empty_class_axis_gives_an_empty_array(fn, shape):
    z = jnp.zeros(shape)
    for f in (fn, jax.jit(fn)):
        out = f(z)
        assert out.shape == shape and out.dtype == z.dtype
    assert jax.grad(lambda z: fn(z).sum())(z).shape == shape


def test_cross_entropy_with_no_classes():
    # No label can be valid: concrete labels are refused, traced ones give NaN.
    with pytest.raises(ValueError, match=r"\[0, 0\)"):
        numerics.cross_entropy(jnp.zeros((2, 0)), jnp.zeros((2,), jnp.int32))
    out = jax.jit(numerics.cross_entropy)(jnp.zeros((2, 0)), jnp.zeros((2,), jnp.int32))
    assert out.shape == (2,) and np.all(np.isnan(out))
    assert numerics.cross_entropy(jnp.zeros((0, 0)), jnp.zeros((0,), jnp.int32)).shape == (0,)


# -- 3. tuple and None axes -------------------------------------------------------------


X = np.linspace(-2.0, 3.0, 2 * 3 * 4).reshape(2, 3, 4) ** 2 / 3


@pytest.mark.parametrize(
    ("ours", "theirs", "axis"),
    [
        # Every axis form with one function each, and each function with two of them, in
        # the fast tier; the other pairs in the slow tier.
        pytest.param(ours, theirs, axis, marks=() if (a + f) % 2 == 0 else pytest.mark.slow)
        for f, (ours, theirs) in enumerate(
            [(numerics.log_softmax, jax.nn.log_softmax), (numerics.softmax, jax.nn.softmax)]
        )
        for a, axis in enumerate([(1, 2), (2, 0), (-1,), None])
    ],
)
def test_tuple_and_none_axes_normalise_over_all_of_them(ours, theirs, axis):
    x = jnp.asarray(X, F32)
    keep = jnp.asarray(np.arange(X.size).reshape(X.shape) % 5 != 0)

    @jax.jit  # one program per case instead of one per primitive
    def both(x, keep):
        return [(ours(x, axis=axis, where=w), theirs(x, axis=axis, where=w)) for w in (None, keep)]

    for got, want in both(x, keep):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tuple_axes_in_the_losses_match_optax():
    x = jnp.asarray(X, F32)
    labels = jnp.array([5, 11])  # flat indices into the (3, 4) class slice
    teacher = x[::-1]

    @jax.jit
    def both(x):
        def ours(x):
            return numerics.cross_entropy(x, labels, axis=(1, 2))

        def theirs(x):
            return optax.softmax_cross_entropy_with_integer_labels(x, labels, axis=(1, 2))

        return (
            (ours(x), theirs(x)),
            (jax.grad(lambda x: ours(x).sum())(x), jax.grad(lambda x: theirs(x).sum())(x)),
            (
                numerics.soft_target_cross_entropy(x, teacher, axis=(0, 2)),
                optax.softmax_cross_entropy(x, jax.nn.softmax(teacher, axis=(0, 2)), axis=(0, 2)),
            ),
        )

    losses, grads, soft = both(x)
    np.testing.assert_allclose(*losses, rtol=1e-6)
    np.testing.assert_allclose(*grads, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(*soft, rtol=1e-6)


X4 = np.cos(np.arange(2 * 3 * 4 * 5)).reshape(2, 3, 4, 5) * 3


@pytest.mark.parametrize(
    "axis",
    [
        (3, 2),
        # slow: (3, 1); fast siblings: (3, 2) (two axes in reverse order, the bug's case) and
        # (3, 1, 0) (reversed and not adjacent)
        pytest.param((3, 1), marks=pytest.mark.slow),
        (3, 1, 0),
        # (3, 2) with negative indices, and a sorted pair: the slow tier's (-m slow).
        pytest.param((-1, -2), marks=pytest.mark.slow),
        pytest.param((2, 3), marks=pytest.mark.slow),
    ],
)
def test_unsorted_tuple_axes_read_the_flat_label_in_the_order_given(axis):
    # issue 31: the axes were sorted, so (3, 2) read the label as an index into the
    # (4, 5) slice instead of the (5, 4) one optax reads; values differed by up to 0.58.
    x = jnp.asarray(X4, F32)
    axes = [a % x.ndim for a in axis]
    batch = tuple(n for a, n in enumerate(x.shape) if a not in axes)
    k = int(np.prod([x.shape[a] for a in axes]))
    labels = jnp.asarray((7 * np.arange(int(np.prod(batch))) + 3).reshape(batch) % k)
    where = jnp.asarray(np.arange(x.size).reshape(x.shape) % 7 != 0)

    @jax.jit
    def both(x):
        def run(f):
            loss = lambda x: f(x, labels, axis=axis, where=where)  # noqa: E731
            return loss(x), jax.grad(lambda x: loss(x).sum())(x)

        return run(numerics.cross_entropy), run(optax.softmax_cross_entropy_with_integer_labels)

    (ours, ours_grad), (theirs, theirs_grad) = both(x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    np.testing.assert_allclose(ours_grad, theirs_grad, rtol=1e-5, atol=1e-7)


def _soft_both_ways(student, teacher, where):
    """(loss, student grad, teacher grad) of ours and of optax's soft-label CE with `where`."""

    def optax_soft(s, t, where):
        entries = where if where.ndim == s.ndim else where[..., None]  # as optax expands it
        return optax.softmax_cross_entropy(s, jax.nn.softmax(t, where=entries), where=where)

    @jax.jit
    def run(student, teacher):
        out = []
        for f in (numerics.soft_target_cross_entropy, optax_soft):
            loss = lambda s, t, f=f: f(s, t, where=where)  # noqa: E731
            grads = jax.grad(lambda s, t, g=loss: g(s, t).sum(), (0, 1))(student, teacher)
            out.append((loss(student, teacher), *grads))
        return out

    return run(student, teacher)


ENTRIES = np.array([[True, True, False, True], [False, True, True, True]])


# slow: an entry mask and two row masks; fast sibling: ..._an_entry_and_a_row_mask below (the
# entry mask and the row mask with a padding row, the same assertions)
@pytest.mark.slow
def test_soft_target_where_masks_entries_and_rows_as_optax():
    _check_soft_target_where(ENTRIES, np.array([True, True]), np.array([True, False]))


def test_soft_target_where_masks_an_entry_and_a_row_mask_as_optax():
    _check_soft_target_where(ENTRIES, np.array([True, False]))


def _check_soft_target_where(*masks):
    student = jnp.asarray(Z, F32)
    teacher = jnp.asarray(TEACHER, F32)
    for where in map(jnp.asarray, masks):
        ours, theirs = _soft_both_ways(student, teacher, where)
        padding = ~np.asarray(jnp.broadcast_to(where.reshape(2, -1), (2, 4)).any(-1))
        for got, want in zip(ours, theirs, strict=True):
            got, want = np.asarray(got), np.asarray(want)
            kept = ~padding
            np.testing.assert_allclose(got[kept], want[kept], rtol=1e-5, atol=1e-7)
            # A padding row: loss 0, gradient 0 for student and teacher (optax: NaN).
            assert np.all(got[padding] == 0)


@pytest.mark.parametrize("dtype", [BF16, F32], ids=str)
def test_soft_target_where_keeps_the_exact_zero_at_the_teacher(dtype):
    z = jnp.asarray(Z, dtype)
    for where in (jnp.array([[True, False, True, True], [False] * 4]), jnp.array([False, True])):
        grad = jax.jit(  # one program instead of one per primitive
            jax.grad(lambda s, w=where: numerics.soft_target_cross_entropy(s, z, where=w).sum())
        )(z)
        assert np.all(np.asarray(grad, np.float64) == 0)
    with pytest.raises(ValueError, match="where"):
        numerics.soft_target_cross_entropy(z, z, where=jnp.ones(4, bool)[None, None])


@pytest.mark.parametrize("axis", [1.0, "1", [0, 1], True])
def test_other_axis_types_raise_a_type_error_naming_axis(axis):
    for call in (
        lambda: numerics.log_softmax(jnp.zeros((2, 3)), axis=axis),
        lambda: numerics.cross_entropy(jnp.zeros((2, 3)), jnp.zeros(2, jnp.int32), axis=axis),
    ):
        with pytest.raises(TypeError, match="axis"):
            call()
    with pytest.raises(ValueError, match="axis"):
        numerics.softmax(jnp.zeros((2, 3)), axis=(1, -1))


# -- 4. masks and padded batches ---------------------------------------------------------


def _ce_both(z, labels, where):
    # (loss, grad of the summed loss) for ours and for optax.
    def run(f):
        def loss(z):
            return f(z, labels, where=where)

        return jax.jit(lambda z: (jax.value_and_grad(lambda z: loss(z).sum())(z), loss(z)))(z)

    return run(numerics.cross_entropy), run(optax.softmax_cross_entropy_with_integer_labels)


def _assert_same(ours, theirs):
    (total, grad), per_row = ours
    (total_o, grad_o), per_row_o = theirs
    np.testing.assert_allclose(per_row, per_row_o, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(total, total_o, rtol=1e-6)
    np.testing.assert_allclose(grad, grad_o, rtol=1e-6, atol=1e-7)


def test_a_padding_row_gives_loss_zero_and_zero_gradient():
    z = jnp.asarray(Z, F32)
    where = jnp.array([[True] * 4, [False] * 4])
    ours, theirs = _ce_both(z, T, where)
    _assert_same(ours, theirs)
    (total, grad), per_row = ours
    assert per_row[1] == 0 and np.all(np.asarray(grad[1]) == 0) and np.isfinite(total)
    # Padding rows' labels are not checked (-1 is a common filler), and the padded
    # batch's mean is finite under jit too.
    padded = jnp.array([2, -1])
    for f in (numerics.cross_entropy, jax.jit(numerics.cross_entropy)):
        assert f(z, padded, where=where)[1] == 0
    mean = jax.jit(
        jax.value_and_grad(lambda z: numerics.cross_entropy(z, padded, where=where).mean())
    )
    loss, grad = mean(z)
    assert np.isfinite(loss) and np.all(np.asarray(grad[1]) == 0) and np.all(np.isfinite(grad))


def test_a_masked_out_target_matches_optax():
    z = jnp.asarray(Z, F32)
    where = jnp.array([[True, True, False, True], [True, False, True, True]])  # row 0's target out
    _assert_same(*_ce_both(z, T, where))


def test_a_per_example_mask_is_read_as_optax_reads_it():
    # K == batch size: a per-example mask must not be broadcast along the classes.
    z = jnp.asarray(np.arange(16.0).reshape(4, 4) % 5, F32)
    labels = jnp.array([0, 3, 1, 2])
    where = jnp.array([True, False, True, True])
    _assert_same(*_ce_both(z, labels, where))


def test_a_mask_of_an_ambiguous_rank_is_refused():
    with pytest.raises(ValueError, match="where"):
        numerics.cross_entropy(
            jnp.zeros((2, 3, 4)), jnp.zeros((2, 3), jnp.int32), where=jnp.ones(4, bool)
        )


# -- 5. residual memory -------------------------------------------------------------------


def _residual_bytes(f, *args):
    """Bytes of what `jax.grad(f)` keeps for the backward pass, as jax prints them."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_saved_residuals(f, *args)
    total = 0
    for dtype, dims in re.findall(r"^(\w+)\[([\d,]*)\]", printed.getvalue(), re.M):
        itemsize = 1 if dtype == "bool" else int(re.sub(r"\D", "", dtype)) // 8
        total += itemsize * int(np.prod([int(d) for d in dims.split(",") if d]))
    return total


BIG_Z = np.resize(Z, (64, 1000)).astype(F32)
BIG_T = np.arange(64) % 1000
BIG_TEACHER = BIG_Z[::-1]
BIG_PAIRS = {
    "cross_entropy": (
        lambda z: numerics.cross_entropy(z, BIG_T),
        lambda z: optax.softmax_cross_entropy_with_integer_labels(z, BIG_T),
    ),
    "soft_target": (
        lambda z: numerics.soft_target_cross_entropy(z, BIG_TEACHER),
        lambda z: optax.softmax_cross_entropy(z, jax.nn.softmax(BIG_TEACHER)),
    ),
    "log_softmax": (numerics.log_softmax, jax.nn.log_softmax),
    "softmax": (numerics.softmax, jax.nn.softmax),
    "logsumexp": (_lse, lambda z: jax.nn.logsumexp(z, axis=-1)),
}


@pytest.mark.parametrize("name", list(BIG_PAIRS))
def test_residuals_are_at_most_one_and_a_half_times_the_peers(name):
    ours, theirs = BIG_PAIRS[name]
    z = jnp.asarray(BIG_Z)
    assert _residual_bytes(_weighted(ours), z) <= 1.5 * _residual_bytes(_weighted(theirs), z)


# -- 6. the KL divergence on optax's own test inputs ------------------------------------

# optax/losses/_classification_test.py (0.2.8), KLDivergenceTest and
# KLDivergenceWithLogTargetsTest: log-probabilities rounded to 4 decimals (rows summing to 1
# within 3e-5), and probabilities of which the second row sums to 0.9.
OPTAX_LOG_PS = np.array(
    [
        [-2.9957, -3.5066, -3.9120, -1.2040, -0.6931, -2.3026],
        [-1.6094, -1.6094, -1.6094, -2.3026, -1.8971, -1.8971],
    ]
)
OPTAX_QS = np.array([[0.2, 0.2, 0.2, 0.1, 0.15, 0.15], [0.05, 0.03, 0.02, 0.3, 0.5, 0.0]])


def test_kl_with_log_targets_is_our_kl_in_optax_argument_order():
    # optax.kl_divergence_with_log_targets(log_predictions, log_targets) is
    # sum exp(log_targets) (log_targets - log_predictions) = KL(targets || predictions):
    # numerics.kl_divergence(student = predictions, teacher = targets). docs/compat.md mapped
    # it to reverse_kl_divergence before issue 43, which swaps the rows' values here.
    log_targets = OPTAX_LOG_PS[::-1]  # optax's `qs` of that test
    theirs, ours, wrong = jax.jit(  # one program, not one per primitive
        lambda p, t: (
            optax.losses.kl_divergence_with_log_targets(p, t),
            numerics.kl_divergence(p, t),
            numerics.reverse_kl_divergence(p, t),
        )
    )(OPTAX_LOG_PS, log_targets)
    # optax's own tolerance there: the inputs' rounding to 4 decimals (ours normalises it
    # away, theirs keeps it) moves the value by up to 7e-5.
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    np.testing.assert_allclose(ours, [0.8875625, 0.7187435584901326], atol=1e-4)  # optax's
    assert np.all(np.abs(wrong - theirs) > 0.1)


@pytest.mark.parametrize(
    ("dtype", "axis"),
    [
        # Every axis in one dtype each in the fast tier; the other pairs in the slow tier.
        pytest.param(dtype, axis, marks=() if (a + d) % 2 == 0 else pytest.mark.slow)
        for d, dtype in enumerate((F32, F64))
        for a, axis in enumerate((0, 1, 2))
    ],
    ids=lambda v: v if isinstance(v, int) else np.dtype(v).name,
)
def test_kl_with_log_targets_matches_optax_on_log_probabilities(dtype, axis):
    # optax's test_axis inputs, as probabilities: targets and predictions normalised along
    # `axis` (log_softmax of random logits, shape (4, 5, 6)).
    rng = np.random.default_rng(43)
    student, teacher = (jnp.asarray(rng.standard_normal((4, 5, 6)), dtype) for _ in range(2))

    @jax.jit  # one program per case instead of one per primitive
    def all_three(student, teacher):
        log_q, log_p = (jax.nn.log_softmax(z, axis=axis) for z in (student, teacher))
        return (
            optax.losses.kl_divergence_with_log_targets(log_q, log_p, axis=axis),
            numerics.kl_divergence(student, teacher, axis=axis),
            numerics.kl_divergence(log_q, log_p, axis=axis),
        )

    theirs, ours, from_logs = (np.asarray(a) for a in all_three(student, teacher))
    # optax sums K = 4 to 6 terms p (log p - log q) of rounded log-probabilities: each term
    # carries about 3 roundings of |log p| + |log q| < 11 (|log p| < 5.5 here), weighted by
    # p (summing to 1), 33 eps; log_softmax's rows sum to 1 within K eps, times KL < 2,
    # 12 eps; ours is within a few eps. 64 eps bounds the sum (1.4e-14 in float64, 7.6e-6
    # in float32; measured 4 eps).
    atol = 64 * float(jnp.finfo(dtype).eps)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol)
    np.testing.assert_allclose(from_logs, theirs, rtol=0, atol=atol)


def test_kl_normalises_a_teacher_that_optax_takes_as_it_is():
    # optax's KLDivergenceTest.test_batched: the second target row sums to s = 0.9. optax
    # computes sum t (log t - log_predictions) on it as given (0.7593); numerics.kl_divergence
    # takes logits, so log t is renormalised to t / s, as is exp(log_predictions) (its rows
    # sum to r = 1 + 1.5e-5 and 1 + 2.7e-5): KL(t / s || p / r) = 0.9490 (docs/compat.md).
    with np.errstate(divide="ignore"):
        log_qs = np.log(OPTAX_QS)
    # Each side in one program (eager, ~30 small ones).
    theirs = np.asarray(jax.jit(optax.kl_divergence)(OPTAX_LOG_PS, OPTAX_QS))
    ours = np.asarray(jax.jit(numerics.kl_divergence)(OPTAX_LOG_PS, log_qs))
    np.testing.assert_allclose(theirs, [0.8875577, 0.7592807], atol=1e-7)  # optax's numbers
    np.testing.assert_allclose(ours, [0.8875725, 0.9490330], atol=1e-7)
    # optax's number from ours: sum t log(t / x) = s KL(t / s || x / r) + s log s - s log r.
    s, r = OPTAX_QS.sum(-1), np.exp(OPTAX_LOG_PS).sum(-1)
    np.testing.assert_allclose(s * ours + s * np.log(s) - s * np.log(r), theirs, rtol=1e-12)


# -- 7. logsumexp with jax.nn.logsumexp's arguments ------------------------------------


def _lse_tolerances(x, b, where, axis):
    """How far ours and jax.nn.logsumexp may differ on float64 rows: the sum of both error
    models (ours: tests/numerics/test_logsumexp.py; jax.nn's M + log(sum) the same count
    without TwoSum and lo), in units u = 2^-53 of the value and of each gradient entry.

    With kappa = sum |b e^x| / |sum b e^x| (1 for b >= 0: the sum's own conditioning), G the
    largest gap M - x (the rounding of x - M, |gap| u per term), L = lse - M:
    value: each side (4 + log2 K + G) kappa + 3 |L| + |lse| (exp 3u, the product by b, the
    sum, the log, M + L); gradient entry w = b e^(x - M) / T: each side |w| (6 + G + (4 +
    log2 K + G) kappa) (exp, product, division, lo and the gap, and T's relative error).
    """
    x = np.asarray(x, np.float64)
    b = np.broadcast_to(np.asarray(b, np.float64), x.shape)
    kept = np.asarray(where) & (b != 0)
    live = np.where(kept, x, -np.inf)
    top = np.max(live, axis=axis, keepdims=True)
    e = np.where(kept, np.exp(live - top), 0.0)
    total = np.sum(b * e, axis=axis, keepdims=True)
    kappa = np.sum(np.abs(b) * e, axis=axis, keepdims=True) / np.abs(total)
    gap = np.max(np.where(kept, top - live, 0.0), axis=axis, keepdims=True)
    k = x.size // top.size
    lse = top + np.log(np.abs(total))
    u = 2.0**-53
    value = 2 * u * ((4 + np.log2(k) + gap) * kappa + 3 * np.abs(lse - top) + np.abs(lse))
    per_entry = 2 * u * (6 + gap + (4 + np.log2(k) + gap) * kappa)
    squeeze = functools.partial(np.squeeze, axis=axis) if axis is not None else np.squeeze
    return squeeze(value), per_entry * np.abs(b * e / total), per_entry * np.abs(e / total)


@pytest.mark.parametrize(
    ("axis", "keepdims"),
    [
        # Every axis form once, keepdims alternating, in the fast tier; the other pairs in
        # the slow tier.
        pytest.param(axis, keepdims, marks=() if (a + k) % 2 == 0 else pytest.mark.slow)
        for k, keepdims in enumerate([False, True])
        for a, axis in enumerate([None, 0, -1, (1, 2), (2, 0), ()])
    ],
)
def test_logsumexp_axes_and_keepdims_as_jax_nn(axis, keepdims):
    x = jnp.asarray(X, F64)
    ours, theirs = jax.jit(  # one program per case instead of one per primitive
        lambda x: (
            numerics.logsumexp(x, axis=axis, keepdims=keepdims),
            jax.nn.logsumexp(x, axis=axis, keepdims=keepdims),
        )
    )(x)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    tol, _, _ = _lse_tolerances(X, 1.0, np.ones(X.shape, bool), axis)
    np.testing.assert_array_less(np.abs(ours - theirs), np.reshape(tol, ours.shape) + 1e-300)


@pytest.mark.parametrize(
    ("axis", "signed"),
    [
        # Every axis once, each sign in the fast tier; the other pairs in the slow tier.
        pytest.param(axis, signed, marks=() if (a + s) % 2 == 0 else pytest.mark.slow)
        for s, signed in enumerate([False, True])
        for a, axis in enumerate([None, 1, (2, 0)])
    ],
)
def test_logsumexp_b_where_and_return_sign_as_jax_nn(axis, signed):
    x = jnp.asarray(X, F64)
    b = jnp.asarray(0.5 + np.cos(np.arange(X.size)).reshape(X.shape) ** 2, F64)
    if signed:  # the larger entries negative: negative sums and cancellation (kappa to 15)
        b = jnp.where(x > 1.0, -b, b)
    where = jnp.asarray(np.arange(X.size).reshape(X.shape) % 5 != 0)

    @jax.jit
    def both(x, b):
        out = []
        for f in (numerics.logsumexp, jax.nn.logsumexp):
            call = functools.partial(f, axis=axis, where=where, return_sign=True)
            grads = jax.grad(lambda x, b, g=call: g(x, b=b)[0].sum(), (0, 1))(x, b)
            out.append((*call(x, b=b), *grads, f(x, axis=axis, b=b, where=where)))
        return out

    ours, theirs = both(x, b)
    value_tol, grad_x_tol, grad_b_tol = _lse_tolerances(X, b, where, axis)
    np.testing.assert_array_equal(ours[1], theirs[1])  # the signs
    assert np.any(ours[1] < 0) == signed
    checks = {
        "log|sum|": (0, value_tol),
        "d/dx": (2, grad_x_tol),
        "d/db": (3, grad_b_tol),
    }
    for name, (i, tol) in checks.items():
        err = np.abs(np.asarray(ours[i]) - np.asarray(theirs[i]))
        assert np.all(err <= tol), (name, float(np.max(err - tol)))
    # Without return_sign: the same, NaN where the sum is negative, as in jax.nn.
    np.testing.assert_array_equal(np.isnan(ours[4]), np.asarray(ours[1]) < 0)
    np.testing.assert_array_equal(np.isnan(ours[4]), np.isnan(theirs[4]))


def test_logsumexp_gradient_in_b_where_b_is_zero():
    # jax.nn drops entries with b = 0 before differentiating, so d/db is 0 there; ours is
    # the derivative, e^(x_k) / sum (a weight that starts at 0 can still grow).
    x = jnp.array([0.0, 1.0, 2.0])
    b = jnp.array([1.0, 0.0, 2.0])
    ours, theirs = jax.jit(  # one program instead of one per primitive
        lambda b: (
            jax.grad(lambda b: numerics.logsumexp(x, b=b))(b),
            jax.grad(lambda b: jax.nn.logsumexp(x, b=b))(b),
        )
    )(b)
    exact = np.exp(x) / np.sum(b * np.exp(x))
    np.testing.assert_allclose(ours, exact, rtol=1e-15)
    assert theirs[1] == 0 and ours[1] > 0
    np.testing.assert_allclose(theirs[::2], exact[::2], rtol=1e-15)
