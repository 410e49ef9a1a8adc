"""`grokbench audit --kind log-prob / entropy` (issue 47): the fixed per-token functions
pass, the trainers' standard formulas fail in bf16, and the audit names where."""

import numpy as np
import pytest

import numerics
from grokbench import audit, cli
from numerics import testing
from tests.tolerances import BF16, DTYPES

# The audits time their speed row on a small array (tests/grokbench/conftest.py).
pytestmark = pytest.mark.usefixtures("small_speed_shape")

# bf16's first margin past a cliff: its own (8 ln 2 = 5.545, where each operation rounds to
# bf16) or float32's (24 ln 2 = 16.64, where XLA's CPU backend keeps a fused bf16
# computation in float32); which one the standard formula hits depends on the fusion.
BF16_ZEROS = ("m=5.5625 ", "m=16.75 ")


def _fails(capsys):
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL ")]


def test_kinds_are_guessed_from_the_names():
    guesses = {
        "numerics:log_prob": "log-prob",
        "numerics.standard:log_prob": "log-prob",
        "numerics:entropy": "entropy",
        "my.module:policy_entropy": "entropy",
        "numerics:cross_entropy": "ce",
        "numerics:soft_target_cross_entropy": "soft-target",
    }
    assert {spec: audit._infer_kind(spec) for spec in guesses} == guesses
    assert {"log-prob", "entropy"} <= set(audit.KIND_CALLS) == set(testing.KINDS)


def test_log_prob_passes_and_the_standard_one_is_zero_past_the_cliff(capsys):
    # The standard log_softmax(z)[y] forms log(1 + e^-m): exactly 0 once 1 + e^-m rounds
    # to 1, and its target gradient 1 - p_y with it.
    assert cli.main(["audit", "numerics:log_prob", "--dtypes", "bf16", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "as log-prob (fn(logits, labels)" in out and "log_prob = 0 from" in out
    assert cli.main(["audit", "numerics.standard:log_prob", "--dtypes", "bf16", "--quick"]) == 1
    fails = _fails(capsys)
    zero = [line for line in fails if line.startswith("FAIL bfloat16 -log_prob: exactly 0 from")]
    assert zero and any(m in zero[0] for m in BF16_ZEROS), fails
    assert any(line.startswith("FAIL bfloat16 target gradient: exactly 0") for line in fails)


# slow: the entropy audits' programs are their own. Fast siblings: the log-prob audit above
# (the per-token kinds' CLI path, its PASS and its FAIL lines);
# test_the_library_checks_pass_in_every_dtype[bfloat16] (check_entropy, the check this audit
# runs, on numerics.entropy in bf16); and, in tests/numerics/test_per_token.py,
# test_standard_formulas_fail_in_bf16_on_the_binades_that_matter (the standard entropy's zero
# past the cliff in bf16).
@pytest.mark.slow
def test_entropy_passes_and_the_standard_one_fails_on_peaked_rows(capsys):
    # verl's lse - sum p z subtracts two numbers of the size of the logits: 0 past the
    # cliff on [m, 0], off by hundreds of ulps on the random rows (peaked ones, and the
    # 1e4 offset), NaN with -inf classes (0 * -inf).
    assert cli.main(["audit", "numerics:entropy", "--dtypes", "bf16", "--quick"]) == 0
    assert "entropy = 0 from              never" in capsys.readouterr().out
    assert cli.main(["audit", "numerics.standard:entropy", "--dtypes", "bf16", "--quick"]) == 1
    fails = _fails(capsys)
    zero = [line for line in fails if line.startswith("FAIL bfloat16 entropy: exactly 0 from")]
    assert zero and any(m in zero[0] for m in BF16_ZEROS), fails
    assert any(
        line.startswith("FAIL bfloat16 entropy: ") and "ulps > bound" in line for line in fails
    )
    assert any("-inf logits: entropy is nan" in line for line in fails), fails


# bf16 in the fast tier (the checks the CLI tests above run: the log-prob one's programs
# compiled once; the entropy check's compiled here, its CLI test being the slow tier's);
# fp32, fp16 and fp64 are the slow tier's, their fast siblings the oracle tests of
# tests/numerics/test_per_token.py (test_per_entry_against_mpmath_up_to_k_100, bfloat16 and
# float32: the same functions; the checks branch on the dtype only for float64's oracle
# precision, numerics._check_per_token).
@pytest.mark.parametrize(
    "dtype",
    [pytest.param(d, marks=() if d == BF16 else pytest.mark.slow) for d in DTYPES],
    ids=lambda d: np.dtype(d).name,
)
def test_the_library_checks_pass_in_every_dtype(dtype):
    testing.check_log_prob(numerics.log_prob, dtype, quick=True).assert_ok()
    testing.check_entropy(numerics.entropy, dtype, quick=True).assert_ok()
