"""Adam/AdamW against optax, LaProp against its rule by hand, dtype preservation, eps = 0."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from grokbench import optimizers as opt

DTYPES = [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64]


def _tree(rng: np.random.Generator, dtype, scale: float = 1.0) -> dict:
    return {
        "w": jnp.asarray(scale * rng.standard_normal((4, 3)), dtype),
        "b": jnp.asarray(scale * rng.standard_normal((3,)), dtype),
    }


def _run(tx: optax.GradientTransformation, params: dict, grads: list[dict]):
    """Apply `tx` for len(grads) steps; return the list of updates and the final state."""
    state = tx.init(params)
    updates_seen = []
    for g in grads:
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
        updates_seen.append(updates)
    return updates_seen, params, state


def _x64_context(dtype):
    return jax.enable_x64(True) if dtype == jnp.float64 else jax.enable_x64(False)


def _name_dtype() -> list:
    """Every (optimizer, dtype) pair; the fast tier keeps each dtype and each optimizer once
    (adam at bf16 and fp64, adamw at fp32): the other three pairs are their slow siblings."""
    fast = {("adam", jnp.bfloat16), ("adamw", jnp.float32), ("adam", jnp.float64)}
    return [
        pytest.param(
            name,
            dtype,
            marks=() if (name, dtype) in fast else pytest.mark.slow,
            id=f"{name}-{jnp.dtype(dtype).name}",
        )
        for name in ("adam", "adamw")
        for dtype in (jnp.bfloat16, jnp.float32, jnp.float64)
    ]


@pytest.mark.parametrize(("name", "dtype"), _name_dtype())
def test_matches_optax(name, dtype):
    kwargs = {"learning_rate": 1e-3, "b1": 0.9, "b2": 0.98, "eps": 1e-8}
    if name == "adamw":
        kwargs["weight_decay"] = 1.0
    rng = np.random.default_rng(0)
    with _x64_context(dtype):
        params = _tree(rng, dtype)
        grads = [_tree(rng, dtype) for _ in range(5)]
        # Both under jit, as in training: XLA rewrites x / scalar as x * (1 / scalar) there,
        # so an eager run differs from a jitted one by an ulp (for optax too).
        ours, ours_params, _ = jax.jit(lambda p, g: _run(getattr(opt, name)(**kwargs), p, g))(
            params, grads
        )
        # optax's bias correction needs standard promotion (float ** int32).
        with jax.numpy_dtype_promotion("standard"):
            ref, ref_params, _ = jax.jit(lambda p, g: _run(getattr(optax, name)(**kwargs), p, g))(
                params, grads
            )
    for u, r in zip(ours, ref, strict=True):
        for k in u:
            assert u[k].dtype == r[k].dtype == dtype
            np.testing.assert_array_equal(
                np.asarray(u[k], np.float64), np.asarray(r[k], np.float64)
            )
    for k in params:
        np.testing.assert_array_equal(
            np.asarray(ours_params[k], np.float64), np.asarray(ref_params[k], np.float64)
        )


def _laprop_reference(params, grads, lr, b1, b2, eps, wd):
    """LaProp (Ziyin et al. 2020, Algorithm 1) with decoupled weight decay, in float64 NumPy."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    steps = []
    for t, g in enumerate(grads, start=1):
        step = {}
        for k in p:
            gk = np.asarray(g[k], np.float64)
            v[k] = b2 * v[k] + (1 - b2) * gk**2
            v_hat = v[k] / (1 - b2**t)
            m[k] = b1 * m[k] + (1 - b1) * gk / (np.sqrt(v_hat) + eps)
            m_hat = m[k] / (1 - b1**t)
            step[k] = -lr * (m_hat + wd * p[k])
            p[k] = p[k] + step[k]
        steps.append(step)
    return steps


def _dtype_track() -> list:
    """Every (dtype, track_sqrt_v) pair; the fast tier keeps each dtype and each option once
    (float64 plain, float32 tracking sqrt(v), as the engine's LaProp runs): the other two
    pairs, [float32-2e-05-False] and [float64-1e-13-True], are their slow siblings."""
    fast = {(jnp.float64, False), (jnp.float32, True)}
    return [
        pytest.param(
            dtype,
            rtol,
            track,
            marks=() if (dtype, track) in fast else pytest.mark.slow,
            id=f"{jnp.dtype(dtype).name}-{rtol}-{track}",
        )
        for track in (False, True)
        for dtype, rtol in ((jnp.float64, 1e-13), (jnp.float32, 2e-5))
    ]


@pytest.mark.parametrize(("dtype", "rtol", "track_sqrt_v"), _dtype_track())
def test_laprop_matches_hand_computed_rule(dtype, rtol, track_sqrt_v):
    rng = np.random.default_rng(1)
    hyper = {"lr": 1e-2, "b1": 0.9, "b2": 0.98, "eps": 1e-3, "wd": 0.5}
    with _x64_context(dtype):
        params = _tree(rng, dtype)
        grads = [_tree(rng, dtype) for _ in range(4)]
        tx = opt._laprop(
            hyper["lr"],
            b1=hyper["b1"],
            b2=hyper["b2"],
            eps=hyper["eps"],
            weight_decay=hyper["wd"],
            track_sqrt_v=track_sqrt_v,
        )
        ours, _, state = _run(tx, params, grads)
    ref = _laprop_reference(params, grads, **hyper)
    for u, r in zip(ours, ref, strict=True):
        for k in u:
            assert u[k].dtype == dtype
            np.testing.assert_allclose(np.asarray(u[k], np.float64), r[k], rtol=rtol, atol=0)
    assert state[0].count.dtype == jnp.int32 and int(state[0].count) == 4


def test_track_sqrt_v_equals_plain_without_underflow():
    rng = np.random.default_rng(2)
    params = _tree(rng, jnp.float32)
    grads = [_tree(rng, jnp.float32, scale=10.0 ** (-3 * i)) for i in range(6)]  # 1 .. 1e-15
    plain, _, s_plain = _run(opt._laprop(1e-3, eps=1e-20), params, grads)
    tracked, _, s_tracked = _run(opt._laprop(1e-3, eps=1e-20, track_sqrt_v=True), params, grads)
    for u, r in zip(tracked, plain, strict=True):
        for k in u:
            np.testing.assert_allclose(u[k], r[k], rtol=1e-5)
    # The tracked state holds sqrt(v).
    for k in params:
        np.testing.assert_allclose(s_tracked[0].nu[k] ** 2, s_plain[0].nu[k], rtol=1e-5)


def test_track_sqrt_v_survives_fp32_gradient_underflow():
    """Fix paper Sec. 5: g^2 underflows in fp32 below 2^-63; tracking sqrt(v) keeps it."""
    g_value = np.float32(1e-30)
    assert np.float32(g_value) ** 2 == 0  # the underflow this mode exists for
    params = {"w": jnp.ones((3,), jnp.float32)}
    grads = [{"w": jnp.asarray([1e-30, -3e-30, 0.0], jnp.float32)}] * 3
    tracked, _, _ = _run(opt._laprop(1.0, eps=0.0, track_sqrt_v=True), params, grads)
    plain, _, _ = _run(opt._laprop(1.0, eps=0.0), params, grads)
    # Constant g: every bias-corrected step is -sign(g) exactly in the limit; 0 stays 0.
    for u in tracked:
        np.testing.assert_allclose(u["w"], [-1.0, 1.0, 0.0], rtol=1e-6)
    # Plain LaProp squares g to 0: g / sqrt(0) is clipped to its bound sqrt((1 - b2^t) / (1 - b2)),
    # which is the exact ratio at step 1 (and finite, not +-inf, after it).
    np.testing.assert_allclose(plain[0]["w"], [-1.0, 1.0, 0.0], rtol=1e-6)
    for u in plain:
        assert np.all(np.isfinite(np.asarray(u["w"])))


def test_laprop_eps_zero_survives_flush_to_zero():
    """fig4's eps = 0 path: sqrt(1 - b2) |g| below the smallest normal fp32 (1.2e-38) is flushed
    to zero by XLA's CPU backend, so the tracked sqrt(v) is 0 while g is not: g / 0 gave inf.
    The ratio is clipped to its exact bound instead (1 at step 1: the step is -lr sign(g))."""
    g = jnp.asarray([2e-38, -5e-38, 1e-37, 0.0], jnp.float32)  # normal fp32 gradients
    assert float(np.sqrt(np.float32(0.02)) * np.float32(2e-38)) < np.finfo(np.float32).tiny
    params = {"w": jnp.ones((4,), jnp.float32)}
    tx = opt._laprop(1.0, b2=0.98, eps=0.0, track_sqrt_v=True)
    updates, _, _ = jax.jit(lambda p, gs: _run(tx, p, gs))(params, [{"w": g}] * 3)
    for t, u in enumerate(updates, 1):
        w = np.asarray(u["w"])
        assert np.all(np.isfinite(w)), (t, w)
        bound = np.sqrt((1 - 0.98**t) / (1 - 0.98))
        assert np.all(np.abs(w) <= bound * (1 + 1e-6)), (t, w)
        assert w[3] == 0
    np.testing.assert_allclose(updates[0]["w"][2], -1.0, rtol=1e-6)  # 1e-37 stays exact
    np.testing.assert_allclose(updates[0]["w"][:2], [-1.0, 1.0], rtol=1e-6)  # flushed: capped


def test_laprop_ratio_bound_is_the_exact_worst_case():
    """A first gradient after zeros reaches sqrt((1 - b2^t) / (1 - b2)) and the clip keeps it."""
    b2 = 0.98
    grads = [{"w": jnp.zeros((1,), jnp.float32)}] * 4 + [{"w": jnp.ones((1,), jnp.float32)}]
    updates, _, _ = _run(
        opt._scale_by_laprop(b1=0.0, b2=b2, eps=0.0), {"w": jnp.zeros((1,))}, grads
    )
    np.testing.assert_allclose(updates[-1]["w"], np.sqrt((1 - b2**5) / (1 - b2)), rtol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: opt.adam(1e-3, eps=0.0),
        lambda: opt.adamw(1e-3, eps=0.0, weight_decay=0.0),
        lambda: opt._laprop(1e-3, eps=0.0),
        lambda: opt._laprop(1e-3, eps=0.0, track_sqrt_v=True),
    ],
)
def test_eps_zero_zero_gradient_gives_zero_step(make):
    params = {"w": jnp.asarray([1.0, 2.0], jnp.float32)}
    grads = [
        {"w": jnp.asarray([0.0, 0.5], jnp.float32)},
        {"w": jnp.asarray([0.0, -0.5], jnp.float32)},
    ]
    updates, _, _ = _run(make(), params, grads)
    for u in updates:
        assert np.all(np.isfinite(u["w"]))
        assert u["w"][0] == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: opt.adam(1e-3),
        lambda: opt._laprop(1e-3),
        lambda: opt._laprop(1e-3, track_sqrt_v=True),
    ],
)
def test_nan_gradient_gives_nan_step(make):
    params = {"w": jnp.ones((2,), jnp.float32)}
    updates, _, _ = _run(make(), params, [{"w": jnp.asarray([np.nan, 1.0], jnp.float32)}])
    assert np.isnan(updates[0]["w"][0]) and np.isfinite(updates[0]["w"][1])


_DTYPE_CASES = [
    lambda: opt.adam(1e-3, b2=0.98),
    lambda: opt.adamw(1e-3, b2=0.98, weight_decay=1.0),
    lambda: opt._laprop(1e-3, weight_decay=1.0),
    lambda: opt._laprop(1e-3, weight_decay=1.0, track_sqrt_v=True),
    # Array hyperparameters (what a vmapped sweep passes) must not upcast either.
    lambda: opt.adamw(
        jnp.float32(1e-3), b2=jnp.float32(0.98), eps=jnp.float32(1e-8), weight_decay=jnp.float32(1)
    ),
    lambda: opt._laprop(jnp.float32(1e-3), eps=jnp.float32(0), weight_decay=jnp.float32(1)),
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_preserved(dtype):
    rng = np.random.default_rng(3)
    with _x64_context(dtype):
        params = _tree(rng, dtype)
        grads = [_tree(rng, dtype) for _ in range(3)]
        # Dtypes only: the trace's (`jax.eval_shape`), nothing compiled or run.
        results = jax.eval_shape(
            lambda p, g: [_run(make(), p, g) for make in _DTYPE_CASES], params, grads
        )
    for updates, new_params, state in results:
        for tree in [*updates, new_params]:
            assert all(x.dtype == dtype for x in jax.tree.leaves(tree))
        inner = state[0]
        assert inner.count.dtype == jnp.int32
        assert all(x.dtype == dtype for x in jax.tree.leaves((inner.mu, inner.nu)))


def test_vmap_over_eps_and_weight_decay():
    params = {"w": jnp.asarray([1.0, -2.0], jnp.float32)}
    grads = {"w": jnp.asarray([0.1, 0.2], jnp.float32)}

    def one_step(eps, wd):
        tx = opt.adamw(1e-3, b2=0.98, eps=eps, weight_decay=wd)
        return tx.update(grads, tx.init(params), params)[0]["w"]

    eps = jnp.asarray([1e-8, 1e-12, 0.0], jnp.float32)
    wd = jnp.asarray([1.0, 0.0, 0.5], jnp.float32)
    batched = jax.vmap(one_step)(eps, wd)
    for i in range(3):
        np.testing.assert_array_equal(batched[i], one_step(float(eps[i]), float(wd[i])))


def test_chainable_with_optax():
    params = {"w": jnp.asarray([3.0, 4.0], jnp.float32)}
    tx = optax.chain(optax.scale(0.5), opt._scale_by_laprop(track_sqrt_v=True))
    updates, state = tx.update({"w": jnp.asarray([1.0, -1.0], jnp.float32)}, tx.init(params))
    np.testing.assert_allclose(updates["w"], [1.0, -1.0], rtol=1e-6)
    assert isinstance(state[1], opt._ScaleByLaPropState)


def test_rejects_schedules():
    with pytest.raises(TypeError, match="scalar"):
        opt.adam(optax.constant_schedule(1e-3))


@pytest.mark.parametrize("order", [1, 2])
def test_update_moment_matches_optax(order):
    rng = np.random.default_rng(3)
    grads, moments = _tree(rng, jnp.float32), _tree(rng, jnp.float32)
    ours = opt._update_moment(grads, moments, 0.98, order)
    ref = optax.tree.update_moment(grads, moments, 0.98, order)
    for k in ours:
        np.testing.assert_array_equal(ours[k], ref[k])


@pytest.mark.parametrize("name", ["adamw", "laprop"])
def test_apply_is_the_chain(name):
    """`apply` (direction, decay, lr, unrolled) gives the parameters of the optax chain."""
    h = {"b1": 0.9, "b2": 0.98, "eps": 1e-8}
    rng = np.random.default_rng(4)
    params, grads = _tree(rng, jnp.float32), [_tree(rng, jnp.float32) for _ in range(3)]
    chain = {"adamw": opt.adamw, "laprop": opt._laprop}[name]
    _, ref, _ = _run(chain(1e-3, weight_decay=0.5, **h), params, grads)
    tx = opt.scale_by_direction(name, **h)
    state = tx.init(params)
    for g in grads:
        params, _, state = opt.apply(tx, g, state, params, learning_rate=1e-3, weight_decay=0.5)
    for k in ref:
        np.testing.assert_array_equal(params[k], ref[k])


def test_scale_by_direction_rejects_unknown_optimizer():
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        opt.scale_by_direction("sgd", 0.9, 0.98, 1e-8)
