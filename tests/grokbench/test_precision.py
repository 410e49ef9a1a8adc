"""Precision policies: names, separate param/compute dtypes, x64 scoped to fp64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grokbench.precision import _DTYPES, Precision, get_precision, precision_scope


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32", "fp64"])
def test_single_names_set_both_dtypes(name):
    policy = get_precision(name)
    assert policy.name == name
    assert policy.param_dtype == policy.compute_dtype == _DTYPES[name]


def test_mixed_name_keeps_dtypes_separate():
    policy = get_precision("fp32/bf16")
    assert policy.param_dtype == np.float32
    assert policy.compute_dtype == jnp.bfloat16
    assert get_precision("bf16/bf16").name == "bf16"
    assert get_precision(policy) is policy


@pytest.mark.parametrize(
    ("name", "pin"),
    [
        ("fp32", "highest"),
        ("fp64", "highest"),
        ("bf16", "default"),
        ("fp16", "default"),
        ("fp32/bf16", "default"),
    ],
)
def test_matmul_precision_is_highest_for_wide_compute(name, pin):
    """The `jax.default_matmul_precision` the engine traces under: 'highest' for float32 and
    float64 compute (tests/grokbench/test_engine.py::
    test_matmul_precision_is_pinned_in_the_jitted_chunk counts the dots it pins)."""
    assert get_precision(name).matmul_precision == pin


def test_numpy_names_are_accepted_and_named_short():
    assert get_precision("float32").name == "fp32"
    assert get_precision("float32/bfloat16").name == "fp32/bf16"


@pytest.mark.parametrize("bad", ["fp8", "float8", "", "fp32/", "fp32/bf16/fp16", "FP32"])
def test_unknown_names_raise(bad):
    with pytest.raises(ValueError, match="unknown precision"):
        get_precision(bad)


def test_non_string_raises():
    with pytest.raises(TypeError):
        get_precision(jnp.float32)


def test_x64_only_inside_fp64_scope():
    assert not jax.config.read("jax_enable_x64")
    with precision_scope("fp64") as policy:
        assert jax.config.read("jax_enable_x64")
        assert jnp.ones(2, policy.param_dtype).dtype == jnp.float64
    assert not jax.config.read("jax_enable_x64")
    with precision_scope("fp32/fp64") as policy:
        assert policy.needs_x64 and jax.config.read("jax_enable_x64")
    assert not jax.config.read("jax_enable_x64")


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32", "fp32/bf16"])
def test_x64_off_inside_other_scopes(name, x64):
    # Even a caller running with x64 gets JAX's float32 default inside a non-fp64 policy.
    assert jax.config.read("jax_enable_x64")
    with precision_scope(name):
        assert not jax.config.read("jax_enable_x64")
        assert jnp.asarray(1.0).dtype == jnp.float32
    assert jax.config.read("jax_enable_x64")


def test_casts_floats_only():
    policy = Precision("fp32/bf16", _DTYPES["fp32"], _DTYPES["bf16"])
    tree = {"w": jnp.ones((2,), jnp.float32), "tokens": jnp.zeros((2,), jnp.int32)}
    compute = policy.cast_to_compute(tree)
    assert compute["w"].dtype == jnp.bfloat16 and compute["tokens"].dtype == jnp.int32
    assert policy.cast_to_param(compute)["w"].dtype == jnp.float32
