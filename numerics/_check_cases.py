"""The hard cases `numerics.testing` checks on, shared by the checks and the strategies.

A random case is (K, logit scale, planted margin, offset added to every logit,
variant); the margin sweep is every ulp around the precision cliff plus a dense grid
up to exponent underflow, on logits [m, 0].
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from numerics import oracle
from numerics._cliffs import precision_cliff

CASES = (
    (2, 1.0, 0.5, 0.0, None),
    (3, 5.0, 30.0, 0.0, None),
    (10, 0.1, 12.0, 0.0, None),
    (10, 3.0, -4.0, 0.0, None),
    (100, 2.0, 17.0, 0.0, None),
    (100, 10.0, 40.0, 0.0, None),
    (100, 1e-3, 0.0, 0.0, None),  # tiny scale: near-uniform
    (10, 3.0, 8.0, 1e4, None),  # huge logits: exp overflows without the max shift
    (10, 1.0, 0.0, 0.0, "tie"),  # the target shares the max with another class
    (10, 1.0, 0.0, 0.0, "near-tie"),  # another class one ulp below the target
    (10, 2.0, 5.0, 0.0, "masked"),  # three classes at -inf
    (1000, 1.0, 6.0, 0.0, None),
    (50000, 1.0, 20.0, 0.0, None),
)
QUICK_MAX_K = 100  # quick=True: only cases up to this K
VARIANTS = (None, "tie", "near-tie", "masked")


def plant_row(rng, k: int, scale: float, margin: float, offset: float, variant, dtype):
    """One row of `dtype` whose target t has roughly the given margin; returns (row, t)."""
    z = scale * rng.standard_normal(k)
    t = int(rng.integers(k))
    others = np.delete(z, t)
    z[t] = others.max() + np.log(np.sum(np.exp(others - others.max()))) + margin
    z = (z + offset).astype(dtype)
    if k > 1 and variant in ("tie", "near-tie"):
        j = (t + 1) % k
        lowest = np.array([-float(ml_dtypes.finfo(dtype).max)], dtype)  # e4m3fn has no -inf
        below = np.nextafter(z[t : t + 1], lowest)[0]
        z[j] = z[t] if variant == "tie" else below
    if k > 4 and variant == "masked":
        others = np.delete(np.arange(k), t)
        z[rng.choice(others, 3, replace=False)] = -np.inf
    return z, t


def plant_rows(case, dtype, count: int, seed: int):
    """`count` planted rows of one case: (logits (count, K), labels (count,))."""
    rng = np.random.default_rng([seed, *(int(abs(v) * 1000) % 2**31 for v in case[:4])])
    made = [plant_row(rng, *case, dtype) for _ in range(count)]
    return np.stack([z for z, _ in made]), np.array([t for _, t in made], np.int32)


def random_cases(quick: bool, max_k: int = 50_000, dtype=None):
    """The `CASES` up to K = `max_k` (and `QUICK_MAX_K` when `quick`), and, for a `dtype`
    as narrow as float8, only those whose logits it can hold (e4m3fn tops out at 448 and
    has no -inf)."""
    limit = min(max_k, QUICK_MAX_K if quick else max_k)
    top = math.inf if dtype is None else float(ml_dtypes.finfo(dtype).max)
    # float8_e4m3fn has no infinities: -inf (the masked variant) would be NaN.
    no_inf = dtype is not None and np.isnan(np.array(-np.inf, np.float32).astype(dtype))
    return [
        case
        for case in CASES
        if case[0] <= limit
        and case[3] + abs(case[2]) + 6 * case[1] * math.log(case[0]) < top
        and not (no_inf and case[4] == "masked")
    ]


def describe_case(case) -> str:
    """The case in words, as failure lines name it."""
    k, scale, margin, offset, variant = case
    words = f"K={k} scale {scale:g} margin {margin:g}"
    return words + (f" offset {offset:g}" if offset else "") + (f" {variant}" if variant else "")


def case_element_namer(case, rows=None):
    """name(row, class=None) -> where an element of the case's rows sits, in words;
    `rows` optionally adds a word per row (a student's distance, say)."""

    def name(r, j=None):
        entry = "" if j is None else f", class {int(j)}"
        extra = "" if rows is None else f" {rows[r]}"
        return f"{describe_case(case)} (row {r}{extra}{entry})"

    return name


def margin_sweep(dtype, quick: bool) -> np.ndarray:
    """Every ulp around the cliff and a dense grid from -40 to past exponent underflow;
    for float8, every finite value (exhaustive)."""
    if np.dtype(dtype).itemsize == 1:
        return oracle.representable_values(dtype)
    window = oracle.ulp_window(precision_cliff(dtype), dtype, 64 if quick else 512)
    underflow = -math.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    grid = np.linspace(-40.0, 1.05 * underflow, 513 if quick else 4001).astype(dtype)
    return np.unique(np.concatenate([window, grid]))
