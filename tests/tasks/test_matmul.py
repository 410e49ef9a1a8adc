"""Emulated matmul precision (tasks._matmul): the rounding to the bit, the wrapped matmuls
against float64 references of the rounded operands, forward and both backward products,
and the models at an emulated precision.

The rounding is held bit for bit against two references it shares no code with: a float64
one (scale to the target's quantum, `np.rint`, which rounds half to even, scale back) for
both formats, and ml_dtypes' bfloat16 cast for bf16. The inputs are every low-bit pattern
(the dropped bits: ties, just below and above) under kept mantissas that carry or not, at
the exponents where rounding is special (subnormals, 1, near overflow, inf/nan), and random
float32 bit patterns.
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from tasks import (
    MATMUL_PRECISIONS,
    MLPConfig,
    TransformerConfig,
    build_model,
    dot,
    einsum,
    mlp_apply,
    round_to,
    transformer_apply,
    transformer_apply_fast,
)

_KEPT = {"tf32": 10, "bf16": 7}  # explicit mantissa bits of each format
EMULATED = tuple(_KEPT)


def _reference(bits: np.ndarray, precision: str) -> np.ndarray:
    """RNE to `precision` in float64 arithmetic, as float32 bits: the quantum of x is
    2^(exponent - kept) (the float32 subnormal range keeps the smallest normal's quantum),
    x / quantum is exact in float64 and `np.rint` rounds it half to even."""
    with np.errstate(all="ignore"):  # NaN payloads cast, past the largest float32
        x = bits.view(np.float32).astype(np.float64)
        finite = np.isfinite(x) & (x != 0)
        _, exp = np.frexp(np.where(finite, x, 1.0))  # |x| = m 2^exp, m in [0.5, 1)
        quantum = np.ldexp(1.0, np.maximum(exp - 1, -126) - _KEPT[precision])
        rounded = np.where(finite, np.rint(x / quantum) * quantum, x)
        out = rounded.astype(np.float32).view(np.uint32)  # past the largest float32: inf
        nan = (bits & np.uint32(0x80000000)) | np.uint32(0x7FC00000)
        return np.where(np.isnan(x), nan, out)


# One jitted rounding (and one program per shape and format) for every test here: the eager
# form compiles each of its ops as a program of its own.
_round_to = jax.jit(round_to, static_argnums=1)


def _round_bits(bits: np.ndarray, precision: str) -> np.ndarray:
    x = jnp.asarray(bits.view(np.float32))
    return np.asarray(_round_to(x, precision)).view(np.uint32)


def _structured(precision: str) -> np.ndarray:
    """Every dropped-bit pattern under kept mantissas 0, 1, all-but-last and all ones (no
    carry, carry into the exponent), at exponents 0 (subnormals), 1, 126, 127, 253, 254
    (overflow) and 255 (inf, nan), both signs."""
    drop = 23 - _KEPT[precision]
    low = np.arange(1 << drop, dtype=np.uint32)
    top = (1 << _KEPT[precision]) - 1
    kept = np.array([0, 1, top - 1, top], np.uint32) << np.uint32(drop)
    exps = np.array([0, 1, 126, 127, 253, 254, 255], np.uint32) << np.uint32(23)
    signs = np.array([0, 0x80000000], np.uint32)
    grid = signs[:, None, None, None] | exps[None, :, None, None]
    return (grid | kept[None, None, :, None] | low[None, None, None, :]).ravel()


def _random_bits(n: int = 1 << 20) -> np.ndarray:
    return np.random.default_rng(49).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)


@pytest.mark.bitwise  # integer bit arithmetic: the same at every instruction-set level
@pytest.mark.parametrize("precision", EMULATED)
def test_rounding_matches_the_float64_reference_bit_for_bit(precision):
    for bits in (_structured(precision), _random_bits()):
        np.testing.assert_array_equal(_round_bits(bits, precision), _reference(bits, precision))


@pytest.mark.bitwise  # integer bit arithmetic: the same at every instruction-set level
def test_bf16_rounding_matches_ml_dtypes_bit_for_bit():
    for bits in (_structured("bf16"), _random_bits()):
        with np.errstate(invalid="ignore"):
            ref = bits.view(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
        np.testing.assert_array_equal(_round_bits(bits, "bf16"), ref.view(np.uint32))


@pytest.mark.parametrize(
    ("value", "precision", "expected"),
    [
        (1 + 2**-11, "tf32", 1.0),  # a tie, kept last bit even: down
        (1 + 3 * 2**-11, "tf32", 1 + 2**-9),  # a tie, kept last bit odd: up to even
        (1 + 2**-11 + 2**-23, "tf32", 1 + 2**-10),  # just past the tie: up
        (1 + 2**-8, "bf16", 1.0),  # bf16's tie at 1: down to even
        (2 - 2**-24, "tf32", 2.0),  # the carry into the exponent
        (np.finfo(np.float32).max, "tf32", np.inf),  # past tf32's largest finite: inf
        (np.finfo(np.float32).max, "bf16", np.inf),
        ((2 - 2**-10) * 2.0**127, "tf32", (2 - 2**-10) * 2.0**127),  # tf32's largest: kept
        (-np.inf, "tf32", -np.inf),
        (2**-149, "tf32", 0.0),  # the smallest subnormal: below half of tf32's 2^-136
        (3 * 2**-137, "tf32", 2**-135),  # a subnormal tie (1.5 quanta) up to even (2 quanta)
    ],
)
def test_named_cases(value, precision, expected):
    bits = np.array([value], np.float32).view(np.uint32)
    assert _round_bits(bits, precision).view(np.float32)[0] == np.float32(expected)


@pytest.mark.parametrize("precision", EMULATED)
def test_nan_stays_nan_with_its_sign(precision):
    bits = np.array([0x7F800001, 0xFF801FFF, 0x7FFFFFFF, 0x7FC00000], np.uint32)  # no inf
    out = _round_bits(bits, precision)
    np.testing.assert_array_equal(out, [0x7FC00000, 0xFFC00000, 0x7FC00000, 0x7FC00000])


def test_highest_is_the_identity_and_other_dtypes_are_refused():
    x = jnp.asarray([1 + 2**-20], jnp.float32)
    assert round_to(x, "highest") is x
    with pytest.raises(TypeError, match="float32"):
        round_to(x.astype(jnp.bfloat16), "tf32")
    with pytest.raises(ValueError, match="highest, tf32, bf16"):
        round_to(x, "fp16")


# The wrapped matmuls against float64 references of the rounded operands.


def _rnd64(x: jax.Array, precision: str) -> np.ndarray:
    return np.asarray(_round_to(jnp.asarray(x, jnp.float32), precision), np.float64)


def _assert_f32_accumulation(got, exact, abs_terms, n: int):
    """|got - exact| <= gamma_n |a| |b| (Higham's bound for a float32 dot of length n:
    the products of rounded operands are exact, only the n - 1 additions round), and the
    float32 rounding of the result: an error of the emulation (an unrounded operand, a
    product in the wrong format) is far larger."""
    u = 2.0**-24
    bound = (n * u / (1 - n * u)) * abs_terms + u * np.abs(exact)
    assert np.all(np.abs(np.asarray(got, np.float64) - exact) <= bound)


_EINSUMS = [
    # (subscripts, shape of a, shape of b, the cotangent's, da's, db's transposed einsums)
    ("ij,jk->ik", (6, 40), (40, 5), "ik,jk->ij", "ij,ik->jk"),
    ("bqhe,bkhe->bhqk", (4, 3, 2, 24), (4, 3, 2, 24), "bhqk,bkhe->bqhe", "bqhe,bhqk->bkhe"),
    ("btd,dhe->bthe", (4, 3, 32), (32, 2, 8), "bthe,dhe->btd", "btd,bthe->dhe"),
]


@functools.partial(jax.jit, static_argnums=(0, 1))
def _einsum_vjp(subscripts: str, precision: str, a, b, g):
    """The emulated einsum and both its backward products, as one program."""
    out, pullback = jax.vjp(functools.partial(einsum, subscripts, precision=precision), a, b)
    return (out, *pullback(g))


@pytest.mark.parametrize("precision", EMULATED)
@pytest.mark.parametrize("case", _EINSUMS, ids=[c[0] for c in _EINSUMS])
def test_einsum_forward_and_both_backward_products(precision, case):
    subscripts, shape_a, shape_b, sub_da, sub_db = case
    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in (shape_a, shape_b))
    shape = jax.eval_shape(functools.partial(einsum, subscripts), a, b).shape
    g = jnp.asarray(rng.normal(size=shape), jnp.float32)
    out, da, db = _einsum_vjp(subscripts, precision, a, b, g)
    ra, rb, rg = _rnd64(a, precision), _rnd64(b, precision), _rnd64(g, precision)
    n_fwd = shape_a[-1]  # every case contracts the last axis of a
    _assert_f32_accumulation(
        out, np.einsum(subscripts, ra, rb), np.einsum(subscripts, abs(ra), abs(rb)), n_fwd
    )
    n_da = int(np.prod(out.shape) * shape_a[-1] // np.prod(shape_a))  # products per da entry
    _assert_f32_accumulation(
        da, np.einsum(sub_da, rg, rb), np.einsum(sub_da, abs(rg), abs(rb)), n_da
    )
    n_db = int(np.prod(out.shape) * shape_a[-1] // np.prod(shape_b))
    _assert_f32_accumulation(
        db, np.einsum(sub_db, ra, rg), np.einsum(sub_db, abs(ra), abs(rg)), n_db
    )
    # The test can fail: the unrounded operands miss the bound (here by far).
    a64, g64 = np.asarray(a, np.float64), np.asarray(g, np.float64)
    with pytest.raises(AssertionError):
        _assert_f32_accumulation(
            out, np.einsum(subscripts, a64, rb), np.einsum(subscripts, abs(ra), abs(rb)), n_fwd
        )
    with pytest.raises(AssertionError):  # the cotangent is rounded too
        _assert_f32_accumulation(
            da, np.einsum(sub_da, g64, rb), np.einsum(sub_da, abs(rg), abs(rb)), n_da
        )


@pytest.mark.parametrize("precision", EMULATED)
def test_dot_is_the_einsum(precision):
    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.normal(size=(3, 7, 16)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(16, 5)), jnp.float32)
    f_dot = jax.value_and_grad(lambda a, b: jnp.sum(jnp.sin(dot(a, b, precision))), (0, 1))
    f_ein = jax.value_and_grad(
        lambda a, b: jnp.sum(jnp.sin(einsum("btd,df->btf", a, b, precision))), (0, 1)
    )
    (v1, g1), (v2, g2) = jax.jit(f_dot)(a, b), jax.jit(f_ein)(a, b)
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    for x, y in zip(g1, g2, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_highest_is_the_plain_program():
    """At 'highest' the wrappers are `a @ b` and `jnp.einsum`, op for op."""
    a, b = jnp.ones((3, 4), jnp.float32), jnp.ones((4, 2), jnp.float32)

    def jaxpr(f):
        return str(jax.make_jaxpr(jax.grad(lambda a, b: jnp.sum(f(a, b)), (0, 1)))(a, b))

    assert jaxpr(lambda a, b: dot(a, b, "highest")) == jaxpr(lambda a, b: a @ b)
    assert jaxpr(lambda a, b: einsum("ij,jk->ik", a, b, "highest")) == jaxpr(
        lambda a, b: jnp.einsum("ij,jk->ik", a, b)
    )
    assert dot(a, b) is not None and MATMUL_PRECISIONS[0] == "highest"


# The models.


def _tokens(p: int) -> jax.Array:
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    return jnp.asarray(np.stack([a.ravel(), b.ravel(), np.full(p * p, p)], axis=1), jnp.int32)


def test_transformer_emulation_uses_the_plain_pass_and_moves_the_logits():
    cfg = TransformerConfig(vocab_size=8, num_classes=7, d_model=8, n_heads=2)
    params = build_model(cfg).init(jax.random.key(0), jnp.float32)
    x = _tokens(7)
    # Jitted (one program a pass, not one per op), as the engine runs them.
    apply = jax.jit(transformer_apply, static_argnums=2)
    exact = apply(params, x, "highest")
    fast = jax.jit(transformer_apply_fast)(params, x)
    np.testing.assert_allclose(fast, exact, rtol=1e-5, atol=1e-6)
    for precision in EMULATED:
        tf = TransformerConfig(vocab_size=8, num_classes=7, d_model=8, n_heads=2,
                               matmul_precision=precision)  # fmt: skip
        model = build_model(tf)
        assert model.apply.func is transformer_apply
        got = jax.jit(model.apply)(params, x)
        np.testing.assert_array_equal(got, apply(params, x, precision))
        assert not np.array_equal(got, exact)
        np.testing.assert_allclose(got, exact, atol=0.05)


@pytest.mark.parametrize("precision", EMULATED)
def test_mlp_first_layer_is_the_one_hot_matmul(precision):
    """The gather form of the first layer equals `dot(onehot, w_in)`, forward and gradient."""
    p, width = 5, 6
    params = build_model(MLPConfig(p=p, width=width)).init(jax.random.key(0), jnp.float32)
    x = _tokens(p)

    def by_matmul(params):
        onehot = jnp.concatenate(
            [jax.nn.one_hot(x[:, 0], p), jax.nn.one_hot(x[:, 1], p)], axis=1
        ).astype(jnp.float32)
        pre = dot(onehot, params["w_in"], precision)
        return dot(jax.nn.relu(pre), params["w_out"], precision)

    def loss(f):  # jitted: one program, not one per op
        return jax.jit(jax.value_and_grad(lambda q: jnp.sum(jnp.sin(f(q)))))(params)

    (v1, g1) = loss(lambda q: mlp_apply(q, x, "relu", precision))
    (v2, g2) = loss(by_matmul)
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    for name in params:
        np.testing.assert_allclose(g1[name], g2[name], rtol=1e-5, atol=1e-6)
    (v0, _) = loss(lambda q: mlp_apply(q, x))
    assert v0 != v1


def test_model_configs_refuse_an_unknown_precision():
    with pytest.raises(ValueError, match="highest, tf32, bf16"):
        TransformerConfig(matmul_precision="fp8")
    with pytest.raises(ValueError, match="highest, tf32, bf16"):
        MLPConfig(matmul_precision="TF32")
