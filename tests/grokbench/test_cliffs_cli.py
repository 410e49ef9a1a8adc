"""`grokbench cliffs`: the measured collapse points match the analytic cliffs."""

import json

import ml_dtypes
import numpy as np
import pytest

import numerics
from grokbench import cli, cliffs


@pytest.mark.parametrize("name", cliffs.DTYPES)
def test_measured_rows(name):
    row = cliffs.measure(name)
    dtype = np.dtype(name)
    assert row.cliff == numerics.precision_cliff(dtype)
    # Standard CE collapses at the first representable margin past the cliff
    # (within a few ulps for fp32/fp64, whose exp is not correctly rounded).
    assert abs(row.standard_grad_zero_from - row.cliff) <= 8 * np.spacing(
        np.array(row.cliff, dtype)
    )
    # Its loss collapses no later (the max is added back after the log).
    assert row.standard_loss_zero_from <= row.standard_grad_zero_from
    # The fixed gradient lasts until e^-m leaves the dtype's normal range (XLA flushes
    # subnormal results to zero; 16-bit dtypes compute in float32, so they may last longer).
    assert row.fixed_grad_zero_from > -np.log(float(ml_dtypes.finfo(dtype).smallest_normal))
    assert row.fixed_grad_at_cliff == pytest.approx(row.true_grad_at_cliff, rel=1e-2)


def test_cli_prints_table_and_json(capsys):
    assert cli.main(["cliffs", "float32"]) == 0
    out = capsys.readouterr().out
    assert "float32" in out and "16.6355" in out
    assert cli.main(["cliffs", "--json", "bfloat16"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["dtype"] == "bfloat16" and rows[0]["standard_grad_zero_from"] == 5.5625


def test_cli_rejects_unknown_dtype(capsys):
    assert cli.main(["cliffs", "float8"]) == 2
    assert "unknown dtype" in capsys.readouterr().err


@pytest.mark.parametrize("name", cliffs._FLOAT8_DTYPES)
def test_float8_rows(name):
    # issue 32: float8 is a storage format. The fixed loss computes in float32 and rounds
    # its gradient once to float8, so it is 0 exactly where e^-m / (1 + e^-m) rounds to 0:
    # below half the smallest subnormal.
    row = cliffs.measure(name)
    dtype = np.dtype(name)
    info = ml_dtypes.finfo(dtype)
    assert row.significand_bits == info.nmant + 1
    assert row.cliff == numerics.precision_cliff(dtype)
    m = numerics.oracle.representable_values(dtype).astype(np.float64)
    m = m[m > 0]
    grad = np.exp(-m) / (1 + np.exp(-m))
    first = m[grad < float(info.smallest_subnormal) / 2][0]
    assert row.fixed_grad_zero_from == first
    # One rounding to float8 of the float32 value: within half an ulp of mpmath.
    err = numerics.oracle.ulp_error(row.fixed_grad_at_cliff, row.true_grad_at_cliff, dtype)
    assert err <= 0.5 + 2.0**-10
    # The standard loss (JAX's float8 arithmetic: float16 per operation, rounded to float8)
    # is exactly 0 no later than its target gradient, from at most the cliff on.
    assert row.standard_loss_zero_from <= min(row.standard_grad_zero_from, row.cliff)


def test_cli_prints_float8_rows_and_refuses_other_8_bit_formats(capsys):
    assert cli.main(["cliffs", "e4m3fn", "e5m2"]) == 0
    out = capsys.readouterr().out
    assert "float8_e4m3fn" in out and "float8_e5m2" in out and "stored in float8" in out
    assert cli.main(["cliffs", "float8_e4m3fnuz"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "only the OCP float8 formats" in err
