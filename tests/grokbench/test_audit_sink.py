"""`grokbench audit --kind sink-softmax / sink-log_softmax`: functions fn(x, sink=s).

The fixed sink softmax passes; the standard one (jax.nn on the row with the sink appended,
as GPT-OSS's reference writes it) fails in bf16 and names where: its dominant entry's
gradient (and log p) is exactly 0 from the first bf16 margin at or past the precision
cliff of the margin to the sink, while the sink's gradient stays, so they no longer sum to
zero.
"""

import ml_dtypes
import numpy as np
import pytest

import numerics
from grokbench import audit, cli

# The audits time their speed row on a small array (tests/grokbench/conftest.py).
pytestmark = pytest.mark.usefixtures("small_speed_shape")


def plain_softmax_without_sink(x):
    """A softmax that takes no sink: the wrong signature for the sink kinds."""
    return numerics.softmax(x)


def _first_bf16_at_or_past(value: float) -> float:
    """The first bf16 number >= value: where a bf16 margin sweep first meets the cliff."""
    v = np.array(value, ml_dtypes.bfloat16)
    if float(v) < value:
        v = np.nextafter(v, np.array(np.inf, ml_dtypes.bfloat16))
    return float(v)


# Each kind is audited once in the fast tier, one passing and one failing: the fixed
# sink-softmax passes here, the standard sink-log_softmax fails below. The other two audits
# (each a function's programs of its own) are the slow tier's; their fast siblings are the
# fast case of the other test (the same kind's check and table, and the same verdict path)
# and tests/numerics/test_sink_softmax.py (the functions themselves in bf16).
@pytest.mark.parametrize(
    "kind", ["sink-softmax", pytest.param("sink-log_softmax", marks=pytest.mark.slow)]
)
def test_fixed_sink_functions_pass_in_bf16(capsys, kind):
    spec = "numerics:log_softmax" if "log" in kind else "numerics:softmax"
    assert cli.main(["audit", spec, "--kind", kind, "--dtypes", "bf16", "--quick"]) == 0
    text = capsys.readouterr().out
    assert f"d {kind}[0] / dx0 = 0 from  never" in text
    assert f"PASS: {spec} as {kind} in bfloat16" in text


@pytest.mark.parametrize(
    "kind", [pytest.param("sink-softmax", marks=pytest.mark.slow), "sink-log_softmax"]
)
def test_standard_sink_functions_fail_in_bf16_naming_the_cliff(capsys, kind):
    spec = "numerics.standard:log_softmax" if "log" in kind else "numerics.standard:softmax"
    assert cli.main(["audit", spec, "--kind", kind, "--dtypes", "bf16", "--quick"]) == 1
    text = capsys.readouterr().out
    # The audit's sweep is x = [m] with the sink 0 (the audit program rounds the sum to
    # bf16): the gradient of p[0] dies where 1 + e^-m rounds to 1 in bf16.
    cliff = numerics.precision_cliff(ml_dtypes.bfloat16)
    start = _first_bf16_at_or_past(cliff)
    fails = [line for line in text.splitlines() if line.startswith("FAIL ")]
    assert fails[0].startswith(f"FAIL bfloat16 d {kind}[0] / dx0: exactly 0 from m={start:.8g}")
    assert any("the gradients do not sum to zero" in line for line in fails)
    if kind == "sink-log_softmax":  # log p[0] = -log1p(e^-m) rounds to 0 there too
        assert any(line.startswith(f"FAIL bfloat16 {kind}[0]: exactly 0") for line in fails)


def test_a_function_without_sink_exits_2_with_one_line(capsys):
    spec = "tests.grokbench.test_audit_sink:plain_softmax_without_sink"
    assert cli.main(["audit", spec, "--kind", "sink-softmax", "--dtypes", "fp32", "--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "(x, sink=s)" in err and "is --kind sink-softmax right?" in err, err


def test_sink_kinds_are_guessed_from_the_name():
    guesses = {
        "mypkg:softmax_with_sink": "sink-softmax",
        "mypkg:attention_sink_log_softmax": "sink-log_softmax",
        "mypkg:softmax_1": "sink-softmax",
        "mypkg:off_by_one_softmax": "sink-softmax",
        "numerics:softmax": "softmax",  # the sink is a keyword: say --kind
    }
    assert {spec: audit._infer_kind(spec) for spec in guesses} == guesses
