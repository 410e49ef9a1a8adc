"""The margin-equilibrium analyzer on fabricated margin curves: plateau found, not found,
eps = 0 flagged with where it stops; groups, equilibrium.json and `grokbench equilibrium`."""

import dataclasses
import json
import math

import jax
import numpy as np
import pytest

from grokbench import balance, cli, engine, equilibrium, experiment, metrics
from grokbench.config import RunConfig
from grokbench.store import Store
from grokbench.summary import summarize
from tasks import build_model

N = 4000
CFG = RunConfig(optimizer="laprop", track_sqrt_v=True, steps=N, eval_every=100)


def _approach(level, tau=300.0, start=-3.0, noise=0.02, seed=0):
    """A margin climbing from `start` and levelling off at `level` (time constant tau)."""
    t = np.arange(N)
    rng = np.random.default_rng(seed)
    return level - (level - start) * np.exp(-t / tau) + noise * rng.standard_normal(N)


def _climb(rate=10e-3, start=-3.0):
    """A margin still growing: `rate` nats per step."""
    return start + rate * np.arange(N)


def _metrics(margin):
    cols = {name: np.full(N, 0.5, np.float32) for name in metrics.STEP_METRICS}
    cols["margin_mean"] = margin.astype(np.float32)
    cols["train_acc"] = np.ones(N, np.float32)
    cols["train_ce"] = np.log1p(np.exp(-np.clip(margin, -50, 80))).astype(np.float32)
    n_tests = N // CFG.eval_every
    return {
        "step": np.arange(N),
        **cols,
        "test_step": CFG.eval_every * np.arange(1, n_tests + 1),
        "test_loss": np.zeros(n_tests, np.float32),
        "test_acc": np.ones(n_tests, np.float32),
    }


def test_plateau_found():
    verdict = equilibrium._plateau(_approach(18.42))
    assert verdict.plateaued and abs(verdict.drift) < equilibrium._PLATEAU_DRIFT
    assert verdict.value == pytest.approx(18.42, abs=0.02)
    # Within 0.5 of 18.42 once (18.42 + 3) e^(-t / 300) < 0.5: t > 300 ln(42.84) = 1128.
    assert 1100 <= verdict.step <= 1160


def test_plateau_not_found_while_climbing():
    verdict = equilibrium._plateau(_climb())
    assert not verdict.plateaued and verdict.step is None
    assert verdict.drift == pytest.approx(10.0)
    assert verdict.final == pytest.approx(-3.0 + 10e-3 * (N - 1))


def test_slow_drift_is_judged_by_the_rule():
    slow = _approach(18.0) + 0.4e-3 * np.arange(N)  # 0.4 nats per 1,000 steps
    assert equilibrium._plateau(slow).plateaued
    assert not equilibrium._plateau(_approach(18.0) + 0.6e-3 * np.arange(N)).plateaued


def test_nan_tail_is_not_a_plateau():
    margin = _approach(18.0)
    margin[-10:] = np.nan
    assert not equilibrium._plateau(margin).plateaued


def test_diverged_run_stops_at_its_peak():
    # Fig4's eps = 0 runs: the margin climbs to ~82, then r = sqrt(v) flushes to zero
    # under a non-zero gradient and the parameters go to inf.
    margin = _climb(rate=30e-3)
    margin[2790:2800] -= 1.0  # a dip before it breaks: the peak is before it
    margin[2800:] = np.nan
    verdict = equilibrium._plateau(margin)
    assert not verdict.plateaued and verdict.diverged
    assert verdict.stop_step == 2789 and verdict.stop == pytest.approx(-3.0 + 30e-3 * 2789)
    assert verdict.peak == verdict.stop
    rows = equilibrium.run_rows([({"config": CFG.to_dict() | {"eps": 0.0}}, _metrics(margin))])
    (group,) = equilibrium.group_rows(rows)
    assert group["stop_how"] == "peak" and group["diverged"] == 1.0
    assert group["stop_margin"] == pytest.approx(80.67, abs=0.01) and group["stop_step"] == 2789
    table = equilibrium.format_table([group])
    assert "peaks at 80.67 (step 2789), then 100% diverge (inf/NaN)" in table


def test_climbing_run_reports_its_peak():
    verdict = equilibrium._plateau(_climb())
    assert verdict.stop == verdict.peak == verdict.final and verdict.stop_step == N - 1


def test_underflow_margin_matches_the_paper():
    # e^-m / 480 flushes to zero past -log(tiny) - log(480): the paper's m ~ 81.2 in fp32.
    assert equilibrium.underflow_margin(CFG) == pytest.approx(81.16, abs=0.01)
    fp64 = dataclasses.replace(CFG, precision="fp64")
    assert equilibrium.underflow_margin(fp64) == pytest.approx(708.4 - math.log(480), abs=0.1)


def _fabricated_runs():
    """eps 1e-8 wd 1 (plateau at 18.1), eps 1e-8 wd 0 (still climbing), eps 0 wd 1 (climbs,
    stops at 81.2), eps 1e-4 wd 1 (plateau 2.5 below log(1/eps)); 2 seeds each."""
    runs = []
    for seed in range(2):
        shapes = [
            (1e-8, 1.0, _approach(18.1, seed=seed)),
            (1e-8, 0.0, _climb(rate=5e-3)),
            (0.0, 1.0, np.minimum(_climb(rate=30e-3), 81.2) + 0.01 * seed),
            (1e-4, 1.0, _approach(9.21 - 2.5, seed=seed)),
        ]
        for eps, wd, margin in shapes:
            cfg = dataclasses.replace(CFG, eps=eps, weight_decay=wd, seed=seed)
            runs.append((cfg, _metrics(margin)))
    return runs


def test_group_rows():
    rows = equilibrium.run_rows([({"config": c.to_dict()}, m) for c, m in _fabricated_runs()])
    groups = {(g["eps"], g["weight_decay"]): g for g in equilibrium.group_rows(rows)}
    assert list(groups) == [(1e-8, 1.0), (1e-8, 0.0), (0.0, 1.0), (1e-4, 1.0)]
    for g in groups.values():
        assert g["n"] == 2
        assert set(g) >= {"eps", "weight_decay", "predicted", "measured_mean", "measured_std"}
        assert set(g) >= {"plateaued", "n"}

    wd1 = groups[(1e-8, 1.0)]
    assert wd1["predicted"] == pytest.approx(18.42, abs=0.01)
    assert wd1["measured_mean"] == pytest.approx(18.1, abs=0.02)
    assert wd1["plateaued"] == 1.0 and wd1["agrees"] is True
    assert wd1["measured_std"] < 0.01

    wd0 = groups[(1e-8, 0.0)]
    assert wd0["plateaued"] == 0.0 and wd0["measured_from"] == "peak" and wd0["agrees"] is None
    assert wd0["measured_mean"] == pytest.approx(-3.0 + 5e-3 * (N - 1), abs=1e-4)

    zero = groups[(0.0, 1.0)]
    assert zero["predicted"] is None and zero["grows_to_underflow"] is True
    assert zero["stop_how"] == "plateau" and zero["diverged"] == 0.0
    assert zero["stop_margin"] == pytest.approx(81.2, abs=0.02)
    assert zero["underflow_margin"] == pytest.approx(81.16, abs=0.01)
    assert zero["plateau_step_mean"] == pytest.approx((81.2 - 0.5 + 3.0) / 30e-3, abs=2)

    far = groups[(1e-4, 1.0)]
    assert far["plateaued"] == 1.0 and far["agrees"] is False
    assert far["deviation"] == pytest.approx(-2.5, abs=0.02)


@pytest.fixture
def fabricated_dir(tmp_path):
    store = Store(tmp_path)
    summaries = []
    for cfg, m in _fabricated_runs():
        summary = summarize(cfg, m, 1.0)
        store.save(cfg, m, summary)
        summaries.append({**summary, "run_dir": str(store.run_dir(cfg))})
    experiment.write_out(tmp_path, summaries)
    return tmp_path


def test_equilibrium_cli(fabricated_dir, capsys, tmp_path_factory):
    assert cli.main(["equilibrium", str(fabricated_dir)]) == 0
    assert not (fabricated_dir / "equilibrium.json").exists()  # nothing written into the store
    out_dir = tmp_path_factory.mktemp("equilibrium")
    assert cli.main(["equilibrium", str(fabricated_dir), "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "log(1/eps)" in out and "18.42" in out and "within 1" in out
    assert "grows until gradients underflow (~81.2); stops at 81.2" in out
    assert "undershoots by > 1" in out and "no plateau" in out
    rows = json.loads((out_dir / "equilibrium.json").read_text())
    assert len(rows) == 4
    required = {"eps", "weight_decay", "predicted", "measured_mean", "measured_std", "n"}
    assert all(required | {"plateaued"} <= set(r) for r in rows)
    assert rows[0]["plateaued"] == 1.0 and rows[2]["predicted"] is None


def test_equilibrium_reads_a_bare_store(fabricated_dir):
    (fabricated_dir / "summary.json").unlink()
    rows, runs = equilibrium.analyze_dir(fabricated_dir)
    assert len(runs) == 8 and sorted(r["n"] for r in rows) == [2, 2, 2, 2]


def test_equilibrium_cli_without_runs(tmp_path, capsys):
    assert cli.main(["equilibrium", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no runs in" in err[0]


def test_balance_terms_on_a_homogeneous_model():
    # x^2 MLP without biases: logits are homogeneous of degree 3 in theta, so the margin's
    # radial derivative is 3 (z_t - sum_j q_j z_j), q the softmax over the non-targets.
    cfg = RunConfig(
        task="a^2+b^2",
        p=11,
        model="mlp",
        mlp_width=16,
        activation="quadratic",
        mlp_init="doshi",
        steps=1,
        eval_every=1,
        weight_decay=0.5,
    )
    params = build_model(cfg.model_config()).init(jax.random.key(0), np.float32)
    terms = balance.balance_terms(cfg, params)
    data = engine.load_data(cfg)
    apply = jax.jit(build_model(cfg.model_config()).apply)  # one compile, not one per op
    z = np.asarray(apply(params, data.x_train), np.float64)
    y = np.asarray(data.y_train)
    target = z[np.arange(len(y)), y]
    others = np.where(np.arange(cfg.p) == y[:, None], -np.inf, z)
    q = np.exp(others - others.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    expected = 3 * np.mean(target - np.sum(q * np.where(np.isfinite(others), others, 0), 1))
    assert terms["radial_margin_slope"] == pytest.approx(expected, rel=1e-4)
    flat = np.concatenate([np.ravel(np.asarray(w, np.float64)) for w in params.values()])
    assert terms["balance_norm"] == pytest.approx(np.sum(flat**2 / (1 - 0.5 * np.abs(flat))))
    # No balance without weight decay or eps; the prediction: log(1/eps) + log(D / (lambda S)).
    assert balance.balance_terms(dataclasses.replace(cfg, weight_decay=0.0), params) is None
    assert balance.balance_margin(cfg, 2.0, 4.0) == pytest.approx(-math.log(1e-8))
    assert balance.balance_margin(cfg, None, 4.0) is None


def test_group_rows_carry_the_balance_prediction():
    runs = [(c, m) for c, m in _fabricated_runs() if c.eps == 1e-4]
    summaries = [
        {"config": c.to_dict(), "radial_margin_slope": 60.0, "balance_norm": 480.0} for c, _ in runs
    ]
    (group,) = equilibrium.group_rows(
        equilibrium.run_rows(list(zip(summaries, [m for _, m in runs], strict=True)))
    )
    predicted = math.log(1e4) + math.log(60.0 / 480.0)  # 9.21 - 2.08
    assert group["predicted_balance"] == pytest.approx(predicted)
    assert group["deviation_balance"] == pytest.approx(9.21 - 2.5 - predicted, abs=0.02)
    assert "balance" in equilibrium.format_table([group]).splitlines()[0]
