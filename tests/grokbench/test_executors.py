"""`--executor ray` against a local Ray instance: the same stored results as the local executor.

Skipped only where Ray cannot be imported (it is the optional extra `grokbench[ray]`, which
the test extra installs). Ray starts 1 CPU (one worker runs both tasks; its start-up, not the
training, is the cost) without its dashboard; its workers inherit this process's XLA_FLAGS,
so they compile the same 2-device program and agree bit for bit. 20 steps: compile time, not
training, is what the runs cost.
"""

import importlib.util
import json

import numpy as np
import pytest

from grokbench import executors, sweep
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


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_local_executor_reports_run_steps():
    # On the MLP: the executor's path is the same for either model, and the MLP's program
    # compiles in about a third of the transformer's time (as tests/grokbench/test_sweep.py's).
    configs = sweep.expand_grid("fig4", [*GRID, "model=mlp", "mlp_width=16"])[:2]
    seen = []
    (outputs,) = list(executors.LocalExecutor().map([configs], on_steps=seen.append))
    assert [o.config for o in outputs] == configs
    assert sum(seen) == 2 * 20


def test_ray_is_an_optional_import():
    assert executors._ray_available() == (importlib.util.find_spec("ray") is not None)
    assert executors.EXECUTORS == ("local", "ray")
