"""Distillation (fig7): a shrunken recipe end to end; the fixed student never leaves its teacher.

fig7's own code path, shrunk: p = 7, width 8, a 50-step teacher, 10 student steps, in the
recipe's bf16 column (fp32/bf16: bf16 compute on float32 weights), the configuration
tests/figures/test_figures.py's fig7 test trains too, so the two share compiled programs.
"""

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from grokbench import cli, distill, experiment, recipes, store
from grokbench.config import (
    ADDED_FIELDS,
    CONFIG_VERSION,
    ConfigError,
    RunConfig,
    config_hash,
    identity,
)
from grokbench.precision import get_precision

SHRINK = ["p=7", "d_model=8", "n_heads=2", "steps=10", "teacher_steps=50"]
CONTRACT = {"kl_final", "kl_max", "max_param_distance", "residual_gradient"}


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def _config(summary) -> RunConfig:
    return RunConfig(**summary["config"])


@pytest.mark.slow
def test_shrunken_fig7(tmp_path, capsys):
    # One test, not a module fixture shared by several: under `pytest -n 2` each worker
    # would train the shrunken recipe again. The default run trains the same shrunken fig7
    # (teacher, fixed / standard soft-target and KL students, fp32/bf16) through the figure
    # build instead: tests/figures/test_claims.py, the real shrunken distillation.
    argv = ["run", "fig7", *SHRINK, "precision=fp32/bf16", "--results", str(tmp_path / "store")]
    assert _main([*argv, "--out", str(tmp_path), "--no-progress"]) == 0
    runs = json.loads((tmp_path / "summary.json").read_text())["runs"]
    s = store.Store(tmp_path / "store")
    by_loss = {(r["config"]["loss"], r["config"]["distill_objective"]): r for r in runs}
    assert set(by_loss) == {("fixed", "soft_target"), ("standard", "soft_target"), ("fixed", "kl")}
    for run in runs:
        _check_contract(run)
    _check_fixed(s, by_loss["fixed", "soft_target"])
    _check_fixed(s, by_loss["fixed", "kl"])  # KL(p || q) as the loss: exact at the teacher too
    _check_standard(s, by_loss["standard", "soft_target"])
    _check_teacher(s, _config(by_loss["fixed", "soft_target"]))
    capsys.readouterr()
    assert _main([*argv, "--no-progress"]) == 0  # everything cached now
    table = capsys.readouterr().out
    assert "kl_final" in table and "residual" in table
    *rows, footer = [line for line in table.splitlines()[1:] if line.strip()]
    assert len(rows) == 3 and all(row.rstrip().endswith("*") for row in rows)
    assert footer.startswith("* loaded from the store")


def _check_contract(run):
    assert CONTRACT <= set(run)
    assert {"config", "test_accuracy", "train_accuracy", "final_margin", "steps"} <= set(run)
    config = run["config"]
    assert (config["p"], config["steps"], config["teacher_steps"]) == (7, 10, 50)
    assert (config["optimizer"], config["lr"], config["weight_decay"]) == ("adam", 2e-3, 0.0)
    assert config["temperature"] == 4.0 and config["precision"] == "fp32/bf16"
    assert 0.0 <= run["test_accuracy"] <= 1.0


def _check_fixed(s, fixed):
    assert fixed["residual_gradient"] == 0.0
    assert fixed["kl_final"] == fixed["kl_max"] == fixed["max_param_distance"] == 0.0
    assert fixed["test_accuracy"] == fixed["teacher_test_accuracy"] == fixed["min_test_accuracy"]
    m = store.load_metrics(s.run_dir(_config(fixed)))
    for name in ("kl", "test_kl", "logit_grad_max", "param_distance", "adam_step"):
        assert not np.any(m[name]), name
    # Bit-identical to the teacher: the student's final weights (rerun: the program is
    # compiled already) against the teacher's, in the student's parameter dtype.
    cfg = _config(fixed)
    teacher = s.load_params(distill.teacher_config(cfg))
    (out,) = distill._train([cfg], [teacher], progress=False)
    dtype = get_precision(cfg.precision).param_dtype
    assert set(out.params) == set(teacher)
    for name, x in out.params.items():
        assert x.dtype == dtype, name
        want = teacher[name].astype(dtype)
        bits = f"u{np.dtype(dtype).itemsize}"
        np.testing.assert_array_equal(x.view(bits), want.view(bits), err_msg=name)


def _check_standard(s, standard):
    # bf16's residual is a few ulps of a probability (~1e-3); Adam makes it a step of ~lr.
    assert 1e-4 < standard["residual_gradient"] < 1e-1
    assert standard["max_param_distance"] > 1e-3 and standard["kl_max"] > 0
    m = store.load_metrics(s.run_dir(_config(standard)))
    assert set(m) == {"step", "test_step", *distill._DISTILL_METRICS}
    for name, column in m.items():
        assert column.shape == (10,), name
    np.testing.assert_array_equal(m["test_step"], np.arange(10))
    assert m["kl"].dtype == np.float64
    assert m["kl"][0] == 0.0 and m["param_distance"][0] == 0.0  # z_S = z_T at step 0 exactly
    assert m["adam_step"][0] > 0.1  # the residual, normalized by Adam to an O(1) direction
    assert np.all(m["param_distance"][1:] > 0)
    assert s.metrics_ok(_config(standard))


def _check_teacher(s, student):
    teacher = distill.teacher_config(student)
    assert teacher.teacher_steps == 0 and teacher.steps == 50 and teacher.precision == "fp32"
    assert (teacher.optimizer, teacher.loss, teacher.eval_every) == ("adamw", "fixed", 50)
    assert s.load_summary(teacher)["steps"] == 50
    assert s.load_params(teacher) is not None


def test_recipe_grid_and_overrides():
    fig7 = recipes.get_recipe("fig7")
    runs = recipes.expand(fig7)
    assert [(c.precision, c.loss, c.distill_objective) for c in runs] == [
        (p, loss, "soft_target")
        for p in ("fp32/bf16", "fp32", "fp64")
        for loss in ("fixed", "standard")
    ] + [(p, "fixed", "kl") for p in ("fp32/bf16", "fp32", "fp64")]
    assert all(c.teacher_steps == 5000 and c.steps == 2000 and c.p == 53 for c in runs)
    picked = recipes.expand(fig7, {"precision": ("fp64",), "loss": ("standard",)})
    assert [(c.precision, c.loss, c.distill_objective) for c in picked] == [
        ("fp64", "standard", "soft_target"),
        ("fp64", "standard", "kl"),
    ]
    assert all(c.steps == 200 for c in recipes.expand(fig7, quick=True))


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"temperature": 2.0}, "distillation runs only"),
        ({"distill_objective": "kl"}, "distillation runs only"),
        ({"teacher_steps": 10, "eval_every": 1, "distill_objective": "js"}, "distill_objective"),
        ({"teacher_steps": -1}, "teacher_steps"),
        ({"teacher_steps": 10, "eval_every": 1, "loss": "stablemax"}, "soft-target"),
        ({"teacher_steps": 10, "eval_every": 10, "steps": 100}, "eval_every must be 1"),
        ({"teacher_steps": 10, "eval_every": 1, "temperature": 0.0}, "temperature"),
    ],
)
def test_invalid_distill_configs_raise(changes, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig(**changes)


def _hash_without_added_fields(cfg: RunConfig) -> str:
    """The hash a config had before any `ADDED_FIELDS` existed (at the current version)."""
    fields = {k: v for k, v in cfg.to_dict().items() if k not in ADDED_FIELDS}
    payload = json.dumps({"version": CONFIG_VERSION, **fields}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def test_distill_fields_leave_existing_hashes_alone():
    # At CONFIG_VERSION 1, before the distillation fields existed (67012bc), these were
    # 6c8d53cb8e9206cc and 1df5c1957957e432: fields added at their default change no hash.
    assert config_hash(RunConfig()) == _hash_without_added_fields(RunConfig())
    table1_last = recipes.expand(recipes.get_recipe("table1"))[-1]
    assert config_hash(table1_last) == _hash_without_added_fields(table1_last)
    student = RunConfig(teacher_steps=100, eval_every=1, steps=100)
    assert config_hash(student) != config_hash(dataclasses.replace(student, temperature=2.0))
    kl = dataclasses.replace(student, distill_objective="kl")
    assert "distill_objective" not in identity(student) and config_hash(student) != config_hash(kl)


def test_format_table_shows_the_distill_columns():
    summary = {
        "config": RunConfig(teacher_steps=100, eval_every=1, steps=100).to_dict(),
        "residual_gradient": 1e-3,
        "kl_final": 1e-6,
        "kl_max": 1e-5,
        "max_param_distance": 0.1,
        "test_accuracy": 1.0,
        "min_test_accuracy": 0.9,
        "seconds": 1.0,
    }
    header = experiment._format_table([summary]).splitlines()[0].split()
    assert header == "seed residual kl_final kl_max max_dist test_acc min_acc sec".split()
