"""Hypothesis strategies drawing `numerics.testing`'s hard cases, for property tests.

hypothesis is imported when a strategy is built, so `numerics.testing` works without it.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from numerics import _check_cases as cases
from numerics._check_tolerances import as_dtype


def _strategies():
    try:
        from hypothesis import strategies
    except ImportError as err:
        raise ImportError(
            "numerics.testing's strategies need hypothesis, which `pip install grokbench` "
            "does not install: pip install 'grokbench[testing]' (hypothesis==6.170.17)"
        ) from err
    return strategies


_SIZES = (2, 3, 10, 100, 1000, 50_000)


def labelled_logits(dtype, *, sizes=_SIZES, batch: int = 2):
    """Hypothesis strategy of (logits (batch, K) of `dtype`, labels (batch,) int32): hard cases.

    Each example plants a margin from -40 to past exponent underflow on a random target,
    at a logit scale of 1e-3 to 10, sometimes offset by 1e4 (huge logits), with the
    target sometimes tied at the max or one ulp above another class, or with three
    classes at -inf. K is drawn from `sizes` (few distinct shapes, so few compilations).
    The rows come from a seeded NumPy generator, so shrinking works on the parameters.

    Example:
      >>> from hypothesis import given, settings
      >>> @settings(max_examples=5, derandomize=True)
      ... @given(labelled_logits("bf16", sizes=(3,)))
      ... def test(case):
      ...     logits, labels = case
      ...     assert logits.shape == (2, 3) and labels.shape == (2,)
      >>> test()

    Args:
      dtype: 'bf16', 'fp16', 'fp32', 'fp64' or NumPy's names and dtypes.
      sizes: the numbers of classes K to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy. Raises ImportError, saying how to install it, without
      hypothesis.
    """
    return _planted_rows(dtype, sizes, batch, cases.VARIANTS)


def _planted_rows(dtype, sizes, batch: int, variants):
    st = _strategies()
    dtype = as_dtype(dtype)
    underflow = -math.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    params = st.tuples(
        st.sampled_from(sizes),
        st.sampled_from([1e-3, 0.1, 1.0, 10.0]),  # logit scale
        st.floats(-40.0, 1.05 * underflow),  # planted margin
        st.sampled_from([0.0, 1e4]),  # offset: huge logits
        st.sampled_from(variants),
        st.integers(0, 2**32 - 1),  # seed of the rows
    )
    return params.map(lambda p: cases.plant_rows(p[:5], dtype, batch, p[5]))


def logits(dtype, *, sizes=_SIZES, batch: int = 2):
    """Hypothesis strategy of logits (batch, K) of `dtype`: the rows of `labelled_logits`.

    Args:
      dtype: as `labelled_logits`.
      sizes: the numbers of classes K to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy of NumPy arrays.
    """
    return labelled_logits(dtype, sizes=sizes, batch=batch).map(lambda case: case[0])


def masked_logits(dtype, *, sizes=tuple(k for k in _SIZES if k > 4), batch: int = 2):
    """Hypothesis strategy of (logits, labels, where): three classes per row masked out.

    The masked entries hold a finite value above the row's max, so a function that
    ignores `where` gives a visibly wrong result. The target is never masked.

    Args:
      dtype: as `labelled_logits`.
      sizes: the numbers of classes K (> 4) to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy of (logits (batch, K), labels (batch,), where (batch, K) bool).
    """

    def unmask(case):
        z, labels = case
        where = ~np.isneginf(z)
        top = np.max(np.where(where, z, -np.inf), -1, keepdims=True).astype(np.float64)
        return np.where(where, z, (top + 1.0).astype(z.dtype)), labels, where

    return _planted_rows(dtype, sizes, batch, ("masked",)).map(unmask)


def student_teacher(dtype, *, distance=None, sizes=_SIZES[:-1], batch: int = 2):
    """Hypothesis strategy of (student, teacher) logits (batch, K) at a chosen distance.

    Teachers are `logits` rows without -inf classes; the student is the teacher plus
    `distance` times standard normal noise, rounded to the dtype. `distance` None draws
    it from 0 (student == teacher, bit for bit), 1e-6, 1e-3, 0.1 and 1.

    Args:
      dtype: as `labelled_logits`.
      distance: the noise scale, or None to draw it.
      sizes: the numbers of classes K to draw from.
      batch: rows per example.

    Returns:
      A hypothesis strategy of (student, teacher) NumPy arrays of `dtype`.
    """
    st = _strategies()
    distances = (
        st.sampled_from([0.0, 1e-6, 1e-3, 0.1, 1.0]) if distance is None else st.just(distance)
    )
    teachers = _planted_rows(dtype, sizes, batch, (None, "tie", "near-tie"))

    def perturb(args):
        (teacher, _), scale, seed = args
        noise = np.random.default_rng(seed).standard_normal(teacher.shape)
        return (teacher.astype(np.float64) + scale * noise).astype(teacher.dtype), teacher

    return st.tuples(teachers, distances, st.integers(0, 2**32 - 1)).map(perturb)
