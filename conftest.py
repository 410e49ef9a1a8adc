"""Strict JAX for every test and doctest (docs/style.md 12).

Two host devices so sharding paths run on a laptop; dtype promotion strict and
rank promotion raising, so an accidental upcast or broadcast is a test failure,
not a silent change of precision. Warnings are errors (pyproject.toml).
"""

import os

# Must be set before jax initialises its backends.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import jax

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
