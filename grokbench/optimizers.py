"""Adam, AdamW and LaProp as optax `GradientTransformation`s that keep the parameter dtype.

Why not `optax.adam` itself: its bias correction computes `b ** count` from a Python float
and an int32 counter, which strict dtype promotion (the lab's test setting) rejects, and
with eps = 0 its `m / (sqrt(v) + eps)` turns a zero gradient into 0/0 = NaN. The
transforms here are written with explicit dtypes and are otherwise the same arithmetic,
in the same order, as optax's (`tests/grokbench` checks them against optax).

Conventions shared by every transform here:

- Hyperparameters are Python floats or scalar arrays (so a sweep can `vmap` over eps or
  weight decay). Each is rounded to the parameter dtype where it is used, as optax's
  weakly-typed Python scalars are; `1 - b` is formed before that rounding. With fp16
  parameters eps = 1e-8 rounds to 0 (fp16's smallest subnormal is 6e-8).
- State: `count` is int32 (saturating, as optax's); moments have the parameter dtype.
  Bias corrections `1 - b**t` are computed in JAX's default float (float32, or float64
  under x64) and then cast, so `b**t` never rounds to 1 in bf16.
- eps = 0 is allowed and means the limit eps -> 0+: a zero numerator gives a zero step
  (0 / (0 + eps) = 0 for every eps > 0) instead of 0/0 = NaN. A non-zero numerator over
  a zero denominator still gives +-inf, as the formula says (Adam; LaProp clips its ratio
  to the exact bound, `_scale_by_laprop`). NaN in gives NaN out.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

__all__ = ["adam", "adamw", "orthograd"]


def _as(h: ArrayLike, like: jax.Array) -> jax.Array:
    """A scalar hyperparameter rounded once to the dtype of `like`."""
    return jnp.asarray(h, dtype=like.dtype)


def _bias_correction_dtype() -> jnp.dtype:
    """JAX's default float: float64 under x64, else float32 (optax's implicit choice)."""
    return jnp.asarray(0.0).dtype


def _one_minus_pow(b: ArrayLike, count: jax.Array) -> jax.Array:
    """1 - b**count in the default float dtype (integer-exponent pow, as optax)."""
    return 1 - jax.lax.pow(jnp.asarray(b, _bias_correction_dtype()), count)


def _safe_div(num: jax.Array, den: jax.Array) -> jax.Array:
    """num / den, except a zero numerator gives itself (the eps -> 0+ limit; keeps -0)."""
    return jnp.where(num == 0, num, num / den)


def _increment(count: jax.Array) -> jax.Array:
    """count + 1, saturating at the int32 maximum as `optax.safe_increment` does."""
    return jnp.where(count < jnp.iinfo(jnp.int32).max, count + 1, count)


def _update_moment(
    updates: optax.Updates, moments: optax.Updates, decay: ArrayLike, order: int
) -> optax.Updates:
    """The EMA (1 - decay) * g^order + decay * t of each leaf, in its dtype (order 1 or 2).

    The expression order of `optax.tree.update_moment`; g^2 is `jnp.square(g)`.
    """
    power = {1: lambda g: g, 2: jnp.square}[order]
    return jax.tree.map(
        lambda g, t: _as(1 - decay, g) * power(g) + _as(decay, g) * t, updates, moments
    )


def _bias_correction(moments: optax.Updates, decay: ArrayLike, count: jax.Array) -> optax.Updates:
    """Each leaf over 1 - decay**count (formed in the default float, then cast to its dtype)."""
    correction = _one_minus_pow(decay, count)
    return jax.tree.map(lambda t: t / correction.astype(t.dtype), moments)


def _init_moments(state: type) -> optax.TransformInitFn:
    """init(params) -> state(count 0 as int32, zero `mu`, zero `nu` in the parameter dtypes)."""

    def init_fn(params: optax.Params) -> NamedTuple:
        zeros = jax.tree.map(jnp.zeros_like, params)
        return state(jnp.zeros([], jnp.int32), zeros, zeros)

    return init_fn


class _ScaleByAdamState(NamedTuple):
    """Adam state: step count (int32), first moment `mu`, second moment `nu`."""

    count: jax.Array
    mu: optax.Updates
    nu: optax.Updates


def scale_by_adam(
    b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-8
) -> optax.GradientTransformation:
    """Adam's direction m_hat / (sqrt(v_hat) + eps), dtype-preserving, eps = 0 allowed."""

    def update_fn(
        updates: optax.Updates, state: _ScaleByAdamState, params: optax.Params | None = None
    ) -> tuple[optax.Updates, _ScaleByAdamState]:
        del params
        count = _increment(state.count)
        mu = _update_moment(updates, state.mu, b1, 1)
        nu = _update_moment(updates, state.nu, b2, 2)
        mu_hat, nu_hat = _bias_correction(mu, b1, count), _bias_correction(nu, b2, count)
        out = jax.tree.map(lambda m, v: _safe_div(m, jnp.sqrt(v) + _as(eps, v)), mu_hat, nu_hat)
        return out, _ScaleByAdamState(count, mu, nu)

    return optax.GradientTransformation(_init_moments(_ScaleByAdamState), update_fn)


class _ScaleByLaPropState(NamedTuple):
    """LaProp state: count (int32), momentum `mu` of the normalized gradient, and `nu`.

    `nu` holds v (the EMA of g^2), or r = sqrt(v) when the transform tracks sqrt(v).
    """

    count: jax.Array
    mu: optax.Updates
    nu: optax.Updates


def _update_sqrt_v(g: jax.Array, r: jax.Array, b2: ArrayLike) -> jax.Array:
    """r' = sqrt(b2 r^2 + (1 - b2) g^2) without squaring g or r (a hypot).

    x = sqrt(b2) r, y = sqrt(1 - b2) |g|; with s = max(x, y) and t = min(x, y),
    r' = s sqrt(1 + (t/s)^2). t/s <= 1, so nothing squared can underflow unless it is
    negligible next to 1; fp32 gradients far below 2^-63 (where g^2 underflows) still count.
    """
    dt = _bias_correction_dtype()
    sqrt_b2 = jnp.sqrt(jnp.asarray(b2, dt))
    sqrt_1mb2 = jnp.sqrt(1 - jnp.asarray(b2, dt))
    x = sqrt_b2.astype(r.dtype) * r
    y = sqrt_1mb2.astype(g.dtype) * jnp.abs(g)
    s, t = jnp.maximum(x, y), jnp.minimum(x, y)
    s_safe = jnp.where(s == 0, jnp.ones_like(s), s)  # s = 0 means x = y = 0: r' = 0
    return jnp.where(s == 0, s, s * jnp.sqrt(1 + jnp.square(t / s_safe)))


def _ratio_bound(b2: ArrayLike, count: jax.Array) -> jax.Array:
    """sqrt((1 - b2^t) / (1 - b2)): the exact bound on |g_t| / sqrt(v_hat_t), below 1/sqrt(1 - b2).

    v_t = (1 - b2) sum_s b2^(t-s) g_s^2 >= (1 - b2) g_t^2 and v_hat_t = v_t / (1 - b2^t), so
    |g_t| / sqrt(v_hat_t) <= sqrt((1 - b2^t) / (1 - b2)) (equality when g_t is the only
    non-zero gradient so far); eps > 0 only lowers the ratio. Arithmetic breaks the bound
    only where v (or sqrt(v)) lost the current gradient: g^2 underflowing, or, tracking
    sqrt(v), sqrt(1 - b2) |g| falling below the smallest normal float, which XLA's CPU
    backend flushes to zero. At eps = 0 that divides a non-zero g by 0.
    """
    dt = _bias_correction_dtype()
    return jnp.sqrt(_one_minus_pow(b2, count) / (1 - jnp.asarray(b2, dt)))


def _scale_by_laprop(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.98,
    eps: ArrayLike = 1e-8,
    track_sqrt_v: bool = False,
) -> optax.GradientTransformation:
    """LaProp's direction (Ziyin et al. 2020): bias-corrected momentum of g / (sqrt(v_hat) + eps).

    v_t = b2 v + (1 - b2) g^2; m_t = b1 m + (1 - b1) g / (sqrt(v_t / (1 - b2^t)) + eps);
    direction m_t / (1 - b1^t). With `track_sqrt_v`, sqrt(v) is tracked directly (see
    `_update_sqrt_v`) so gradients whose square underflows keep their weight.

    g / (sqrt(v_hat) + eps) is clipped to its exact bound (`_ratio_bound`): a no-op in exact
    arithmetic, it keeps the step finite where v lost the current gradient to underflow or
    flush-to-zero (at eps = 0 that was g / 0 = inf, fig4's eps = 0 path past its margin peak).
    """

    def update_fn(
        updates: optax.Updates, state: _ScaleByLaPropState, params: optax.Params | None = None
    ) -> tuple[optax.Updates, _ScaleByLaPropState]:
        del params
        count = _increment(state.count)
        if track_sqrt_v:
            nu = jax.tree.map(lambda g, r: _update_sqrt_v(g, r, b2), updates, state.nu)
            sqrt_bc2 = jnp.sqrt(_one_minus_pow(b2, count))
            rms = jax.tree.map(lambda r: r / sqrt_bc2.astype(r.dtype), nu)
        else:
            nu = _update_moment(updates, state.nu, b2, 2)
            rms = jax.tree.map(jnp.sqrt, _bias_correction(nu, b2, count))
        bound = _ratio_bound(b2, count)
        normalized = jax.tree.map(
            lambda g, s: jnp.clip(
                _safe_div(g, s + _as(eps, s)), -bound.astype(g.dtype), bound.astype(g.dtype)
            ),
            updates,
            rms,
        )
        mu = _update_moment(normalized, state.mu, b1, 1)
        return _bias_correction(mu, b1, count), _ScaleByLaPropState(count, mu, nu)

    return optax.GradientTransformation(_init_moments(_ScaleByLaPropState), update_fn)


def add_decayed_weights(weight_decay: ArrayLike) -> optax.GradientTransformation:
    """updates + weight_decay * params (decoupled weight decay), in the parameter dtype."""

    def update_fn(
        updates: optax.Updates, state: optax.EmptyState, params: optax.Params | None = None
    ) -> tuple[optax.Updates, optax.EmptyState]:
        if params is None:
            raise ValueError("add_decayed_weights needs params: call update(grads, state, params)")
        return jax.tree.map(lambda u, p: u + _as(weight_decay, p) * p, updates, params), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def _scale_by_learning_rate(learning_rate: ArrayLike) -> optax.GradientTransformation:
    """-learning_rate * updates, in the updates' dtype (a scalar rate, not a schedule)."""
    if callable(learning_rate):
        raise TypeError("learning_rate must be a scalar; schedules are not supported here")

    def update_fn(
        updates: optax.Updates, state: optax.EmptyState, params: optax.Params | None = None
    ) -> tuple[optax.Updates, optax.EmptyState]:
        del params
        return jax.tree.map(lambda u: _as(-learning_rate, u) * u, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def adam(
    learning_rate: ArrayLike,
    b1: ArrayLike = 0.9,  # optax/Kingma & Ba default
    b2: ArrayLike = 0.999,  # optax/Kingma & Ba default (the grokking recipes set 0.98)
    eps: ArrayLike = 1e-8,  # optax default; equilibrium margin log(1/eps) = 18.4
) -> optax.GradientTransformation:
    """Adam: -lr * m_hat / (sqrt(v_hat) + eps); equals `optax.adam` with the same arguments."""
    return optax.chain(scale_by_adam(b1, b2, eps), _scale_by_learning_rate(learning_rate))


def adamw(
    learning_rate: ArrayLike,
    b1: ArrayLike = 0.9,  # optax default
    b2: ArrayLike = 0.999,  # optax default (the grokking recipes set 0.98)
    eps: ArrayLike = 1e-8,  # optax default; equilibrium margin log(1/eps) = 18.4
    weight_decay: ArrayLike = 1e-4,  # optax default (the grokking recipes set 1.0)
) -> optax.GradientTransformation:
    """AdamW: -lr * (m_hat / (sqrt(v_hat) + eps) + wd * params); equals `optax.adamw`."""
    return optax.chain(
        scale_by_adam(b1, b2, eps),
        add_decayed_weights(weight_decay),
        _scale_by_learning_rate(learning_rate),
    )


def _laprop(
    learning_rate: ArrayLike,
    b1: ArrayLike = 0.9,  # the fix paper's fig4 setting (and LaProp's default)
    b2: ArrayLike = 0.98,  # the fix paper's fig4 setting
    eps: ArrayLike = 1e-8,  # Adam's default; equilibrium margin log(1/eps) = 18.4
    weight_decay: ArrayLike = 0.0,  # off unless asked: fig4 runs both 1 and 0
    track_sqrt_v: bool = False,  # plain LaProp; fig4 tracks sqrt(v) so eps -> 0 can be studied
) -> optax.GradientTransformation:
    """LaProp with decoupled weight decay: -lr * (m_hat + wd * params)."""
    return optax.chain(
        _scale_by_laprop(b1, b2, eps, track_sqrt_v),
        add_decayed_weights(weight_decay),
        _scale_by_learning_rate(learning_rate),
    )


class Hyper(NamedTuple):
    """One run's optimizer numbers: scalars, or arrays of shape (R,) for a batch of R runs."""

    lr: jax.Array
    b1: jax.Array
    b2: jax.Array
    eps: jax.Array
    weight_decay: jax.Array


def scale_by_direction(
    optimizer: str, b1: ArrayLike, b2: ArrayLike, eps: ArrayLike, track_sqrt_v: bool = False
) -> optax.GradientTransformation:
    """The direction transform of `optimizer` ('adam', 'adamw' or 'laprop'), before decay and lr."""
    if optimizer == "laprop":
        return _scale_by_laprop(b1, b2, eps, track_sqrt_v=track_sqrt_v)
    if optimizer in ("adam", "adamw"):
        return scale_by_adam(b1, b2, eps)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def orthograd() -> optax.GradientTransformation:
    """Prieto et al.'s ⊥Grad ("Grokking at the edge of numerical stability", ICLR 2025, Sec. 6;
    their `orthograd.py`): each parameter tensor's gradient g, flattened, loses its component
    along the tensor w and is rescaled to g's norm:

        g_orth = g - (w.g) / (w.w + 1e-30) w,    g_out = g_orth ||g|| / (||g_orth|| + 1e-30).

    It removes the naive-loss-minimisation direction (scaling the weights) before the
    optimizer sees the gradient: `optax.chain(orthograd(), adamw(...))` is their
    `OrthoGrad(params, AdamW, ...)`. Stateless; needs `params`. The dot products and norms
    are taken in float32 (float64 for float64 tensors), so the 1e-30 guards stay non-zero
    for bf16 and fp16 tensors; the result has the gradient's dtype.
    """

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("orthograd needs the parameters (pass params to update)")

        def project(g: jax.Array, w: jax.Array) -> jax.Array:
            dt = jnp.float64 if g.dtype == jnp.float64 else jnp.float32
            g32, w32 = g.reshape(-1).astype(dt), w.reshape(-1).astype(dt)
            g_orth = g32 - jnp.dot(w32, g32) / (jnp.dot(w32, w32) + 1e-30) * w32
            scale = jnp.linalg.norm(g32) / (jnp.linalg.norm(g_orth) + 1e-30)
            return (g_orth * scale).reshape(g.shape).astype(g.dtype)

        return jax.tree.map(project, updates, params), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def apply(
    direction_tx: optax.GradientTransformation,
    grads: optax.Updates,
    opt_state: optax.OptState,
    params: optax.Params,
    *,
    learning_rate: ArrayLike,
    weight_decay: ArrayLike,
) -> tuple[optax.Params, optax.Updates, optax.OptState]:
    """One step of direction -> + weight_decay * params -> * -learning_rate on `params`.

    The chain of `adamw` and `_laprop` (`adam` is weight_decay = 0), unrolled so the caller
    sees the direction itself. Returns (new params, direction, new direction state).
    """
    out, opt_state = direction_tx.update(grads, opt_state, params)
    decayed, _ = add_decayed_weights(weight_decay).update(out, optax.EmptyState(), params)
    updates, _ = _scale_by_learning_rate(learning_rate).update(decayed, optax.EmptyState())
    return optax.apply_updates(params, updates), out, opt_state
