"""Helpers shared by the benchmark scripts: the machine's matmul peak and XLA FLOP counts."""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


def matmul_peak(n: int = 2048, reps: int = 5) -> float:
    """Median GFLOP/s of an n x n float32 matmul: the machine's practical peak."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    mm(a, b).block_until_ready()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mm(a, b).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / float(np.median(times)) / 1e9


def compiled_flops(fn: Callable, *args) -> float:
    """XLA's FLOP estimate for one call of `fn` (compiled)."""
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(cost, list | tuple):  # older jax returns one dict per computation
        cost = cost[0]
    return float(cost["flops"])
