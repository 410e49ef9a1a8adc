"""The audit's search for where a function is 0 spuriously (`spurious_zeros`).

A compiled gradient need not turn 0 once and stay 0: with fused multiply-add a shifted
logit can be a rounding residual, and the softmax rounds to 1 at some margins before it
does at all of them. These functions are synthetic, so the answer is known exactly and
the test holds on any CPU.
"""

import ml_dtypes
import numpy as np
import pytest

from numerics._check_calls import QUIET, SCAN_LIMIT, Zeros, spurious_zeros
from numerics._cliffs import bits_type

DTYPES = (
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.float16),
    np.dtype(np.float32),
    np.dtype(np.float64),
)


def _bits(x, dtype):
    return np.asarray(x, dtype).view(bits_type(dtype)).astype(np.int64)


def _fn(dtype, cliff, scattered_from=None, every=3, live_again=None):
    """Nonzero below `cliff`, 0 from it on; between `scattered_from` and `cliff` also 0
    at every `every`-th bit pattern; nonzero again from `live_again` (if given)."""
    cliff_bits = _bits(cliff, dtype)
    low_bits = None if scattered_from is None else _bits(scattered_from, dtype)
    again = None if live_again is None else _bits(live_again, dtype)

    def f(m):
        bits = _bits(m, dtype)
        zero = bits >= cliff_bits
        if low_bits is not None:
            zero |= (bits >= low_bits) & (bits % every == 0)
        if again is not None:
            zero &= bits < again
        return np.where(zero, 0.0, -1.0)

    return f


def _search(dtype, f, lo=0.5, hi=40.0, points=129):
    m = np.unique(np.linspace(lo, hi, points).astype(dtype))
    calls = []

    def at_margins(v):
        calls.append(len(v))
        assert v.dtype == dtype and len(v) == len(m)  # the sweep's own shape, padded
        return f(v)

    got = spurious_zeros(dtype, f(m), np.ones(len(m)), m, at_margins)
    return got, m, calls


def _ulps_below(x, n, dtype):
    return float(np.array(_bits(x, dtype) - n).astype(bits_type(dtype)).view(dtype))


def _final_run(f, cliff, dtype):
    """Where f's final run of zeros starts: the cliff, or below it where scattered zeros
    reach up to it."""
    start = cliff
    while f(np.array([_ulps_below(start, 1, dtype)], dtype))[0] == 0:
        start = _ulps_below(start, 1, dtype)
    return start


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_finds_the_exact_threshold_of_a_clean_cliff(dtype):
    cliff = float(np.asarray(18.7, dtype))
    got, _, _ = _search(dtype, _fn(dtype, cliff))
    assert got == Zeros(cliff, True, None, None)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_scattered_zeros_below_the_cliff_are_not_the_cliff(dtype):
    # zeros at every 3rd value over the 40 ulps below the cliff (fp16 / bf16: 12); a
    # bisection for the first zero lands on one of them
    cliff = float(np.asarray(18.7, dtype))
    n = 12 if dtype.itemsize == 2 else 40
    scattered = _ulps_below(cliff, n, dtype)
    f = _fn(dtype, cliff, scattered)
    got, _, _ = _search(dtype, f)
    assert got.start == _final_run(f, cliff, dtype) and got.for_good and got.again is None
    if dtype.itemsize <= 4:  # scanned value by value: the scattered zeros are seen
        assert got.lowest is not None and scattered <= got.lowest < got.start


def test_scattered_zeros_far_below_the_cliff_in_float64():
    # float64's brackets are too wide to scan: bisection, then probes above the zero it
    # found, until none is nonzero; 2^40 ulps of scattered zeros below the cliff
    dtype = np.dtype(np.float64)
    cliff = 18.7
    scattered = _ulps_below(cliff, 1 << 40, dtype)
    f = _fn(dtype, cliff, scattered, every=2)
    got, _, calls = _search(dtype, f)
    assert got.start == _final_run(f, cliff, dtype) and got.for_good
    assert got.lowest is not None and scattered <= got.lowest < got.start
    assert len(calls) < 64 * 70  # bounded: each round is one bisection and one probe


@pytest.mark.parametrize("dtype", DTYPES[:3], ids=lambda d: d.name)
def test_nonzero_margins_between_the_sweep_points_above_move_the_start(dtype):
    # zeros at every 3rd value from 15 up to 20 and at all from 20 on: the sweep's points
    # from its first zero on are all 0 (chosen so), but between them the function is
    # nonzero up to just below 20 (every 3rd value: far closer than QUIET apart), so it is
    # 0 for good from there only
    cliff = 20.0
    f = _fn(dtype, cliff, 15.0)
    uint = bits_type(dtype)
    mid = _bits(np.linspace(15.5, 19.5, 12), dtype)
    mid = (mid - mid % 3).astype(uint).view(dtype)  # on the scattered zeros
    m = np.unique(
        np.concatenate(
            [np.linspace(0.5, 14.5, 60).astype(dtype), mid, np.linspace(20, 40, 40).astype(dtype)]
        )
    )
    assert (f(m)[m > 15] == 0).all() and (f(m)[m < 15] != 0).all()
    got = spurious_zeros(dtype, f(m), np.ones(len(m)), m, f)
    assert got[:3] == (_final_run(f, cliff, dtype), True, None)
    assert got.lowest is not None and got.lowest < 20
    assert QUIET >= 3


def test_a_lone_nonzero_margin_past_the_quiet_stretch_is_not_seen():
    # the check above a final run stops QUIET zeros after the last nonzero margin: a
    # function nonzero again further up, between the sweep's points, is not seen (the
    # documented limit), while one within the stretch is
    dtype = np.dtype(np.float32)
    m = np.array([10.0, 11.0, 12.0, 40.0], dtype)
    for gap, seen in ((QUIET - 10, True), (QUIET + 10, False)):
        lone = _bits(11.0, dtype) + gap

        def f(v, lone=lone):
            bits = _bits(v, dtype)
            return np.where((v <= 10.0) | (bits == lone), -1.0, 0.0)

        got = spurious_zeros(dtype, f(m), np.ones(len(m)), m, f)
        after_ten = float(np.nextafter(np.float32(10), np.float32(11)))
        want = float(np.array(lone + 1).astype(np.uint32).view(dtype)) if seen else after_ten
        assert got.for_good and got.start == want, (gap, got)


def test_a_window_of_zeros_is_reported_with_where_it_ends():
    # 0 on [5.5, 9.75), nonzero again above (as a z-loss gradient in bf16): the start is
    # exact, and the first sweep point past the window says it is not for good
    for dtype in DTYPES:
        f_cliff, f_again = _fn(dtype, 5.5), _fn(dtype, 9.75)

        def f(v, f_cliff=f_cliff, f_again=f_again):
            return np.where((f_cliff(v) == 0) & (f_again(v) != 0), 0.0, -1.0)

        got, m, _ = _search(dtype, f)
        assert got.start == 5.5 and not got.for_good and got.lowest is None
        assert got.again == float(m[m >= 9.75][0]), dtype


def test_zeros_only_scattered_are_reported_as_such():
    dtype = np.dtype(np.float32)
    f = _fn(dtype, 18.7, _ulps_below(18.7, 40, dtype), live_again=18.7)
    below = [_ulps_below(18.7, k, dtype) for k in range(1, 40)]
    zero = next(v for v in below if f(np.array([v], dtype))[0] == 0)
    m = np.unique(np.concatenate([np.linspace(0.5, 40.0, 129), [zero]]).astype(dtype))
    got = spurious_zeros(dtype, f(m), np.ones(len(m)), m, f)
    assert got[:3] == (zero, False, float(m[m > zero][0]))
    assert got.lowest is None or got.lowest < zero  # the scattered zeros below it


def test_never_zero_and_exact_zeros_are_not_spurious():
    dtype = np.dtype(np.float32)
    m = np.linspace(0.5, 40.0, 129).astype(dtype)
    f = _fn(dtype, 18.7)
    assert spurious_zeros(dtype, -np.ones(len(m)), np.ones(len(m)), m, f) is None
    # where the exact value is itself below the normal range, a 0 is the right answer
    exact = np.where(m >= 18.7, 0.0, 1.0)
    assert spurious_zeros(dtype, f(m), exact, m, f) is None


def test_the_scan_covers_the_whole_bracket_where_it_is_small_enough():
    # float32, a bracket of about 2^17 values (under SCAN_LIMIT): the scan starts from
    # the top, so a lone nonzero value just below the bracket's top is found
    dtype = np.dtype(np.float32)
    m = np.array([16.0, 16.25], dtype)
    assert _bits(16.25, dtype) - _bits(16.0, dtype) <= SCAN_LIMIT
    lone = _bits(_ulps_below(16.25, 2, dtype), dtype)

    def f(v):
        return np.where((v <= 16.0) | (_bits(v, dtype) == lone), -1.0, 0.0)

    got = spurious_zeros(dtype, f(m), np.ones(2), m, f)
    assert got[:3] == (_ulps_below(16.25, 1, dtype), True, None)
    assert got.lowest == _ulps_below(16.25, 3, dtype)  # 0 below the lone value too
