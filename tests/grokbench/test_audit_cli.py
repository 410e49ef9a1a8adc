"""`grokbench audit MODULE:FUNCTION`: exit 0 for the fixed loss, 1 with the cliff for optax,
1 with an overflow line for a loss without the max shift, 2 for bad input."""

import json

import jax.numpy as jnp
import pytest

import numerics
from grokbench import audit, cli

# The audits time their speed row on a small array (tests/grokbench/conftest.py).
pytestmark = pytest.mark.usefixtures("small_speed_shape")


def no_max_shift(logits, labels):
    """Cross-entropy as textbooks write it: exp of the raw logits (overflows)."""
    log_z = jnp.log(jnp.sum(jnp.exp(logits), axis=-1))
    return log_z - jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]


def per_batch_mean(logits, labels):
    """The wrong signature: one number per batch."""
    return jnp.mean(logits)


def test_fixed_cross_entropy_passes(capsys, tmp_path):
    out = tmp_path / "audit.json"
    assert (
        cli.main(
            ["audit", "numerics:cross_entropy", "--dtypes", "fp32", "--quick", "--json", str(out)]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "target gradient = 0 from  never" in text and "PASS: numerics:cross_entropy" in text
    (row,) = json.loads(out.read_text())
    assert row["result"]["dtype"] == "float32" and row["result"]["failures"] == []


def test_optax_names_the_fp32_cliff(capsys):
    spec = "optax:softmax_cross_entropy_with_integer_labels"
    assert cli.main(["audit", spec, "--dtypes", "float32", "--quick"]) == 1
    text = capsys.readouterr().out
    assert "target gradient = 0 from  m = 16.635532   (cliff 16.635532)" in text
    fails = [line for line in text.splitlines() if line.startswith("FAIL ")]
    assert fails[0].startswith("FAIL float32 target gradient: exactly 0 from m=16.635532")


def test_missing_max_shift_fails_with_overflow_not_a_traceback(capsys):
    spec = "tests.grokbench.test_audit_cli:no_max_shift"
    assert cli.main(["audit", spec, "--dtypes", "fp16", "--quick"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    fails = [line for line in captured.out.splitlines() if line.startswith("FAIL ")]
    assert fails[0].startswith("FAIL float16 overflow: loss is inf")
    assert "overflowed past log(max float16) = 11.09" in fails[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["numerics"], "expected MODULE:FUNCTION"),
        (["no_such_module:f"], "no module named 'no_such_module'"),
        (["numerics:cross_entropi"], "did you mean cross_entropy"),
        (["numerics.testing:ULPS"], "is a dict, not a function"),
        (["tests.grokbench.test_audit_cli:per_batch_mean"], "returned shape ()"),
        (["optax:softmax_cross_entropy"], "softmax_cross_entropy(logits, labels) with"),
        (["numerics:cross_entropy", "--dtypes", "fp8"], "unknown dtype(s) fp8"),
        (["numerics:cross_entropy", "--max-ulps", "0"], "--max-ulps must be > 0"),
        (["numerics:cross_entropy", "--kind", "hinge"], "invalid choice: 'hinge'"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    try:
        status = cli.main(["audit", *argv, "--quick"])
    except SystemExit as exit_:  # argparse's own errors exit from the parser
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_kind_is_guessed_from_the_name():
    guesses = {
        "jax.nn:log_softmax": "log_softmax",
        "jax.nn:softmax": "softmax",
        "numerics:soft_target_cross_entropy": "soft-target",
        "optax:softmax_cross_entropy_with_integer_labels": "ce",
        "numerics:linear_cross_entropy": "linear-ce",
        "mypkg:ce_with_z_loss": "z-loss",
        "mypkg:softcapped_ce": "soft-cap",
        "mypkg:smoothed_ce": "label-smoothing",
        "numerics:kl_divergence": "kl",
        "numerics:reverse_kl_divergence": "reverse-kl",
        "numerics:js_divergence": "js",
        "mypkg:distill_kl": "kl",
        "mypkg:jsd": "js",
    }
    assert {spec: audit._infer_kind(spec) for spec in guesses} == guesses


@pytest.mark.slow
def test_full_audit_of_every_dtype(capsys):
    assert cli.main(["audit", "numerics:cross_entropy"]) == 0
    spec = "optax:softmax_cross_entropy_with_integer_labels"
    assert cli.main(["audit", spec]) == 1
    assert "exactly 0 from m=16.635532" in capsys.readouterr().out


def fixed_z_loss(logits, labels):
    """The fixed cross-entropy with T5X's z-loss weight."""
    return numerics.cross_entropy(logits, labels, z_loss=1e-4)


def naive_z_loss(logits, labels):
    """logsumexp - z_t + 1e-4 logsumexp^2 in the logits' dtype, as trainers add it."""
    return numerics.standard.cross_entropy(logits, labels, z_loss=1e-4)


def fixed_soft_cap(logits, labels):
    """The fixed cross-entropy of 30 tanh(z / 30)."""
    return numerics.cross_entropy(logits, labels, soft_cap=30.0)


def standard_soft_cap(logits, labels):
    """optax's cross-entropy of 30 tanh(z / 30) computed in the logits' dtype."""
    return numerics.standard.cross_entropy(logits, labels, soft_cap=30.0)


_OPTIONS = [
    ("z_loss", "z-loss", "bf16", "target gradient: exactly 0 from m=5.5625"),
    ("soft_cap", "soft-cap", "fp32", "target gradient: exactly 0 from m=18.746447"),
]


@pytest.mark.parametrize(
    ("name", "kind", "dtype", "cliff"),
    [
        pytest.param(*_OPTIONS[0]),
        # slow: the soft-cap audit's programs are its own; fast siblings: the [z_loss-...] case
        # (the option kinds' audit, testing.check_option_cross_entropy and the optax reference
        # with the option, the same code for every option: audit.py branches on
        # testing.OPTIONS), test_fixed_cross_entropy_passes (an fp32 audit that passes) and
        # tests/numerics/test_options.py (the soft-capped fixed cross-entropy itself).
        pytest.param(*_OPTIONS[1], marks=pytest.mark.slow),
    ],
)
def test_options_pass_ours(capsys, name, kind, dtype, cliff):
    """The fast sibling of the slow test below: each option's audit (its kind) runs and
    passes the fixed loss; the audit's failure path runs in test_optax_names_the_fp32_cliff."""
    module = "tests.grokbench.test_audit_cli"
    assert cli.main(["audit", f"{module}:fixed_{name}", "--dtypes", dtype, "--quick"]) == 0
    assert f"as {kind} " in capsys.readouterr().out


@pytest.mark.slow  # the naive loss is a second audit's programs; the fast sibling is above
@pytest.mark.parametrize(("name", "kind", "dtype", "cliff"), _OPTIONS)
def test_options_pass_ours_and_fail_the_naive_ones_past_their_cliffs(
    capsys, name, kind, dtype, cliff
):
    # issue 31: the naive z-loss CE collapses at the dtype's cliff (q_t rounds to 1 and
    # 1 + 2 w lse to 1); the soft-capped standard CE where the capped margin reaches it,
    # m = 30 atanh(16.6355 / 30) = 18.746 in fp32. The audit names where the gradient is 0
    # for good: with fused multiply-add it is also 0 at scattered margins below (the
    # capped logit minus the max is a rounding residual, not 0), which a bisection for
    # the first zero can land on (m = 18.70459 natively on the machine this was first
    # recorded on); tests/numerics/test_check_zero_search.py checks the search itself.
    module = "tests.grokbench.test_audit_cli"
    fixed = "fixed_" + name
    assert cli.main(["audit", f"{module}:{fixed}", "--dtypes", dtype, "--quick"]) == 0
    assert f"as {kind} " in capsys.readouterr().out
    naive = ("naive_" if kind == "z-loss" else "standard_") + name
    assert cli.main(["audit", f"{module}:{naive}", "--dtypes", dtype, "--quick"]) == 1
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL ")]
    assert any(cliff in line for line in fails), fails


def test_linear_cross_entropy_audits_as_linear_ce(capsys):
    spec = "numerics:linear_cross_entropy"
    assert cli.main(["audit", spec, "--dtypes", "bf16", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "as linear-ce (fn(hidden, weight, labels)" in out and "optax on hidden @ weight" in out


@pytest.mark.slow  # the library check is in the default run (tests/numerics/test_divergence.py)
def test_kl_passes_ours_and_fails_optax_at_the_teacher(capsys):
    # issue 32: optax's kl_divergence(log_softmax(z_S), softmax(z_T)) is not 0 at z_S = z_T
    # and loses every digit near it (KL ~ |z_S - z_T|^2); ours is exact there.
    assert cli.main(["audit", "numerics:kl_divergence", "--dtypes", "bf16", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "as kl (fn(student_logits, teacher_logits)" in out
    assert "value, grad at student=teacher  exactly 0" in out
    spec = "numerics.standard:kl_divergence"
    assert cli.main(["audit", spec, "--dtypes", "bf16", "--quick"]) == 1
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL ")]
    assert any("at student = teacher" in line and "not exactly 0" in line for line in fails)
    assert any(line.startswith("FAIL bfloat16 value:") for line in fails), fails


@pytest.mark.slow  # the float8 checks run by default in tests/numerics/test_float8.py
def test_float8_dtypes_pass_ours_and_name_optax_collapse(capsys):
    # issue 32: float8 as storage. optax computes as JAX does (float16 per operation,
    # rounded to float8), so e^-m is rounded before 1 is added: in e5m2 its target gradient
    # is 0 from m = 2, the last value below p ln 2 = 2.079.
    assert cli.main(["audit", "numerics:cross_entropy", "--dtypes", "e5m2", "--quick"]) == 0
    assert "float8_e5m2: " in capsys.readouterr().out
    spec = "optax:softmax_cross_entropy_with_integer_labels"
    assert cli.main(["audit", spec, "--dtypes", "float8_e5m2", "--quick"]) == 1
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL ")]
    assert fails[0].startswith("FAIL float8_e5m2 target gradient: exactly 0 from m=2 ")
