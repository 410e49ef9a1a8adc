"""`grokbench slingshot DIR` and `describe_spikes`: each spike's step, height, and the margin
and past-cliff fraction it launched from, on a fabricated run with known spikes."""

import dataclasses

import numpy as np
import pytest

from grokbench import cli, experiment, metrics, slingshot
from grokbench.config import RunConfig
from grokbench.store import Store
from grokbench.summary import summarize

N = 3000
CFG = RunConfig(loss="standard", steps=N, eval_every=100)
SPIKES = (1200, 2400)


def _run(spikes=SPIKES):
    """Loss on a 3e-7 floor after memorization (step 200), margins 15.6 with 15% past the
    cliff, and at each spike the loss jumping to 0.4 over 3 steps while margins collapse."""
    t = np.arange(N)
    loss = np.maximum(3.0 * np.exp(-t / 15.0), 3e-7)
    margin = np.minimum(-3.0 + t * 0.1, 15.6)
    past = np.where(margin > 15.0, 0.15, 0.0)
    for at in spikes:
        loss[at - 2 : at + 1] = [3e-6, 4e-5, 0.4]
        loss[at + 1 : at + 40] = np.geomspace(0.1, 1e-6, 39)
        margin[at : at + 40] = 10.0
        past[at : at + 40] = 0.0
    cols = {name: np.full(N, 0.5, np.float32) for name in metrics.STEP_METRICS}
    cols.update(
        train_ce=loss.astype(np.float32),
        train_acc=np.where(t >= 200, 1.0, 0.5).astype(np.float32),
        margin_mean=margin.astype(np.float32),
        margin_median=(margin - 0.2).astype(np.float32),
        frac_past_cliff=past.astype(np.float32),
    )
    n_tests = N // CFG.eval_every
    return {
        "step": t,
        **cols,
        "test_step": CFG.eval_every * np.arange(1, n_tests + 1),
        "test_loss": np.zeros(n_tests, np.float32),
        "test_acc": np.ones(n_tests, np.float32),
    }


def test_describe_spikes():
    spikes = slingshot.describe_spikes(_run())
    assert [s.step for s in spikes] == list(SPIKES)
    for s in spikes:
        assert s.launch_step == s.step - 3  # the last step on the 3e-7 floor
        assert s.peak_loss == pytest.approx(0.4)
        assert s.height == pytest.approx(np.log10(0.4 / 3e-7), abs=1e-3)
        assert s.margin_before == pytest.approx(15.6, abs=1e-5)
        assert s.median_margin_before == pytest.approx(15.4, abs=1e-5)
        assert s.past_cliff_before == pytest.approx(0.15)
    assert slingshot.describe_spikes(_run(spikes=())) == []


def test_slingshot_cli(tmp_path, capsys):
    store = Store(tmp_path)
    summaries = []
    for cfg, m in [(CFG, _run()), (dataclasses.replace(CFG, loss="fixed"), _run(spikes=()))]:
        summary = summarize(cfg, m, 1.0)
        store.save(cfg, m, summary)
        summaries.append({**summary, "run_dir": str(store.run_dir(cfg))})
    assert [s["spikes"] for s in summaries] == [2, 0]  # summary.json counts them
    experiment.write_out(tmp_path, summaries)

    assert cli.main(["slingshot", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == [
        "loss",
        "seed",
        "spike",
        "step",
        "peak_loss",
        "decades",
        "margin",
        "median",
        "past_cliff",
        "cliff",
    ]
    assert lines[1].split() == [
        "standard",
        "0",
        "1/2",
        "1200",
        "4.00e-01",
        "6.1",
        "15.60",
        "15.40",
        "0.150",
        "16.64",
    ]
    assert lines[2].split()[2:4] == ["2/2", "2400"]
    assert lines[3].split() == ["fixed", "0", "0", "-", "-", "-", "-", "-", "-", "16.64"]
    assert lines[-1].startswith("2 spikes in 2 runs.")


def test_slingshot_cli_without_runs(tmp_path, capsys):
    assert cli.main(["slingshot", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no runs in" in err[0]
