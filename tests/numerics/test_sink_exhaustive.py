"""Every finite bf16 and fp16 value m as the margin to the sink: softmax off by one of [m].

The row [m] with the sink 0 is softmax_1 of one logit: p = 1 / (1 + e^-m), log p =
-log1p(e^-m), and both signs of m are covered, so the sink is the row's max for m < 0
(P_sink -> 1, p -> e^m) and an "other" term for m > 0 (p -> 1, the top entry's cliff).
The shift m - max(m, 0) is exact, so the bounds are the table's (`ULPS`), with no
conditioning: the fixed functions' value within ULPS['value'] and their gradients with
respect to the logit and to the sink within ULPS['autodiff_grad'], everywhere.

The standard sink softmax (`numerics.standard`, the row [m, 0] through jax.nn) is exact
in its value p but collapses where the plain softmax does: log p rounds to exactly 0
and d p / dm = p P_sink to exactly 0 from the precision cliff on (1 + e^-m rounds to 1),
while d p / d sink = -p P_sink stays nonzero, so its gradients no longer sum to zero.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numerics
from numerics import oracle, standard
from numerics.testing import assert_ulp_close
from tests.tolerances import BF16, F16, ULPS


def _value_and_grads(fn):
    """jit of m -> (fn([m], sink=0), d/dm, d/dsink) on the rows [m] of one batch, as the
    audit runs a function (`numerics.testing`): XLA may round another program (a vmap of
    one row) otherwise."""

    def run(m):
        x, s = m[:, None], jnp.zeros_like(m)
        out, vjp = jax.vjp(lambda x, s: fn(x, sink=s), x, s)
        grad_x, grad_s = vjp(jnp.ones_like(out))
        return out[:, 0], grad_x[:, 0], grad_s

    return jax.jit(run)


# The fast tier's sibling of the full sweep: every STRIDE-th value of |m| from 0 (both
# signs), so both placements of the sink and the cliff are crossed with the same bounds;
# every value (bf16 and fp16) is the slow tier's (-m slow).
STRIDE = 16


def _every(m, stride):
    """m[i] for every i whose distance to the nearer end is a multiple of `stride`: the
    value set stays symmetric about 0 and keeps its extremes."""
    i = np.arange(len(m))
    return m[np.minimum(i, len(m) - 1 - i) % stride == 0]


@functools.cache
def _sweep(dtype, stride):
    """(m, {name: (value, d/dm, d/dsink)} fixed and standard, exact {name: ...})."""
    m = _every(oracle.representable_values(dtype), stride)
    computed = {
        (name, which): _value_and_grads(getattr(module, name))(jnp.asarray(m))
        for name in ("softmax", "log_softmax")
        for which, module in (("fixed", numerics), ("standard", standard))
    }
    x, zero = m[:, None], np.zeros(len(m), dtype)
    exact = {}
    for name, value, vjp in (
        ("softmax", oracle.sink_softmax, oracle.sink_softmax_vjp),
        ("log_softmax", oracle.sink_log_softmax, oracle.sink_log_softmax_vjp),
    ):
        grad_m, grad_s = vjp(x, zero, np.ones_like(x), exact=True)
        exact[name] = (value(x, zero, exact=True)[:, 0], grad_m[:, 0], grad_s)
    return m, computed, exact


def _params(*names):
    """bf16's every STRIDE-th value in the fast tier; every bf16 and every fp16 value (the
    same code, 63,488 more oracle rows) in the slow."""
    return [
        pytest.param(dtype, name, stride, marks=() if stride > 1 else pytest.mark.slow)
        for dtype, stride in ((BF16, STRIDE), (BF16, 1), (F16, 1))
        for name in names
    ]


@pytest.mark.parametrize(("dtype", "name", "stride"), _params("softmax", "log_softmax"), ids=str)
def test_fixed_matches_the_oracle_on_every_value(dtype, name, stride):
    m, computed, exact = _sweep(dtype, stride)
    value, grad_m, grad_s = computed[name, "fixed"]
    assert value.dtype == dtype and grad_m.dtype == dtype and grad_s.dtype == dtype
    want_value, want_m, want_s = exact[name]
    assert_ulp_close(value, want_value, ULPS["value"][dtype], inputs=m, err_msg=name)
    bound = ULPS["autodiff_grad"][dtype]
    assert_ulp_close(grad_m, want_m, bound, inputs=m, err_msg=f"d {name} / dm")
    assert_ulp_close(grad_s, want_s, bound, inputs=m, err_msg=f"d {name} / dsink")


def _first_of_final_zero_run(values, m):
    """The first positive margin from which `values` is exactly 0 to the sweep's end."""
    positive = m.astype(np.float64) > 0
    nonzero = np.flatnonzero(positive & (np.asarray(values, np.float64) != 0))
    return nonzero[-1] + 1


@pytest.mark.parametrize(("dtype", "name", "stride"), _params("softmax", "log_softmax"), ids=str)
def test_standard_collapses_at_the_cliff_of_the_margin_to_the_sink(dtype, name, stride):
    m, computed, exact = _sweep(dtype, stride)
    value, grad_m, grad_s = (np.asarray(v, np.float64) for v in computed[name, "standard"])
    # softmax: d p / dm = p P_sink; log_softmax: log p = -log1p(e^-m). Each is exactly 0
    # from the first margin where the formula rounds 1 + e^-m or its reciprocal to 1, on
    # to the end of the sweep. Which rounding does it depends on the program XLA makes: the
    # sum 1 + e^-m held in the dtype (p significand bits: from m = p ln 2, its precision
    # cliff), p = 1 / (1 + e^-m) rounded to the dtype (1 - e^-m is within half an ulp
    # below 1, 2^-(p + 1), from m = (p + 1) ln 2), or the sum kept in float32 (XLA keeps
    # the excess precision of bf16 / fp16 arithmetic inside a fusion by default: from
    # float32's cliff). Each lies far below m = 87, where the exact values stop being
    # normal numbers of the dtype.
    dead = {"softmax": grad_m, "log_softmax": value}[name]
    first = _first_of_final_zero_run(dead, m)
    cliff = numerics.precision_cliff(dtype)
    cliffs = [cliff, cliff + np.log(2), numerics.precision_cliff(np.float32)]
    at = (float(m[first - 1]), float(m[first]))
    assert any(at[0] < cliff <= at[1] for cliff in cliffs), (at, cliffs)
    # Meanwhile the sink's gradient -p P_sink (or -P_sink) is nonzero wherever its exact
    # value is a normal number: the gradients over [m, sink] no longer sum to zero.
    tiny = float(jnp.finfo(dtype).smallest_normal)
    normal = np.abs(exact[name][2].astype(np.float64)) >= tiny
    assert np.all(grad_s[first:][normal[first:]] != 0)
    # The fixed function keeps every one of them nonzero (within the table, tested above).
    fixed = np.asarray(computed[name, "fixed"][{"softmax": 1, "log_softmax": 0}[name]], np.float64)
    want = exact[name][{"softmax": 1, "log_softmax": 0}[name]].astype(np.float64)
    assert np.all(fixed[np.abs(want) >= tiny] != 0)
