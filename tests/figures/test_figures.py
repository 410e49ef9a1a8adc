"""`grokbench figures`: every figure script on tiny cached results, the build's caching, the
CLI's errors, and the reproduction report on a fabricated result set where claims fail."""

import json

import numpy as np
import pytest

from figures import build, report, setup_study
from figures._common import Context
from grokbench import cli, engine, metrics
from grokbench.store import Store

# Every recipe shrunk to a few steps of a tiny task: the figures' code paths, not science.
TINY = {"p": (7,), "steps": (100,), "eval_every": (50,), "seeds": (2,)}


def _fake_metrics(cfg, spiky: bool):
    """Plausible curves: loss falling to a floor (with two spikes if `spiky`), margin rising."""
    n = cfg.steps
    step = np.arange(n)
    ce = np.geomspace(1.0, 1e-7, n)
    if spiky:
        ce[n // 2 : n // 2 + 3] = 1e-1
        ce[3 * n // 4 : 3 * n // 4 + 3] = 1e-1
    cols = {name: np.full(n, 0.5) for name in metrics.STEP_METRICS}
    cols |= {"train_ce": ce, "train_loss": ce, "margin_mean": -np.log(ce)}
    cols["train_acc"] = np.where(step >= 10, 1.0, 0.5)
    tests = n // cfg.eval_every
    return {
        "step": step,
        **cols,
        "test_step": np.arange(1, tests + 1) * cfg.eval_every,
        "test_loss": np.zeros(tests),
        "test_acc": np.linspace(0.2, 1.0, tests),
    }


@pytest.fixture
def fake_engine(monkeypatch):
    """The engine replaced by a fast fake: standard CE runs spike, the others do not."""
    calls = []

    def train(configs, **kwargs):
        calls.append(list(configs))
        return [
            engine.RunOutput(c, _fake_metrics(c, spiky=c.loss == "standard"), 1.0) for c in configs
        ]

    monkeypatch.setattr(engine, "train", train)
    return calls


def _build(tmp_path, names, overrides=TINY, out=None):
    """`build.build` as the tests run it: the store under tmp_path, quiet, no report."""
    return build.build(
        names,
        out=tmp_path if out is None else out,
        store=Store(tmp_path / "store"),
        overrides=overrides,
        progress=False,
        report=False,
        log=lambda *a, **k: None,
    )


def _images(written):
    return [p for paths in written.values() for p in paths if p.suffix in (".png", ".pdf")]


@pytest.mark.parametrize("name", ["fig2", "fig5", "table1", "fig6"])
def test_each_run_figure_writes_non_empty_files(tmp_path, fake_engine, name):
    written = _build(tmp_path, [name], out=tmp_path / "out")
    files = written[name]
    assert files and all(p.is_file() and p.stat().st_size > 1000 for p in files)
    assert {p.name.split(".")[0].split("_")[0] for p in files} == {name}


@pytest.mark.parametrize("name", ["fig1a", "fig1b", "fig3"])
def test_each_analytic_figure_writes_non_empty_images(tmp_path, name):
    written = _build(tmp_path, [name], overrides={})
    assert [p.name for p in written[name]] == [f"{name}.png", f"{name}.pdf"]
    assert all(p.stat().st_size > 1000 for p in written[name])


def test_second_build_trains_nothing(tmp_path, fake_engine):
    _build(tmp_path, ["fig2"], out=tmp_path / "out")
    trained = len(fake_engine)
    assert trained > 0
    _build(tmp_path, ["fig2"], out=tmp_path / "out")
    assert len(fake_engine) == trained


def test_table1_markdown_and_csv(tmp_path, fake_engine):
    _build(tmp_path, ["table1"])
    md = (tmp_path / "table1.md").read_text()
    assert "| bf16 | Standard CE |" in md and "StableMax" in md
    import pandas as pd

    frame = pd.read_csv(tmp_path / "table1.csv")
    assert len(frame) == 27  # 9 variants x 3 eps
    assert frame["seeds"].eq(2).all()


def test_real_engine_end_to_end(tmp_path):
    """fig2 through the real engine (both recipes shrunk), as `grokbench figures` runs it."""
    overrides = {**TINY, "d_model": (8,), "n_heads": (2,), "mlp_width": (16,), "seeds": (1,)}
    written = _build(tmp_path, ["fig2"], overrides=overrides)
    assert all(p.stat().st_size > 1000 for p in written["fig2"])
    assert len(list((tmp_path / "store" / "runs").iterdir())) == 4  # 2 recipes x 2 losses


def test_unknown_figure_is_one_line_exit_2(capsys):
    assert cli.main(["figures", "fig99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown figure(s) fig99" in err[0]


def test_bad_override_is_one_line_exit_2(capsys):
    assert cli.main(["figures", "fig2", "--set", "steps=many"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --- the reproduction report ---------------------------------------------------------------


def _ctx(tmp_path, quick):
    return Context(
        quick=quick,
        out=tmp_path / "out",
        store=Store(tmp_path / "store"),
        overrides=TINY,
        progress=False,
    )


def _fig2_claims():
    return [c for c in report.CLAIMS if c.recipes == ("fig2-top",)]


def test_report_says_when_a_claim_fails(tmp_path, fake_engine):
    ctx = _ctx(tmp_path, quick=True)
    ctx.runs("fig2-top")  # fake: standard spikes, fixed does not -> the claim holds
    rows = report.evaluate(_ctx(tmp_path, quick=True), _fig2_claims())
    fixed = next(r for r in rows if r.claim.startswith("fixed CE: no loss spike"))
    assert fixed.status == "holds"
    # Now fabricate a fixed-CE run that spiked: the report must say the claim fails.
    run = next(r for r in ctx.runs("fig2-top") if r.config.loss == "fixed")
    path = run.run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "spikes": 3}))
    rows = report.evaluate(_ctx(tmp_path, quick=True), _fig2_claims())
    fixed = next(r for r in rows if r.claim.startswith("fixed CE: no loss spike"))
    assert fixed.status == "fails" and "3" in fixed.ours
    md = report.markdown(rows, "quick")
    assert "| fails |" in md and "1 fails" in md


def test_report_lists_untestable_claims_as_not_tested(tmp_path, fake_engine):
    ctx = _ctx(tmp_path, quick=True)
    rows = report.evaluate(ctx, _fig2_claims())
    # Quick scale: the full-scale fig2-top claims are listed, not dropped; no runs: missing.
    assert rows and all(r.status == "not tested" for r in rows)
    assert any("full-scale" in r.note for r in rows)
    assert any("not in the store" in r.note for r in rows)
    assert not fake_engine  # the report never trains


def test_analytic_claims_hold():
    rows = report.evaluate(
        Context(quick=True, out=None, store=None), [c for c in report.CLAIMS if not c.recipes]
    )
    assert rows and all(r.status == "holds" for r in rows), report.markdown(rows, "quick")


def test_fig4_from_fake_runs(tmp_path, fake_engine):
    written = _build(tmp_path, ["fig4"])
    assert all(p.stat().st_size > 1000 for p in written["fig4"])


def test_fig7_and_its_claims_on_a_real_shrunken_distillation(tmp_path):
    # The distillation path (teacher, then students) shrunk; bf16 compute only.
    overrides = {
        "p": (7,),
        "d_model": (8,),
        "n_heads": (2,),
        "steps": (10,),
        "teacher_steps": (50,),
        "precision": ("fp32/bf16",),
    }
    ctx = Context(
        quick=True,
        out=tmp_path,
        store=Store(tmp_path / "store"),
        progress=False,
        overrides=overrides,
    )
    assert all(p.stat().st_size > 1000 for p in build._function("fig7")(ctx))
    rows = report.evaluate(ctx, [c for c in report.CLAIMS if c.recipes == ("fig7",)])
    fixed = next(r for r in rows if r.claim.startswith("fixed soft-target CE"))
    assert fixed.status == "holds"  # bf16: the fixed student stays bit-identical, KL 0
    assert any(r.status == "not tested" and "full-scale" in r.note for r in rows)


def test_quant_figure_and_claims_on_a_tiny_lab(tmp_path, monkeypatch):
    from grokbench import quant

    tiny = {
        "n_layers": 1,
        "d_model": 16,
        "n_heads": 2,
        "seq_len": 16,
        "batch_size": 8,
        "steps": 3,
        "eval_batches": 1,
        "calib_batches": 2,
        "calib_subsets": 2,
    }
    monkeypatch.setattr(quant, "QUICK", tiny)
    real = quant.quant_configs
    monkeypatch.setattr(
        quant,
        "quant_configs",
        lambda quick, overrides=None: real(quick, {"variants": ("vanilla", "clipped")}),
    )
    ctx = Context(quick=True, out=tmp_path, store=Store(tmp_path / "store"), progress=False)
    files = build._function("quant")(ctx)
    assert {"quant_table.json", "quant_table.md"} <= {p.name for p in files}
    assert all(p.name.startswith("quant") and p.stat().st_size > 100 for p in files)
    rows = report.evaluate(ctx, [c for c in report.CLAIMS if c.recipes == (report.QUANT,)])
    assert rows and {r.status for r in rows} <= {"holds", "fails"}


def test_full_scale_claims_evaluate_on_fake_runs(tmp_path, fake_engine):
    """Every full-scale claim runs its measurement code (on fake curves) without error."""
    ctx = Context(
        quick=False, out=tmp_path, store=Store(tmp_path / "store"), overrides=TINY, progress=False
    )
    for recipe in ("fig2-top", "fig2-bottom", "table1", "fig4", *report._FIG6):
        ctx.runs(recipe)
    grokking = [c for c in report.CLAIMS if c.recipes and c.figure not in ("fig7", "quant")]
    rows = report.evaluate(ctx, grokking)  # fig7 and quant have tests of their own above
    tested = [r for r in rows if r.status != "not tested"]
    assert {r.source for r in tested} >= {"Fig. 2 top", "Table 1", "Fig. 4a, Eq. 11", "Fig. 6"}
    assert {r.status for r in rows} <= {"holds", "fails", "not tested"}
    spikes = next(r for r in rows if r.claim.startswith("standard CE's spikes launch"))
    assert "spikes" in spikes.ours  # the fake standard runs spike: their launch margins


def test_setup_study_figure_and_table(tmp_path, fake_engine):
    written = _build(tmp_path, ["setup_study"])
    assert [p.name for p in written["setup_study"]] == [
        "setup_study.png",
        "setup_study.pdf",
        "setup_study.md",
    ]
    md = (tmp_path / "setup_study.md").read_text()
    # Every setting of the study (--quick: fixed CE only); the fake runs reach 99 % at their
    # last evaluation.
    for label in setup_study.setting_labels():
        assert f"| {label} | fixed | 2/2 (by 100) | 100 |" in md
    assert "| standard |" not in md


def test_setup_study_median_counts_non_grokking_runs_as_late():
    assert setup_study.median_grok([100, 300, None]) == 300
    assert setup_study.median_grok([100, None, None]) is None
    assert setup_study.median_grok([100, 200, 300, None]) == 250
