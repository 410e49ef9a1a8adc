"""Vocabulary-parallel cross-entropy (issue 48, item 1): sharded against unsharded.

`numerics.sharded_linear_cross_entropy` and `numerics.sharded_cross_entropy` (the
`vocab_axis=` paths of `linear_cross_entropy` and `cross_entropy` inside `jax.shard_map`)
against the unsharded calls on the same inputs: per-row losses and the gradients (d hidden
and d weight, or d logits), in the four dtypes, with every option, on 2 host devices here
(the root conftest.py) and on 4, 8 and a 2 x 4 (data x vocabulary) mesh in one subprocess.

The error model (written before the comparison was run; `_bounds` implements it)
-------------------------------------------------------------------------------------

Inputs are dyadic (`_dyadic`), so every logit is exact in any accumulation order and both
paths see the same logits. With `chunk_size` dividing V / P (the layouts below), the
unsharded chunks are the sharded ones, column for column, and each chunk's statistics
(m_c, s_c = sum e^(z_j - m_c), the target's logit, the gap sums) are the same operations
on the same numbers in both. The only differences are how the chunks' statistics combine:

- unsharded (`_lm_loss.combine`): S = sum_c s_c e^(m_c - M) over C = V / chunk chunks;
- sharded: each device combines its C / P chunks to its own max M_i, then
  S = psum_i S_i e^(M_i - M).

In units of u (the compute dtype's unit roundoff, eps / 2; float32 for bf16, fp16 and
float32, float64 for float64), XLA's exp is within 1 ulp (2u) and a product or a sum
rounds by u. Every term of S is positive, so a relative error bound on each term, plus
(n - 1) u for a recursive sum of n terms (any order), bounds S's relative error:

    unsharded: a_u = [C > 1] (2 + 1) + (C - 1)            (one exp and product per chunk)
    sharded:   a_s = [C/P > 1] (2 + 1) + (C/P - 1) + (2 + 1) + (P - 1)   (twice, and the psum)

and B = a_u + a_s bounds |S_sharded - S_unsharded| / S; the same B bounds S_others and the
gap sum G (terms g_c + n_c (M - m_c): a subtraction, product and sum in place of the exp
and product). The max M and the target's logit are exact in both (max, pmax).

Loss. With e = B u: CE (log1p of x = S_others e^-shift, or log S - shift) moves by at most
e, log S by e, G / n by e G / n, lse = M + log S by e, w lse^2 by 2 w |lse| e. Each path
then evaluates `_lm_loss.finish` on its inputs, whose own roundings are within F = 16 u of
T = (1 - alpha) CE + alpha (log S + G / n) + w lse^2 (all three terms >= 0): exp 2,
product 1, log1p 2 (the margin form); log 2 (log S); add 1 and divide 1 (smoothing); its
two products and sum 3; lse 1, lse^2 2, its weight and sum 2. So

    |L_sharded - L_unsharded| <= u (B (1 + alpha G / n + 2 w |lse|) + 2 F T),

in the compute dtype; bf16 and fp16 round each once more, adding (eps_dtype / 2) (|a| + |b|)
for the two roundings of a and b.

Gradient entries (`_lm_loss.chunk_grad`). q_j = e^(z_j - M) / S shares its exp; 1 / S moves
by e; the target's -S_others / S by 2e; 1 + 2 w lse by 2 w (e + 6 u max(1, |lse|)) (log S,
lse and the factor's roundings). Each path's own roundings, F_g = 12 u of the entry's scale
s_j (its terms' magnitudes, `numerics.testing.option_conditioning`'s scale): exp 2, 1 / S 1,
product 1, the z-loss factor 2 and its product 1, the smoothing subtraction 1, the target's
three terms 3, sech^2's product 1. So

    |g_sharded - g_unsharded| <= u (2 B + 2 F_g) s_j + 2 w q_j (B + 6 max(1, |lse|)) u,

and bf16 / fp16 round g once more (eps_dtype / 2 (|a| + |b|)), as does the materialized
loss's gradient.

d hidden = sum_j g_nj w_jd (in the compute dtype; exact products for 16-bit operands, one
rounding u for float32 and float64): the unsharded sum is chunk-wise dots (chunk - 1) then a
sum over the C chunks (C - 1); the sharded adds C / P chunks then the psum over P devices.
So |dh_a - dh_b| <= sum_j |w_jd| |dg_j| + (d_u + d_s) u sum_j |g_nj w_jd|, with d_u =
(chunk - 1) + (C - 1) + p and d_s = (chunk - 1) + (C/P - 1) + (P - 1) + p (p = 1 for the
rounded product in float32 / float64, else 0), then the final rounding to 16 bits as above.
d weight = sum_n hidden_nd g_nj over the N rows: the same shapes in both paths, but bounded
for any order: sum_n |h_nd| |dg_nj| + 2 (N - 1 + p) u sum_n |h_nd g_nj|.

The materialized `cross_entropy` is one chunk per device (chunk = K / P) against one chunk
of K: the per-shard sums are not the unsharded sum's terms grouped, so each path's S carries
its whole depth: a_u = 2 + (K - 1) (exp, the sum of K terms) and a_s = 2 + (K/P - 1) + 3 +
(P - 1); the rest as above, with d logits = g itself.

The model is a worst case (every rounding at its bound, recursive sums): measured on these
inputs, float32 and float64 differences reach at most about 5 % of it (the subprocess test
prints the ratio per case), and bf16 and fp16 results are bitwise equal to the unsharded.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numerics
from tests.tolerances import BF16, DTYPES, F16, F32, F64

N, D, V, CHUNK = 8, 16, 32, 4  # V / P divisible by CHUNK for P = 1, 2, 4, 8
W_LOSS = 1e-2

OPTIONS = {
    "plain": {},
    "z_loss": {"z_loss": W_LOSS},
    "soft_cap": {"soft_cap": 5.0},
    "smoothing": {"label_smoothing": 0.1},
    "all": {"z_loss": W_LOSS, "soft_cap": 5.0, "label_smoothing": 0.2, "masks": True},
}


def _dyadic(rng, shape, dtype):
    """Entries k / 8 with |k| < 64 (16-bit dtypes: k / 4, |k| <= 3): every logit, a sum of
    D = 16 products, is exact in the dtype, in any order (as test_linear_cross_entropy)."""
    if np.dtype(dtype).itemsize == 2:
        return (rng.integers(-3, 4, shape) / 4).astype(dtype)
    return (rng.integers(-63, 64, shape) / 8).astype(dtype)


@functools.cache
def _case(dtype, seed=0):
    rng = np.random.default_rng([seed, np.dtype(dtype).itemsize])
    hidden = _dyadic(rng, (N, D), dtype)
    weight = _dyadic(rng, (D, V), dtype)
    bias = _dyadic(rng, (V,), dtype)
    labels = rng.integers(0, V, N).astype(np.int32)
    labels[0], labels[1], labels[2] = 0, V - 1, V // 2  # the first, last and a middle shard
    where = np.ones(N, bool)
    where[3] = False
    labels[4] = -100  # ignore_index
    entry = rng.random((N, V)) > 0.2  # an entry mask for the materialized loss
    entry[5, :] = False  # a padding row
    entry[6, labels[6]] = False  # a masked-out target
    return hidden, weight, bias, labels, where, entry


def _mesh(shape, names):
    devices = np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


def _run_linear(dtype, name, mesh, vocab_axis, batch_axis):
    """((loss, dh, dw) sharded, (loss, dh, dw) unsharded), NumPy float64, and the capped
    float64 logits' ingredients for the bound."""
    hidden, weight, bias, labels, where, _ = _case(dtype)
    opts = dict(OPTIONS[name])
    masks = opts.pop("masks", False)
    extra = {"bias": jnp.asarray(bias), "where": where, "ignore_index": -100} if masks else {}
    if not masks:  # the ignored position's label -100 is invalid without ignore_index
        labels = np.where(labels < 0, 3, labels).astype(np.int32)

    def sharded(h, w):
        return numerics.sharded_linear_cross_entropy(
            mesh, h, w, labels, vocab_axis=vocab_axis, batch_axis=batch_axis,
            chunk_size=CHUNK, **extra, **opts,
        )  # fmt: skip

    def unsharded(h, w):
        return numerics.linear_cross_entropy(h, w, labels, chunk_size=CHUNK, **extra, **opts)

    @jax.jit
    def run(h, w):
        out = []
        for f in (sharded, unsharded):
            loss, vjp = jax.vjp(f, h, w)
            out.append((loss, *vjp(jnp.ones_like(loss))))
        return tuple(out)

    got, want = run(jnp.asarray(hidden), jnp.asarray(weight))
    return [np.asarray(a, np.float64) for a in got], [np.asarray(a, np.float64) for a in want]


def _run_materialized(dtype, name, mesh, vocab_axis, batch_axis):
    hidden, weight, _, labels, _, entry = _case(dtype)
    labels = np.where(labels < 0, 3, labels).astype(np.int32)
    logits = jnp.asarray(hidden.astype(np.float64) @ weight.astype(np.float64), dtype)  # exact
    opts = dict(OPTIONS[name])
    masks = opts.pop("masks", False)
    mask = entry if masks else None

    def sharded(z):
        return numerics.sharded_cross_entropy(
            mesh, z, labels, mask, vocab_axis=vocab_axis, batch_axis=batch_axis, **opts
        )

    def unsharded(z):
        return numerics.cross_entropy(z, labels, where=mask, **opts)

    @jax.jit
    def run(z):
        out = []
        for f in (sharded, unsharded):
            loss, vjp = jax.vjp(f, z)
            out.append((loss, *vjp(jnp.ones_like(loss))))
        return tuple(out)

    got, want = run(logits)
    return [np.asarray(a, np.float64) for a in got], [np.asarray(a, np.float64) for a in want]


def _scales(z_raw, labels, mask, opts):
    """Per row (T, G / n, |lse|) and per entry (s_j, q_j), from the exact logits in
    float64 (the scales of the error model; their own error is far below its slack)."""
    c = opts.get("soft_cap")
    z = z_raw if c is None else c * np.tanh(z_raw / c)
    w, alpha = opts.get("z_loss", 0.0), opts.get("label_smoothing", 0.0)
    zm = np.where(mask, z, -np.inf)
    m = np.max(np.where(np.isfinite(zm), zm, -np.inf), axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(zm - m)
    s = e.sum(-1, keepdims=True)
    lse = m + np.log(np.maximum(s, 1e-300))
    q = e / np.maximum(s, 1e-300)
    rows = np.arange(len(labels))
    t = np.clip(labels, 0, z.shape[-1] - 1)
    n = np.maximum(mask.sum(-1, keepdims=True), 1)
    gaps = np.where(mask, m - z, 0.0).sum(-1, keepdims=True) / n
    ce = lse[:, 0] - z[rows, t]
    log_s = np.log(np.maximum(s[:, 0], 1e-300))
    total = (1 - alpha) * np.abs(ce) + alpha * (log_s + gaps[:, 0]) + w * lse[:, 0] ** 2
    scale = q * (1 + 2 * w * np.abs(lse)) + alpha / n
    target = (1 - q[rows, t]) + 2 * w * np.abs(lse[:, 0]) * q[rows, t] + alpha
    scale[rows, t] = target
    if c is not None:
        scale = scale / np.cosh(z_raw / c) ** 2
    return total, gaps[:, 0], np.abs(lse[:, 0]), scale, q


def _bounds(dtype, name, p, k, chunk, n_rows):
    """(B, d_u, d_s, p_round) of the module docstring's model for P devices, K classes."""
    c = k // chunk
    if chunk == k // p:  # the materialized loss: one chunk per device against one of K
        a_u = 2 + (k - 1)
        a_s = 2 + (k // p - 1) + (3 + (p - 1) if p > 1 else 0)
    else:
        a_u = (3 if c > 1 else 0) + (c - 1)
        a_s = (3 if c // p > 1 else 0) + (c // p - 1) + (3 + (p - 1) if p > 1 else 0)
    p_round = 0 if np.dtype(dtype).itemsize == 2 else 1
    d_u = (chunk - 1) + (c - 1) + p_round
    d_s = (chunk - 1) + (c // p - 1) + (p - 1) + p_round
    return a_u + a_s, d_u, d_s, p_round


def _round_slack(dtype, a, b):
    """The two final roundings to a 16-bit dtype: (eps / 2) (|a| + |b|); 0 otherwise."""
    if np.dtype(dtype).itemsize != 2:
        return 0.0
    return float(jnp.finfo(dtype).eps) / 2 * (np.abs(a) + np.abs(b))


F_LOSS, F_GRAD = 16, 12


def check(dtype, name, mesh, vocab_axis, batch_axis=None, kind="linear"):
    """Run one case and assert the model's bounds; returns the worst ratio |diff| / bound."""
    p = mesh.shape[vocab_axis]
    opts = {k: v for k, v in OPTIONS[name].items() if k != "masks"}
    masks = OPTIONS[name].get("masks", False)
    hidden, weight, bias, labels, where, entry = _case(dtype)
    ctype = np.float64 if dtype == F64 else np.float32
    u = float(np.finfo(ctype).eps) / 2
    z_raw = hidden.astype(np.float64) @ weight.astype(np.float64)
    if kind == "linear":
        got, want = _run_linear(dtype, name, mesh, vocab_axis, batch_axis)
        chunk = CHUNK
        if masks:
            z_raw = z_raw + bias.astype(np.float64)
        kept_rows = where & (labels != -100) if masks else np.ones(N, bool)
        mask = np.ones((N, V), bool)
        t = labels if masks else np.where(labels < 0, 3, labels)
    else:
        got, want = _run_materialized(dtype, name, mesh, vocab_axis, batch_axis)
        chunk = V // p
        t = np.where(labels < 0, 3, labels)
        mask = entry if masks else np.ones((N, V), bool)
        kept_rows = mask.any(-1)
    B, d_u, d_s, p_round = _bounds(dtype, name, p, V, chunk, N)
    total, g_over_n, abs_lse, s, q = _scales(z_raw, t, mask, opts)
    w, alpha = opts.get("z_loss", 0.0), opts.get("label_smoothing", 0.0)
    worst = 0.0

    def held(what, a, b, bound):
        nonlocal worst
        diff = np.abs(a - b)
        ok = diff <= bound
        assert ok.all(), (
            f"{what} ({np.dtype(dtype).name}, {name}, {kind}, P={p}): |diff| {diff[~ok]} above "
            f"the bound {bound[~ok]}"
        )
        ratio = np.where(bound > 0, diff / np.where(bound > 0, bound, 1), 0.0)
        worst = max(worst, float(np.max(ratio, initial=0.0)))

    loss_bound = u * (B * (1 + alpha * g_over_n + 2 * w * abs_lse) + 2 * F_LOSS * total)
    loss_bound = np.where(kept_rows, loss_bound + _round_slack(dtype, got[0], want[0]), 0.0)
    held("loss", got[0], want[0], loss_bound)
    zterm = 2 * w * q * (B + 6 * np.maximum(1.0, abs_lse))[:, None] * u
    dg = u * (2 * B + 2 * F_GRAD) * s + zterm
    dg = np.where(kept_rows[:, None], dg, 0.0)
    if kind == "linear":
        g = s * kept_rows[:, None]  # |g_nj| <= s_nj
        dg16 = dg + (float(jnp.finfo(dtype).eps) * s if p_round == 0 else 0.0)
        w64, h64 = np.abs(weight.astype(np.float64)), np.abs(hidden.astype(np.float64))
        size_h = g @ w64.T
        dh_bound = dg16 @ w64.T + (d_u + d_s) * u * size_h
        held("d hidden", got[1], want[1], dh_bound + _round_slack(dtype, got[1], want[1]))
        dw_bound = h64.T @ dg16 + 2 * (N - 1 + p_round) * u * (h64.T @ g)
        held("d weight", got[2], want[2], dw_bound + _round_slack(dtype, got[2], want[2]))
    else:
        held("d logits", got[1], want[1], dg + _round_slack(dtype, got[1], want[1]))
    return worst


# The fast tier: each kind's every option at once ("all") and both dtype paths, the 16-bit
# one and the native one, in three cases; float32 "all" of the linear kind (the native path)
# is test_batch_and_vocab_together's. The other pairs are the slow tier's (-m slow), these
# their fast siblings; linear float64 "plain" among them (its native path: the float32 "all"
# of test_batch_and_vocab_together[linear]; two vocabulary devices: linear-bfloat16-all).
FAST = {
    "linear": {(BF16, "all")},
    "materialized": {(F32, "all"), (F16, "z_loss")},
}


def _params():
    return [
        pytest.param(
            dtype,
            name,
            kind,
            marks=() if (dtype, name) in FAST[kind] else pytest.mark.slow,
            id=f"{kind}-{np.dtype(dtype).name}-{name}",
        )
        for kind in ("linear", "materialized")
        for dtype in DTYPES
        for name in OPTIONS
    ]


@pytest.mark.parametrize(("dtype", "name", "kind"), _params())
def test_two_devices(dtype, name, kind):
    """The vocabulary over the conftest's 2 host devices."""
    assert len(jax.devices()) >= 2
    check(dtype, name, _mesh((2,), ("vocab",)), "vocab", kind=kind)


@pytest.mark.parametrize("kind", ["linear", "materialized"])
def test_batch_and_vocab_together(kind):
    """Data parallel (2 x 1) with the vocabulary axis trivial, and the reductions."""
    mesh = _mesh((2, 1), ("data", "vocab"))
    check(F32, "all", mesh, "vocab", batch_axis="data", kind=kind)
    hidden, weight, _, labels, where, _ = _case(F32)

    @jax.jit  # one program for both reductions (eager, each call was ~100 small ones)
    def reduced(hidden, weight):
        out = {}
        for reduction in ("sum", "mean"):
            got = numerics.sharded_linear_cross_entropy(
                mesh, hidden, weight, labels, vocab_axis="vocab", batch_axis="data",
                where=where, ignore_index=-100, reduction=reduction, chunk_size=CHUNK,
            )  # fmt: skip
            want = numerics.linear_cross_entropy(
                hidden, weight, labels, where=where, ignore_index=-100, reduction=reduction,
                chunk_size=CHUNK,
            )  # fmt: skip
            out[reduction] = got, want
        return out

    for got, want in jax.device_get(reduced(hidden, weight)).values():
        # Two row sums of 6 kept losses in another grouping, each within 5 u (N - 1) of the
        # sum of |losses|, plus the mean's division (u): float32.
        u = float(np.finfo(np.float32).eps) / 2
        assert abs(float(got) - float(want)) <= (2 * (N - 1) + 1) * u * abs(float(want))


def test_batch_axis_alone():
    """`linear_cross_entropy(..., batch_axis=)` in a data-parallel shard_map without a
    vocabulary axis: the weight's gradient is summed over the batch devices (in float32,
    rounded once), so it is the unsharded one up to the grouping of its row sum."""
    mesh = _mesh((2,), ("data",))
    hidden, weight, _, labels, _, _ = _case(F32)
    labels = np.where(labels < 0, 3, labels).astype(np.int32)

    def sharded(h, w):
        body = functools.partial(
            numerics.linear_cross_entropy, batch_axis="data", reduction="sum", chunk_size=CHUNK
        )
        spec = jax.sharding.PartitionSpec
        return jax.shard_map(
            body, mesh=mesh, in_specs=(spec("data"), spec(), spec("data")), out_specs=spec()
        )(h, w, labels)

    def unsharded(h, w):
        return numerics.linear_cross_entropy(h, w, labels, reduction="sum", chunk_size=CHUNK)

    args = (jnp.asarray(hidden), jnp.asarray(weight))
    got = jax.jit(jax.value_and_grad(sharded, (0, 1)))(*args)
    want = jax.jit(jax.value_and_grad(unsharded, (0, 1)))(*args)
    u = float(np.finfo(np.float32).eps) / 2
    # The same per-row losses and g (the same chunks, one device's rows): the loss sum and
    # d weight = sum_n h_nd g_nj regroup N terms, 2 (N - 1) u of the sum of |terms| each
    # (+ 1 u for each product in d weight); d hidden is the same computation, bit for bit.
    h64 = np.abs(hidden.astype(np.float64))
    g_scale = 1.0  # |g_nj| <= 1 for the plain loss
    assert abs(float(got[0]) - float(want[0])) <= 2 * (N - 1) * u * abs(float(want[0]))
    np.testing.assert_array_equal(got[1][0], want[1][0])
    bound = 2 * N * u * (h64.T @ np.full((N, V), g_scale))
    assert (np.abs(np.asarray(got[1][1]) - np.asarray(want[1][1])) <= bound).all()


def test_example_mask():
    """`where` of the labels' rank (whole examples left out) on sharded logits: the
    unsharded call's losses and gradient, padding rows exactly 0 in both. On a mesh with
    Explicit axes (`jax.make_mesh`'s default, the docstrings' example): the inputs are
    resharded to the specs first (`_shard_map`); the other tests' meshes are Auto."""
    mesh = jax.make_mesh((2,), ("vocab",), axis_types=(jax.sharding.AxisType.Explicit,))
    hidden, weight, _, labels, where, _ = _case(F32)
    labels = np.where(labels < 0, 3, labels).astype(np.int32)
    logits = jnp.asarray(hidden @ weight)

    def both(z):
        a = numerics.sharded_cross_entropy(mesh, z, labels, where, vocab_axis="vocab")
        return a, numerics.cross_entropy(z, labels, where=where)

    @jax.jit  # one program (eager, ~240 small ones)
    def run(z):
        (got, want), vjp = jax.vjp(both, z)
        g_got = vjp((jnp.ones_like(got), jnp.zeros_like(want)))[0]
        g_want = vjp((jnp.zeros_like(got), jnp.ones_like(want)))[0]
        return got, want, g_got, g_want

    got, want, g_got, g_want = jax.device_get(run(logits))
    assert float(got[3]) == 0.0 and not np.asarray(g_got[3]).any()
    u = float(np.finfo(np.float32).eps) / 2
    # The "plain" bound of the model above (float32, materialized, P = 2), loosely: B =
    # a_u + a_s < 2 V + 8, and each |loss| term and |g| entry below 1 + max loss.
    b = 2 * V + 8
    scale = 1 + float(np.max(np.abs(want)))
    assert np.max(np.abs(got - want)) <= u * (b + 2 * F_LOSS * scale)
    assert np.max(np.abs(g_got - g_want)) <= u * (2 * b + 2 * F_GRAD) * scale


_CHILD = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "raise")
    from tests.numerics import test_vocab_parallel as t
    assert len(jax.devices()) == 8, jax.devices()
    meshes = [
        (t._mesh((4,), ("vocab",)), None),
        (t._mesh((8,), ("vocab",)), None),
        (t._mesh((2, 4), ("data", "vocab")), "data"),
    ]
    for mesh, batch in meshes:
        for dtype in t.DTYPES:
            for kind in ("linear", "materialized"):
                worst = t.check(dtype, "all", mesh, "vocab", batch, kind=kind)
                print(dict(mesh.shape), jax.numpy.dtype(dtype).name, kind, f"{worst:.3f}")
    print("ok")
    """
)


@pytest.mark.slow
@pytest.mark.first
def test_four_and_eight_devices():
    """4, 8 and 2 x 4 (data x vocabulary) host devices in one child process, every dtype
    with every option together (each option alone runs on 2 devices above): 24 compiled
    cases, about 35 s on this project's 2-core CPU cold, 5 s from the compilation cache.
    Slow tier: the fast tier runs the same code on 2 devices (`test_two_devices`, every
    option, and `test_batch_and_vocab_together`, both axes at once)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, cwd=root, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok"), out.stdout


# Bad input --------------------------------------------------------------------------------


def test_bad_input():
    mesh = _mesh((2,), ("vocab",))
    h = jnp.ones((4, 3), jnp.float32)
    w = jnp.ones((3, 6), jnp.float32)
    t = jnp.zeros(4, jnp.int32)
    call = numerics.sharded_linear_cross_entropy
    with pytest.raises(ValueError, match="does not divide over the 2 devices of mesh axis"):
        call(mesh, h, jnp.ones((3, 5), jnp.float32), t, vocab_axis="vocab")
    with pytest.raises(ValueError, match="'model' is not an axis of the mesh"):
        call(mesh, h, w, t, vocab_axis="model")
    with pytest.raises(ValueError, match="batch_axis='data' is not an axis of the mesh"):
        call(mesh, h, w, t, vocab_axis="vocab", batch_axis="data")
    with pytest.raises(ValueError, match="labels of shape"):
        call(mesh, h, w, jnp.zeros(3, jnp.int32), vocab_axis="vocab")
    with pytest.raises(ValueError, match=r"disagree on D|weight"):
        call(mesh, h, jnp.ones((2, 6), jnp.float32), t, vocab_axis="vocab")
    with pytest.raises(ValueError, match=r"bias must have shape \(V,\) = \(6,\)"):
        call(mesh, h, w, t, vocab_axis="vocab", bias=jnp.ones(4, jnp.float32))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 6\)"):
        call(mesh, h, w, jnp.full(4, 6, jnp.int32), vocab_axis="vocab")
    with pytest.raises(ValueError, match=r"batch .* does not divide"):
        call(_mesh((2, 1), ("data", "vocab")), jnp.ones((3, 3)), w, t[:3],
             vocab_axis="vocab", batch_axis="data")  # fmt: skip
    z = jnp.ones((4, 6), jnp.float32)
    with pytest.raises(ValueError, match=r"number of classes K .* does not divide"):
        numerics.sharded_cross_entropy(mesh, jnp.ones((4, 5)), t, vocab_axis="vocab")
    with pytest.raises(ValueError, match="'model' is not an axis of the mesh"):
        numerics.sharded_cross_entropy(mesh, z, t, vocab_axis="model")
    # Outside shard_map, vocab_axis names no bound axis.
    with pytest.raises(ValueError, match="vocab_axis='vocab' is not a mesh axis bound here"):
        numerics.cross_entropy(z, t, vocab_axis="vocab")
    with pytest.raises(ValueError, match="vocab_axis='vocab' is not a mesh axis bound here"):
        numerics.linear_cross_entropy(h, w, t, vocab_axis="vocab")
    with pytest.raises(ValueError, match="class axis must be the last"):
        jax.shard_map(
            lambda z, t: numerics.cross_entropy(z, t, axis=0, vocab_axis="vocab"),
            mesh=mesh, in_specs=(jax.P(None, "vocab"), jax.P()), out_specs=jax.P(),
        )(z, t)  # fmt: skip
