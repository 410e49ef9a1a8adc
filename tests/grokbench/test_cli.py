"""`grokbench run`: a shrunken real recipe end to end (nanodo style), the summary.json contract,
caching across invocations, and one-line errors with exit status 2."""

import json
import subprocess
import sys

import pytest

from grokbench import cli, engine

# fig2-top's own code path, shrunk: p = 7 (24 training examples), width 8, 30 steps.
SHRINK = ["p=7", "d_model=8", "n_heads=2", "steps=30", "eval_every=10", "seeds=3"]
SHRINK += ["progress_measures=false"]  # their compile time; tests/grokbench/test_fourier.py
# On the MLP: the command's path (recipe, overrides, engine, store, summary) is the same for
# either model, and the MLP's two programs compile in about a third of the transformer's time
# (tests/grokbench/test_engine.py trains the transformer).
SHRINK += ["model=mlp", "mlp_width=16"]
RUN_FIELDS = {
    "config",
    "test_accuracy",
    "train_accuracy",
    "final_margin",
    "max_train_loss_after_memorization",
    "spikes",
    "steps",
    "seconds",
}


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        return exc.code


@pytest.fixture(scope="module")
def shrunken_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    argv = ["run", "fig2-top", *SHRINK, "--results", str(root / "store"), "--out", str(root)]
    assert _main([*argv, "--no-progress"]) == 0
    return argv, json.loads((root / "summary.json").read_text())


def test_summary_json_contract(shrunken_run):
    _, summary = shrunken_run
    runs = summary["runs"]
    assert set(summary) == {"runs"} and len(runs) == 6  # fixed, standard x 3 seeds
    assert [(r["config"]["loss"], r["config"]["seed"]) for r in runs] == [
        (loss, s) for loss in ("fixed", "standard") for s in range(3)
    ]
    for run in runs:
        assert RUN_FIELDS <= set(run)
        config = run["config"]
        assert all(not isinstance(v, dict | list) for v in config.values())  # flat
        assert (config["p"], config["steps"], config["eps"]) == (7, 30, 1e-8)
        for key in ("test_accuracy", "train_accuracy"):
            assert 0.0 <= run[key] <= 1.0
        assert isinstance(run["final_margin"], float)
        loss_after = run["max_train_loss_after_memorization"]
        assert loss_after is None or loss_after > 0
        assert isinstance(run["spikes"], int) and run["spikes"] >= 0
        assert run["steps"] == 30 and run["seconds"] > 0


def test_second_invocation_loads_from_the_store(shrunken_run, monkeypatch, capsys, tmp_path):
    argv, first = shrunken_run

    def no_training(*args, **kwargs):
        raise AssertionError("a finished config was retrained")

    monkeypatch.setattr(engine, "train", no_training)
    out = [*argv[: argv.index("--out")], "--out", str(tmp_path), "--no-progress"]
    assert _main(out) == 0
    again = json.loads((tmp_path / "summary.json").read_text())["runs"]
    assert all(r["cached"] for r in again)
    strip = [{k: v for k, v in r.items() if k != "cached"} for r in first["runs"]]
    assert [{k: v for k, v in r.items() if k != "cached"} for r in again] == strip
    assert "fixed" in capsys.readouterr().out  # the results table


@pytest.mark.parametrize(
    "argv, match",
    [
        (["run", "fig9"], "unknown recipe 'fig9'"),
        (["run", "fig2-top", "nope=1"], "unknown key 'nope'"),
        (["run", "fig2-top", "steps=ten"], "steps='ten': expected int"),
        (["run", "fig2-top", "eps=-1e-8"], "eps must be >= 0"),
        (["run", "fig2-top", "precision=fp8"], "unknown precision"),
        (["run", "fig2-top", "loss=softmax"], "loss must be one of"),
        (["run", "fig2-top", "seeds=0"], "seeds must be >= 1"),
        (["run", "fig2-top", "seed=-1"], "seed must be >= 0"),
        (["run", "fig2-top", "split_seed=-2"], "split_seed must be >= 0"),
        (["run", "fig2-top", "p=0"], "p must be in [2"),
        (["run", "fig2-top", "mlp_width=0"], "mlp_width must be >= 1"),
        (["run", "fig2-top", "steps"], "expected key=value"),
        (["run", "fig2-top", "--bogus"], "unrecognized arguments: --bogus"),
        (["recipes", "extra"], "unrecognized arguments: extra"),
        (["run", "fig2-top", "--chunk", "0"], "--chunk must be >= 1"),
        (["run"], "required"),
    ],
)
def test_errors_exit_2_with_one_line(argv, match, capsys):
    assert _main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], captured.err
    assert "Traceback" not in captured.err


def test_console_script_error_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "grokbench.cli", "run", "fig2-top", "lr=fast"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "grokbench run: error: lr='fast': expected float"


def test_recipes_lists_every_recipe(capsys):
    assert _main(["recipes"]) == 0
    out = capsys.readouterr().out
    for name in ("fig2-top", "fig2-bottom", "table1", "fig4", "fig6-mod113", "fig6-cube", "quant"):
        assert name in out


def test_overrides_may_follow_options(monkeypatch, tmp_path):
    from grokbench import experiment

    seen = []

    def fake_run_configs(configs, store, **kwargs):
        seen.extend(configs)
        return []

    monkeypatch.setattr(experiment, "run_configs", fake_run_configs)
    monkeypatch.setattr(experiment, "_format_table", lambda summaries: "")
    argv = ["run", "fig2-top", "loss=fixed", "--quick", "seeds=2", "--results", str(tmp_path)]
    assert _main([*argv, "eps=1e-12"]) == 0
    assert [(c.loss, c.seed, c.eps, c.steps) for c in seen] == [
        ("fixed", 0, 1e-12, 3000),
        ("fixed", 1, 1e-12, 3000),
    ]
