"""`--executor ray` against a local Ray instance: the same stored results as the local executor.

Skipped only where Ray cannot be imported (it is the optional extra `grokbench[ray]`, which
the test extra installs). Ray starts 1 CPU (one worker runs both tasks; its start-up, not the
training, is the cost) without its dashboard; its workers inherit this process's XLA_FLAGS,
so they compile the same 2-device program and agree bit for bit. 20 steps: compile time, not
training, is what the runs cost.
"""

import importlib.util
import json

import jax
import numpy as np
import pytest

from grokbench import engine, executors, sweep
from grokbench.store import load_metrics

GRID = ["p=7", "d_model=8", "n_heads=2", "steps=20", "eval_every=10", "weight_decay=1"]
GRID += ["progress_measures=false"]  # their compile time; tests/grokbench/test_fourier.py
GRID += ["eps=1e-4,0", "seeds=2"]  # 4 runs of one shape: 2 units of 2, one Ray task each


def _stored(out):
    runs = {}
    for path in sorted((out / "runs").iterdir()):
        summary = json.loads((path / "summary.json").read_text())
        summary.pop("seconds")
        runs[path.name] = (load_metrics(path), summary)
    return runs


# Ray spawns its processes with a preexec_fn, which runs JAX's at-fork warning hook (the
# children exec at once); in `grokbench sweep` Ray starts before JAX's backends, so never.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.slow  # starting Ray takes a minute of a 2-core CPU; the local executor stays fast
def test_ray_executor_matches_local(tmp_path):
    pytest.importorskip("ray")
    configs = sweep.expand_grid("fig4", GRID)
    local = sweep.run_sweep(configs, tmp_path / "local", max_batch=2, progress=False)
    ray_exec = executors._RayExecutor(num_cpus=1)
    remote = sweep.run_sweep(
        configs, tmp_path / "ray", executor=ray_exec, max_batch=2, progress=False
    )
    assert [s["config"] for s in remote] == [s["config"] for s in local]
    a, b = _stored(tmp_path / "local"), _stored(tmp_path / "ray")
    assert sorted(a) == sorted(b) and len(a) == 4
    for key, (metrics, summary) in a.items():
        assert b[key][1] == summary
        for name, column in metrics.items():
            np.testing.assert_array_equal(b[key][0][name], column, err_msg=f"{key} {name}")
    import ray

    assert not ray.is_initialized()  # the executor shut down the instance it started


def test_local_executor_reports_run_steps():
    configs = sweep.expand_grid("fig4", GRID)[:2]
    seen = []
    (outputs,) = list(executors.LocalExecutor().map([configs], on_steps=seen.append))
    assert [o.config for o in outputs] == configs
    assert sum(seen) == 2 * 20


def test_ray_is_an_optional_import():
    assert executors._ray_available() == (importlib.util.find_spec("ray") is not None)
    assert executors.EXECUTORS == ("local", "ray")


def _side_by_side(monkeypatch, units):
    """The local executor's outputs of `units` and the default device each unit ran under."""
    devices = {}
    train = engine.train

    def spy(unit, **kw):
        devices[unit[0]] = jax.config.jax_default_device
        return train(unit, **kw)

    monkeypatch.setattr(engine, "train", spy)
    seen = []
    outputs = list(executors.LocalExecutor().map(units, on_steps=seen.append))
    return outputs, devices, seen


def test_single_run_units_train_side_by_side_with_the_same_bits(monkeypatch):
    """Two single-run units go to the two host devices (tests/conftest.py) in two threads;
    each stores exactly what it gives alone on the default device."""
    configs = sweep.expand_grid("fig4", GRID)[:2]  # eps 1e-4 and 0, seed 0: one unit each
    outputs, devices, seen = _side_by_side(monkeypatch, [[c] for c in configs])
    assert sorted(devices.values(), key=lambda d: d.id) == jax.local_devices()
    assert sum(seen) == 2 * 20
    by_config = {o.config: o for (o,) in outputs}
    assert set(by_config) == set(configs)
    for cfg in configs:
        (alone,) = executors.LocalExecutor(parallel=False).map([[cfg]])
        for name, column in alone[0].metrics.items():
            np.testing.assert_array_equal(by_config[cfg].metrics[name], column, err_msg=name)


def test_an_error_in_one_thread_is_raised_in_the_caller(monkeypatch):
    configs = sweep.expand_grid("fig4", GRID)[:2]

    def fail(unit, **kw):
        raise RuntimeError(f"unit {unit[0].eps} failed")

    monkeypatch.setattr(engine, "train", fail)
    with pytest.raises(RuntimeError, match="failed"):
        list(executors.LocalExecutor().map([[c] for c in configs]))
