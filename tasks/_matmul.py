"""Emulated matmul precision: float32 matmuls whose operands are rounded to TF32 or bfloat16.

JAX's default float32 matmul is not exact on accelerators: on a TPU, precision DEFAULT
rounds both operands to bfloat16 (one pass) and accumulates in float32; on NVIDIA GPUs
since Ampere it rounds them to TF32 (float32 with a 10-bit mantissa). XLA's CPU backend
ignores precision hints, so here the rounding is explicit:

- `round_to(x, precision)` rounds float32 `x` to the format, round-to-nearest-even, and
  keeps it in float32: 'tf32' keeps 10 explicit mantissa bits, 'bf16' 7 (bfloat16's).
  It works on the float32 bits with integer arithmetic (add half an ulp of the target,
  minus one unless the kept last bit is odd, then clear the dropped bits), so it is exact
  and no compiler can fold it away (XLA may drop a float32 -> bfloat16 -> float32 convert
  pair when it allows excess precision). Subnormals are rounded on the same grid (the
  format's own subnormals; no flush to zero); a value that rounds past the largest finite
  number becomes inf, as RNE overflow does; inf stays inf; a NaN becomes the canonical quiet
  NaN, its sign kept (ml_dtypes' bfloat16 cast does the same).
- `dot(a, b, precision)` and `einsum(subscripts, a, b, precision)` are `a @ b` and
  `jnp.einsum` with every product of the hardware's matmul emulated:

  forward   C  = rnd(A) . rnd(B)                 (products exact in float32: 11 + 11 and
  backward  dA = rnd(dC) . rnd(B)^T                8 + 8 significant bits both fit in 24;
            dB = rnd(A)^T . rnd(dC)                sums accumulated in float32)

  i.e. both operands of the forward product and both operands of each of the two backward
  products are rounded, as they are on the hardware, where the backward products are
  matmuls like any other (the cotangent dC is a matmul input there). The derivative of
  the rounding itself is taken as the identity: dA is the backward matmul's product, as
  on the hardware. This is built from two elementwise pieces, `_round_st` (round the
  value, pass the cotangent through) on each operand and `_round_cotangent` (pass the
  value, round the cotangent) on the result, so the two backward products are the very
  dot_generals JAX's own transpose of the einsum makes, with rounded inputs. Being
  custom_vjp functions, the emulated products have no forward mode (`jax.jvp` raises);
  take derivatives through them in reverse mode (`grokbench.balance` does).

At 'highest' (exact float32 products, the lab's behaviour before this setting existed)
`dot` and `einsum` are exactly `a @ b` and `jnp.einsum(subscripts, a, b)`: the same
program, op for op.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

MATMUL_PRECISIONS: tuple[str, ...] = ("highest", "tf32", "bf16")
"""The matmul precisions a model takes: 'highest' (exact float32 products), 'tf32' (NVIDIA's
default for float32 matmuls: operands rounded to a 10-bit mantissa) and 'bf16' (the TPU's
DEFAULT: operands rounded to bfloat16), products accumulated in float32."""

_MANTISSA_BITS = {"tf32": 10, "bf16": 7}  # explicit mantissa bits kept (float32 has 23)


def check_matmul_precision(precision: str) -> str:
    """`precision` if it is one of `MATMUL_PRECISIONS`, else a ValueError naming them."""
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(
            f"matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)}; got {precision!r}"
        )
    return precision


def round_to(x: jax.Array, precision: str) -> jax.Array:
    """float32 `x` rounded to `precision`'s format (module docstring), round-to-nearest-even,
    as float32. 'highest' returns `x` itself."""
    check_matmul_precision(precision)
    if precision == "highest":
        return x
    x = jnp.asarray(x)
    if x.dtype != jnp.float32:
        raise TypeError(f"matmul_precision={precision} rounds float32 operands, got {x.dtype}")
    drop = 23 - _MANTISSA_BITS[precision]  # low mantissa bits dropped: 13 (tf32), 16 (bf16)
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    lsb = (bits >> np.uint32(drop)) & np.uint32(1)  # the last kept bit: ties go to even
    half = np.uint32((1 << (drop - 1)) - 1)
    # A carry out of the mantissa bumps the exponent (1.111.. -> 10.0), and past the largest
    # finite number gives the inf pattern: RNE overflow.
    rounded = (bits + half + lsb) & np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)
    # A NaN becomes the canonical quiet NaN with its sign (as ml_dtypes' bfloat16 cast does):
    # rounding its payload could carry it into the inf pattern.
    quiet_nan = (bits & np.uint32(0x80000000)) | np.uint32(0x7FC00000)
    out = jnp.where(jnp.isnan(x), quiet_nan, rounded)
    return jax.lax.bitcast_convert_type(out, jnp.float32)


def _make_round_st(precision: str):
    @jax.custom_vjp
    def round_st(x: jax.Array) -> jax.Array:
        return round_to(x, precision)

    def fwd(x: jax.Array) -> tuple[jax.Array, None]:
        return round_to(x, precision), None

    def bwd(_: None, g: jax.Array) -> tuple[jax.Array]:
        return (g,)

    round_st.defvjp(fwd, bwd)
    return round_st


def _make_round_cotangent(precision: str):
    @jax.custom_vjp
    def round_cotangent(y: jax.Array) -> jax.Array:
        return y

    def fwd(y: jax.Array) -> tuple[jax.Array, None]:
        return y, None

    def bwd(_: None, g: jax.Array) -> tuple[jax.Array]:
        return (round_to(g, precision),)

    round_cotangent.defvjp(fwd, bwd)
    return round_cotangent


_ROUND_ST = {name: _make_round_st(name) for name in _MANTISSA_BITS}
_ROUND_COTANGENT = {name: _make_round_cotangent(name) for name in _MANTISSA_BITS}


def round_operand(x: jax.Array, precision: str) -> jax.Array:
    """A matmul input: `round_to(x, precision)` in the forward pass, the cotangent passed
    through unchanged in the backward (the rounding's derivative taken as 1)."""
    if check_matmul_precision(precision) == "highest":
        return x
    return _ROUND_ST[precision](x)


def round_output_cotangent(y: jax.Array, precision: str) -> jax.Array:
    """A matmul output: `y` itself in the forward pass; in the backward its cotangent
    rounded to `precision`, the input that the two backward matmuls read."""
    if check_matmul_precision(precision) == "highest":
        return y
    return _ROUND_COTANGENT[precision](y)


def dot(a: jax.Array, b: jax.Array, precision: str = "highest") -> jax.Array:
    """`a @ b` at `precision` (module docstring); exactly `a @ b` at 'highest'."""
    if check_matmul_precision(precision) == "highest":
        return a @ b
    return round_output_cotangent(
        round_operand(a, precision) @ round_operand(b, precision), precision
    )


def einsum(subscripts: str, a: jax.Array, b: jax.Array, precision: str = "highest") -> jax.Array:
    """`jnp.einsum(subscripts, a, b)` at `precision` (module docstring); exactly it at
    'highest'."""
    if check_matmul_precision(precision) == "highest":
        return jnp.einsum(subscripts, a, b)
    product = jnp.einsum(subscripts, round_operand(a, precision), round_operand(b, precision))
    return round_output_cotangent(product, precision)
