"""The results store: atomic writes, caching, resuming after an interruption (engine faked)."""

import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest

from grokbench import config, distill, engine, experiment, metrics, store, versions
from grokbench.config import RunConfig, config_hash
from tests.fakes import progress_columns

CFG = RunConfig(p=7, steps=20, eval_every=10)


def _fake_metrics(cfg):
    n = cfg.steps
    cols = {name: np.full(n, 0.5, np.float32) for name in metrics.STEP_METRICS}
    cols["train_acc"] = np.ones(n, np.float32)
    cols["train_ce"] = np.geomspace(1.0, 1e-6, n).astype(np.float32)
    return {
        "step": np.arange(n),
        **cols,
        "test_step": np.arange(1, n // cfg.eval_every + 1) * cfg.eval_every,
        "test_loss": np.zeros(n // cfg.eval_every, np.float32),
        "test_acc": np.full(n // cfg.eval_every, float(cfg.seed) / 10, np.float32),
        **progress_columns(cfg, n // cfg.eval_every),
    }


@pytest.fixture
def fake_train(monkeypatch):
    """Replace the engine with a fast fake; records each batch it is asked to train."""
    calls = []

    def train(configs, **kwargs):
        calls.append(list(configs))
        return [engine.RunOutput(c, _fake_metrics(c), 1.0) for c in configs]

    monkeypatch.setattr(engine, "train", train)
    return calls


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "a" / "f.json"
    store.atomic_write_json(path, {"x": 1})
    store.atomic_write_json(path, {"x": 2})
    assert json.loads(path.read_text()) == {"x": 2}
    assert os.listdir(path.parent) == ["f.json"]  # no temporary files left behind


def test_failed_write_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    store.atomic_write_json(path, {"x": 1})

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        store.atomic_write_json(path, {"x": 2})
    assert json.loads(path.read_text()) == {"x": 1}
    assert os.listdir(tmp_path) == ["f.json"]


def test_nan_is_not_written_as_json(tmp_path):
    with pytest.raises(ValueError):
        store.atomic_write_json(tmp_path / "f.json", {"x": float("nan")})


def test_run_dir_layout_and_roundtrip(tmp_path, fake_train):
    s = store.Store(tmp_path)
    (summary,) = experiment.run_configs([CFG], s, progress=False)
    run_dir = s.run_dir(CFG)
    assert run_dir == tmp_path / "runs" / config_hash(CFG)
    assert sorted(os.listdir(run_dir)) == ["config.json", "metrics.npz", "summary.json"]
    assert json.loads((run_dir / "config.json").read_text()) == CFG.to_dict()
    cols = store.load_metrics(run_dir)
    for name, col in _fake_metrics(CFG).items():
        np.testing.assert_array_equal(cols[name], col)
    assert summary["run_dir"] == str(run_dir) and summary["cached"] is False
    stored = json.loads((run_dir / "summary.json").read_text())
    assert stored == s.load_summary(CFG)
    assert "run_dir" not in stored and "cached" not in stored


def test_finished_runs_are_loaded_not_retrained(tmp_path, fake_train):
    s = store.Store(tmp_path)
    cfgs = [dataclasses.replace(CFG, seed=i) for i in range(3)]
    experiment.run_configs(cfgs[:2], s, progress=False)
    assert fake_train == [cfgs[:2]]
    out = experiment.run_configs(cfgs, s, progress=False)
    assert fake_train == [cfgs[:2], cfgs[2:]]  # only the new seed was trained
    assert [r["cached"] for r in out] == [True, True, False]
    assert [r["test_accuracy"] for r in out] == pytest.approx([0.0, 0.1, 0.2])


def test_interrupted_run_is_retrained(tmp_path, fake_train):
    s = store.Store(tmp_path)
    experiment.run_configs([CFG], s, progress=False)
    (s.run_dir(CFG) / "summary.json").unlink()  # as if killed before the last write
    assert s.load_summary(CFG) is None
    experiment.run_configs([CFG], s, progress=False)
    assert len(fake_train) == 2


def test_groups_batch_by_shape(tmp_path, fake_train):
    cfgs = [
        dataclasses.replace(CFG, seed=0),
        dataclasses.replace(CFG, seed=0, loss="standard"),
        dataclasses.replace(CFG, seed=1, eps=1e-12),
    ]
    experiment.run_configs(cfgs, store.Store(tmp_path), progress=False)
    assert fake_train == [[cfgs[0], cfgs[2]], [cfgs[1]]]


def test_old_summaries_are_rebuilt(tmp_path, fake_train):
    s = store.Store(tmp_path)
    experiment.run_configs([CFG], s, progress=False)
    path = s.run_dir(CFG) / "summary.json"
    old = json.loads(path.read_text())
    store.atomic_write_json(path, {**old, "summary_version": 0, "spikes": 99})
    (summary,) = experiment.run_configs([CFG], s, progress=False)
    assert summary["spikes"] == 0 and summary["summary_version"] == versions.SUMMARY_VERSION
    assert json.loads(path.read_text())["spikes"] == 0
    assert len(fake_train) == 1


def test_mismatched_config_in_run_dir_raises(tmp_path, fake_train):
    s = store.Store(tmp_path)
    experiment.run_configs([CFG], s, progress=False)
    path = s.run_dir(CFG) / "summary.json"
    summary = json.loads(path.read_text())
    summary["config"]["seed"] = 5
    path.write_text(json.dumps(summary))
    with pytest.raises(RuntimeError, match="different config"):
        s.load_summary(CFG)


def test_runs_stored_before_a_field_was_added_still_load(tmp_path, fake_train, monkeypatch):
    # A run stored before mlp_width existed: its hash and stored config lack the field.
    s = store.Store(tmp_path)
    old_config = {k: v for k, v in CFG.to_dict().items() if k != "mlp_width"}
    old_hash = hashlib.sha256(
        json.dumps({"version": config.CONFIG_VERSION, **old_config}, sort_keys=True).encode()
    ).hexdigest()[:16]
    monkeypatch.setattr(config, "ADDED_FIELDS", ("mlp_width",))  # ... then it was added
    assert config_hash(CFG) == old_hash
    experiment.run_configs([CFG], s, progress=False)
    path = s.run_dir(CFG) / "summary.json"
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "config": old_config}))
    assert s.load_summary(CFG) is not None
    wider = dataclasses.replace(CFG, mlp_width=CFG.mlp_width + 1)
    assert config_hash(wider) != old_hash and s.load_summary(wider) is None


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: {**c, "old_field": 3},  # a field removed since the run was stored
        lambda c: {**{k: v for k, v in c.items() if k != "lr"}, "learning_rate": c["lr"]},
        lambda c: {**c, "loss": "renamed_loss"},  # a value no longer valid
        lambda c: None,
    ],
    ids=["removed", "renamed", "bad-value", "not-a-dict"],
)
def test_run_stored_under_another_schema_is_stale_and_retrained(tmp_path, fake_train, caplog, edit):
    s = store.Store(tmp_path)
    experiment.run_configs([CFG], s, progress=False)
    path = s.run_dir(CFG) / "summary.json"
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "config": edit(summary["config"])}))
    with caplog.at_level("WARNING", logger="grokbench.store"):
        (again,) = experiment.run_configs([CFG], s, progress=False)
    assert len(fake_train) == 2 and again["cached"] is False  # trained again, no crash
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith(f"stale run {s.run_dir(CFG)}") and "\n" not in message
    assert json.loads(path.read_text())["config"] == CFG.to_dict()  # the new run replaced it


def test_from_stored_names_the_unknown_fields():
    with pytest.raises(config.ConfigError, match=r"does not know: \['old_field'\]"):
        config.from_stored({**CFG.to_dict(), "old_field": 1})
    assert config.from_stored(CFG.to_dict()) == CFG


def test_metrics_frame(tmp_path, fake_train):
    import pandas as pd  # in the test extra: this must run in CI, not skip

    s = store.Store(tmp_path)
    experiment.run_configs([CFG], s, progress=False)
    frame = store.metrics_frame(s.run_dir(CFG))
    assert isinstance(frame, pd.DataFrame) and len(frame) == CFG.steps
    assert frame["test_acc"].notna().sum() == 1  # test_step 10 is a training step, 20 is not


def test_distillation_and_engine_runs_split_in_one_call(tmp_path, fake_train, monkeypatch):
    """run_configs hands distillation runs to grokbench.distill (first) and the others to
    the engine, and answers in the order asked, whichever trained them."""
    student = RunConfig(p=7, teacher_steps=10, eval_every=1, steps=20)
    calls = []

    def run_students(configs, s, **kwargs):
        calls.append(list(configs))
        assert not fake_train  # students before the engine's runs
        return {cfg: {"config": cfg.to_dict(), "kl_final": 0.0} for cfg in configs}

    monkeypatch.setattr(distill, "run_students", run_students)
    other = dataclasses.replace(CFG, seed=1)
    out = experiment.run_configs([CFG, student, other, CFG], store.Store(tmp_path), progress=False)
    assert calls == [[student]] and fake_train == [[CFG, other]]
    assert [r["config"] for r in out] == [c.to_dict() for c in (CFG, student, other, CFG)]
    assert out[1]["kl_final"] == 0.0 and not any(r["cached"] for r in out)
