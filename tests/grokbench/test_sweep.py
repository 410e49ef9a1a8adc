"""`grokbench sweep`: resume after SIGKILL, damaged files redone, the lock, bad grids, the
sweep table and determinism (sharded vs single-device results: test_engine.py).

The sweep is fig4's own code path, shrunk (p = 7, the MLP): 3 eps x 2 seeds in units of 2,
so a kill can land between units. Subprocesses inherit the 2 host devices of conftest.py
and share a JAX compilation cache (compiling dominates these tests; the cached program is
the same executable, so results stay bitwise identical).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from grokbench import cli, engine, sweep
from grokbench.store import load_metrics

SHRINK = ["p=7", "d_model=8", "n_heads=2", "eval_every=50", "weight_decay=1"]
# On the MLP: the sweep's path (grid, units, store, lock, table) is the same for either model,
# and the MLP's program compiles in about a third of the transformer's time (as
# tests/grokbench/test_cli.py's run; tests/grokbench/test_engine.py trains the transformer).
SHRINK += ["model=mlp", "mlp_width=16"]
# 2,400 steps: a unit takes ~60 ms once compiled, as the transformer's 600 steps did, so the
# kill of test_resume_after_sigkill_matches_uninterrupted still lands between units.
GRID = ["fig4", *SHRINK, "steps=2400", "eps=1e-4,1e-8,0", "seeds=2", "--batch", "2"]
N_RUNS = 6


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        return exc.code


def _sweep_argv(out, grid=GRID):
    return ["sweep", *grid, "--out", str(out), "--no-progress"]


def _subprocess(argv):
    # It inherits the session's compilation cache (conftest.py): the programs `reference`
    # compiled are loaded, not compiled again.
    return subprocess.Popen(
        [sys.executable, "-m", "grokbench.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _runs(out):
    """config hash -> (metrics, summary without the per-call fields)."""
    runs = {}
    for path in sorted((out / "runs").iterdir()):
        summary = json.loads((path / "summary.json").read_text())
        summary.pop("seconds")
        runs[path.name] = (load_metrics(path), summary)
    return runs


def _assert_identical(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        (ma, sa), (mb, sb) = a[key], b[key]
        assert sa == sb, key
        assert ma.keys() == mb.keys()
        for name in ma:
            np.testing.assert_array_equal(ma[name], mb[name], err_msg=f"{key} {name}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "ref"
    assert _main(_sweep_argv(out)) == 0
    return out


def test_sweep_directory_layout_and_table(reference, capsys):
    pd = pytest.importorskip("pandas")
    assert sorted(p.name for p in reference.iterdir()) == [
        "runs",
        "summary.json",
        "sweep.csv",
        "sweep.lock",
    ]
    runs = json.loads((reference / "summary.json").read_text())["runs"]
    assert len(runs) == N_RUNS and len(list((reference / "runs").iterdir())) == N_RUNS
    table = pd.read_csv(reference / "sweep.csv")
    assert len(table) == N_RUNS and table["config_hash"].is_unique
    assert list(table["eps"]) == [r["config"]["eps"] for r in runs]
    assert list(table["seed"]) == [0, 1] * 3
    np.testing.assert_array_equal(table["final_margin"], [r["final_margin"] for r in runs])
    for row in table.itertuples():
        assert (reference / row.run_dir / "metrics.npz").is_file()


@pytest.mark.bitwise
def test_resume_after_sigkill_matches_uninterrupted(reference, tmp_path):
    out = tmp_path / "killed"
    proc = _subprocess(_sweep_argv(out))
    deadline = time.monotonic() + 120
    while not list(out.glob("runs/*/summary.json")):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the sweep never finished a run"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("runs/*/summary.json")}
    assert 0 < len(finished) < N_RUNS, "the kill should land mid-sweep"
    assert not (out / "summary.json").exists()

    again = _subprocess(_sweep_argv(out))
    assert again.wait(timeout=300) == 0, again.stderr.read()
    again.stderr.close()
    _assert_identical(_runs(out), _runs(reference))
    for name, mtime in finished.items():  # finished runs were kept, not rewritten
        assert (out / "runs" / name / "summary.json").stat().st_mtime_ns == mtime
    assert not list(out.glob("runs/*/.*.tmp"))
    assert len(json.loads((out / "summary.json").read_text())["runs"]) == N_RUNS


def test_damaged_result_files_are_detected_and_redone(reference, tmp_path, monkeypatch):
    out = tmp_path / "damaged"
    shutil.copytree(reference, out)
    a, b, c = sorted((out / "runs").iterdir())[:3]
    npz = (a / "metrics.npz").read_bytes()
    (a / "metrics.npz").write_bytes(npz[: len(npz) // 2])  # truncated
    text = (b / "summary.json").read_text()
    (b / "summary.json").write_text(text[: len(text) // 2])  # truncated
    (c / ".metrics.npz.abc.tmp").write_bytes(b"half a write")  # a killed atomic write
    untouched = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/metrics.npz")}
    trained = []
    real_train = engine.train
    monkeypatch.setattr(
        engine, "train", lambda cfgs, **kw: trained.append(cfgs) or real_train(cfgs, **kw)
    )

    assert _main(_sweep_argv(out)) == 0
    _assert_identical(_runs(out), _runs(reference))
    assert 1 <= len(trained) <= 2 and all(len(unit) == 2 for unit in trained)
    rewritten = {p for p, t in untouched.items() if p.stat().st_mtime_ns != t}
    assert rewritten == {a / "metrics.npz", b / "metrics.npz"}
    assert not (c / ".metrics.npz.abc.tmp").exists()


def test_same_seed_is_bitwise_identical_twice(reference, tmp_path):
    engine.clear_compiled()  # compile again from scratch
    out = tmp_path / "again"
    assert _main(_sweep_argv(out)) == 0
    _assert_identical(_runs(out), _runs(reference))


def test_rerun_trains_nothing_and_prints_the_table(reference, monkeypatch, capsys):
    monkeypatch.setattr(engine, "train", lambda *a, **k: pytest.fail("retrained a finished run"))
    assert _main(_sweep_argv(reference)) == 0
    out = capsys.readouterr().out
    assert "test_acc" in out and out.count("*") >= N_RUNS  # cached runs are starred
    assert "sweep.csv" in out


def test_a_second_sweep_on_the_same_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "busy"
    with sweep.lock(out):
        assert _main(_sweep_argv(out)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "in use by another sweep" in err[0] and str(os.getpid()) in err[0]
    assert not (out / "runs").exists()
    with sweep.lock(out):  # released on exit, even by the refused call
        pass


def test_lock_is_released_when_the_holder_dies(tmp_path):
    out = tmp_path / "dead"
    code = f"import time; from grokbench import sweep\nwith sweep.lock({str(out)!r}):\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code + "    print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "1"
    with pytest.raises(sweep.SweepBusy, match="in use"), sweep.lock(out):
        pass
    proc.kill()
    proc.wait()
    proc.stdout.close()
    with sweep.lock(out):
        pass


@pytest.mark.parametrize(
    "args, match",
    [
        (["fig4", "nope=1,2"], "unknown key 'nope'"),
        (["fig4", "eps="], "eps= lists no values"),
        (["fig4", "eps=1e-8,"], "an empty value in the list"),
        (["fig4", "eps=1e-8,-1e-4"], "eps must be >= 0, got -0.0001"),
        (["fig4", "precision=fp32,fp8"], "unknown precision"),
        (["fig4", "loss=fixed,softmax"], "loss must be one of"),
        (["fig4", "seeds=1,2"], "seeds='1,2': expected a positive int"),
        (["fig9"], "unknown recipe 'fig9'"),
        (["fig4", "--batch", "0"], "--batch must be >= 1"),
        (["fig4", "--ray-address", "auto"], "--ray-address needs --executor ray"),
        (["fig4", "--executor", "dask"], "invalid choice: 'dask'"),
    ],
)
def test_invalid_grids_exit_2_with_one_line(args, match, tmp_path, capsys):
    out = tmp_path / "bad"
    assert _main(["sweep", *args, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and match in lines[0], captured.err
    assert not out.exists()


def test_sweep_needs_out(capsys):
    assert _main(["sweep", "fig4"]) == 2
    assert "--out" in capsys.readouterr().err
