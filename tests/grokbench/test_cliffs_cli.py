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
