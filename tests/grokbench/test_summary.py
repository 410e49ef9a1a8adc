"""grokbench.summary: one rule per kind of run, and stale summaries rebuilt from the metrics."""

import json

import numpy as np

from grokbench import distill, summary, versions
from grokbench.config import RunConfig
from grokbench.store import Store

STUDENT = RunConfig(teacher_steps=10, eval_every=1, steps=6)
PLAIN = RunConfig(p=7, steps=20, eval_every=10)


def _student_metrics(n: int) -> dict[str, np.ndarray]:
    """Plausible distillation columns: KL and drift growing from 0, accuracy dropping."""
    cols = {name: np.linspace(0.0, 1.0, n) for name in distill._DISTILL_METRICS}
    cols["kl"] = np.array([0.0, 1e-9, 3e-8, 2e-7, 1e-7, 5e-8])[:n]
    cols["logit_grad_max"] = np.geomspace(3e-4, 1e-2, n)
    cols["test_acc"] = np.linspace(1.0, 0.8, n)
    step = np.arange(n)
    return {"step": step, "test_step": step, **cols}


def test_each_kind_of_run_has_its_version():
    assert summary._summary_version(STUDENT) == versions.DISTILL_SUMMARY_VERSION
    assert summary._summary_version(PLAIN) == versions.SUMMARY_VERSION
    for cfg in (STUDENT, PLAIN):
        assert summary._is_current({"summary_version": summary._summary_version(cfg)}, cfg)
        assert not summary._is_current({}, cfg)
        assert not summary._is_current({"summary_version": -1}, cfg)


def test_a_distillation_summary_reads_its_own_metrics():
    m = _student_metrics(STUDENT.steps)
    s = summary.summarize(STUDENT, m, 2.5, "cpu")
    assert s["summary_version"] == versions.DISTILL_SUMMARY_VERSION
    assert s["spikes"] is None and s["max_train_loss_after_memorization"] is None
    assert "spike_steps" not in s and "key_frequencies" not in s
    assert s["kl_final"] == 5e-8 and s["kl_max"] == 2e-7
    assert s["residual_gradient"] == m["logit_grad_max"][0]
    assert s["teacher_test_accuracy"] == 1.0 and s["test_accuracy"] == 0.8
    assert s["min_test_accuracy"] == 0.8 and s["max_param_distance"] == 1.0
    assert (s["steps"], s["seconds"], s["backend"]) == (STUDENT.steps, 2.5, "cpu")
    # A student's final parameters add nothing: the update balance needs weight decay.
    assert summary.summarize(STUDENT, m, 2.5, "cpu", params={"w": np.ones(3)}) == s


def test_a_stale_distillation_summary_is_rebuilt_and_written_back(tmp_path):
    store = Store(tmp_path)
    m = _student_metrics(STUDENT.steps)
    current = summary.summarize(STUDENT, m, 2.5, "cpu")
    store.save(STUDENT, m, {**current, "summary_version": 0, "kl_final": 99.0})
    want = json.loads(json.dumps(current))
    assert summary.load(store, STUDENT) == want
    path = store.run_dir(STUDENT) / "summary.json"
    assert json.loads(path.read_text()) == want
    assert summary.load(store, STUDENT) == want  # now current: read as it is


def test_a_run_without_whole_metrics_is_not_finished(tmp_path):
    store = Store(tmp_path)
    assert summary.load(store, STUDENT) is None  # never stored
    m = _student_metrics(STUDENT.steps)
    store.save(STUDENT, m, summary.summarize(STUDENT, m, 2.5))
    path = store.run_dir(STUDENT) / "metrics.npz"
    path.write_bytes(path.read_bytes()[:100])  # truncated
    assert summary.load(store, STUDENT) is None
