"""`grokbench figures`: every figure script on tiny cached results, the build's caching, the
CLI's errors, and the reproduction report on a fabricated result set where claims fail."""

import inspect
import io
import json
import pathlib
import types

import numpy as np
import pytest
import tqdm

from figures import build, quant, registry, report, setup_study
from figures._common import Context, MissingRuns
from figures.report import fig2, fig4, fig6, table1
from figures.report.claims import Evidence
from grokbench import cli, engine, metrics
from grokbench.store import Store
from tests.fakes import progress_columns

# Every recipe shrunk to a few steps of a tiny task: the figures' code paths, not science.
TINY = {"p": (7,), "steps": (100,), "eval_every": (50,), "seeds": (2,)}
TINY["progress_measures"] = (False,)  # on only where a figure draws them (their compile time)


def _fake_metrics(cfg, spiky: bool):
    """Plausible curves: loss falling to a floor (with two spikes if `spiky`), margin rising
    past c32 (-log 1e-8 = 18.4), as fig6's spike rows need to be tested."""
    n = cfg.steps
    step = np.arange(n)
    ce = np.geomspace(1.0, 1e-8, n)
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
        **progress_columns(cfg, tests),
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


def _build(tmp_path, names, overrides=TINY, out=None, log=lambda *a, **k: None, jobs=1, quick=True):
    """`build.build` as the tests run it: the store under tmp_path, quiet, no report."""
    return build.build(
        names,
        quick=quick,
        out=tmp_path if out is None else out,
        store=Store(tmp_path / "store"),
        overrides=overrides,
        progress=False,
        report=False,
        log=log,
        jobs=jobs,
    )


def _images(written):
    return [p for paths in written.values() for p in paths if p.suffix in (".png", ".pdf")]


def _check_written(files, name):
    """Images above 1 kB; a table (Markdown, CSV) of one quick column is smaller: a header
    and at least one row. Every file named after the figure."""
    assert files and all(
        p.is_file() and (p.stat().st_size > 1000 or (p.suffix in (".md", ".csv") and _rows(p) >= 2))
        for p in files
    )
    assert {p.name.split(".")[0].split("_")[0] for p in files} == {name}


# fig2's case is the slow tier's: test_the_build_forecasts_what_it_trains_from_its_record
# makes the same build (fig2 at TINY, out=tmp_path / "out") and checks its files the same way.
# fig5's, fig6's and progress's cases are the slow tier's too. Their fast sibling is
# tests/figures/test_legibility.py::test_no_two_texts_of_a_figure_overlap, which trains each on
# this file's fake engine at TINY (progress measures on, fig5 at both eps rows) and draws and
# renders every one of its figures, by name, through the same drawing code; only the saving is
# replaced there, and `save_to` writes the files of fig2, fig4 and table1 in this file's fast
# tier (test_a_figure_drawn_without_its_runs_names_the_command_and_trains_nothing also writes
# progress.png and progress.pdf from the progress runs its build trains).
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("fig2", marks=_SLOW),
        pytest.param("fig5", marks=_SLOW),
        "table1",
        pytest.param("fig6", marks=_SLOW),
        pytest.param("progress", marks=_SLOW),
    ],
)
def test_each_run_figure_writes_non_empty_files(tmp_path, fake_engine, name):
    overrides = {**TINY, "progress_measures": (name == "progress",)}
    written = _build(tmp_path, [name], out=tmp_path / "out", overrides=overrides)
    _check_written(written[name], name)


@pytest.mark.parametrize("name", ["fig1a", "fig1b", "fig3"])
def test_each_analytic_figure_writes_non_empty_images(tmp_path, name):
    written = _build(tmp_path, [name], overrides={})
    assert [p.name for p in written[name]] == [f"{name}.png", f"{name}.pdf"]
    assert all(p.stat().st_size > 1000 for p in written[name])


@pytest.mark.slow  # the fast sibling: test_the_build_forecasts_what_it_trains_from_its_record
def test_second_build_trains_nothing(tmp_path, fake_engine):  # builds fig2 twice and checks this
    _build(tmp_path, ["fig2"], out=tmp_path / "out")
    trained = len(fake_engine)
    assert trained > 0
    _build(tmp_path, ["fig2"], out=tmp_path / "out")
    assert len(fake_engine) == trained


def test_fig2_at_quick_draws_the_cube_row_from_full_scale_only(tmp_path, fake_engine, monkeypatch):
    """fig2-bottom-cube has no quick runs (grokbench.recipes): the quick build trains none and
    its row names the command that does."""
    import figures.fig2

    texts = []

    def keep(fig, ctx, name):
        texts.extend(t.get_text() for ax in fig.axes for t in ax.texts)
        return save(fig, ctx, name)

    save = figures.fig2.save
    monkeypatch.setattr(figures.fig2, "save", keep)
    quick_seeds = {k: v for k, v in TINY.items() if k != "seeds"}  # the recipes' own seeds
    written = _build(tmp_path, ["fig2"], overrides=quick_seeds)
    assert [p.name for p in written["fig2"]] == ["fig2.png", "fig2.pdf"]
    tasks = {cfg.task for batch in fake_engine for cfg in batch}
    assert tasks == {"a+b", "a^2+b^2"}  # fig2-top and fig2-bottom only
    assert "full scale only:\ngrokbench figures fig2 --full" in texts


def test_table1_markdown_and_csv(tmp_path, fake_engine):
    _build(tmp_path, ["table1"])
    md = (tmp_path / "table1.md").read_text()
    # The quick recipe: fixed and standard CE in three precisions; the baselines named as absent.
    assert "| bf16 | Standard CE |" in md and "| fp32 | StableMax |" not in md
    assert "Not in these runs: fp32 Zero-sum projection, fp32 StableMax, fp64 StableMax;" in md
    import pandas as pd

    frame = pd.read_csv(tmp_path / "table1.csv")
    assert len(frame) == 6  # 6 variants x the quick recipe's one eps (1e-8)
    assert frame["eps"].eq(1e-8).all() and frame["seeds"].eq(2).all()
    # The full recipe (at TINY's size): every variant and eps column.
    _build(tmp_path, ["table1"], quick=False)
    md = (tmp_path / "table1.md").read_text()
    assert "| fp32 | StableMax |" in md and "Not in these runs" not in md
    frame = pd.read_csv(tmp_path / "table1.csv")
    assert len(frame) == 27  # 9 variants x 3 eps


@pytest.mark.slow
def test_real_engine_end_to_end(tmp_path):
    """fig2 through the real engine (its three recipes shrunk), as `grokbench figures` runs it.
    Slow tier: the fast tier builds every figure on the fake engine (this file), trains the
    engine's runs through `grokbench run` (tests/grokbench/test_cli.py) and a figure through
    the real distillation loop (tests/figures/test_claims.py, the shrunken fig7)."""
    # fig2-top at tests/grokbench/test_cli.py's SHRINK sizes: the two share compiled programs.
    shrink = {"steps": (30,), "eval_every": (10,), "seeds": (3,)}
    overrides = {**TINY, "d_model": (8,), "n_heads": (2,), "mlp_width": (16,), **shrink}
    written = _build(tmp_path, ["fig2"], overrides=overrides)
    assert all(p.stat().st_size > 1000 for p in written["fig2"])
    runs = list((tmp_path / "store" / "runs").iterdir())
    assert len(runs) == 18  # 3 recipes x 2 losses x 3 seeds


def test_unknown_figure_is_one_line_exit_2(capsys):
    assert cli.main(["figures", "fig99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown figure(s) fig99" in err[0]


def test_bad_override_is_one_line_exit_2(capsys):
    assert cli.main(["figures", "fig2", "--set", "steps=many"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --- the reproduction report ---------------------------------------------------------------


def test_report_lists_untestable_claims_as_not_tested(tmp_path, fake_engine):
    ctx = Context(quick=True, out=tmp_path, store=Store(tmp_path / "store"), progress=False)
    rows = fig2.claims(report.evidence(ctx))
    # Quick scale: the full-scale claims are listed, not dropped; no runs: missing.
    assert rows and all(r.status == "not tested" for r in rows)
    assert any("full-scale" in r.note for r in rows)
    assert any("not in the store" in r.note for r in rows) or any(
        "no fig2-top runs" in r.note for r in rows
    )
    assert not fake_engine  # the report never trains


def test_report_shows_each_figure_above_its_claims(tmp_path):
    (tmp_path / "fig2.png").write_bytes(b"png")
    sections = [("Fig. 2", ("fig2.png", "fig9.png"), fig2.claims(Evidence(scale="quick")))]
    md = report.markdown(sections, "quick", built=lambda n: (tmp_path / n).is_file())
    assert md.index("## Fig. 2") < md.index("![fig2.png](fig2.png)") < md.index("| claim |")
    assert "fig9.png" not in md


def test_full_scale_claims_evaluate_on_fake_runs(tmp_path, fake_engine):
    """Every full-scale grokking claim runs its measurement on stored (fake) runs."""
    ctx = Context(
        quick=False, out=tmp_path, store=Store(tmp_path / "store"), overrides=TINY, progress=False
    )
    grokking = ("fig2-top", "fig2-bottom", "fig2-bottom-cube", "table1", "fig4", *fig6.RECIPES)
    for name in grokking:  # the build trains (figures and the report only read)
        build.train_recipe(ctx, name)
    ev = Evidence("full", {name: ctx.runs(name) for name in grokking}, store=ctx.store)
    rows = fig2.claims(ev) + table1.claims(ev) + fig4.claims(ev) + fig6.claims(ev)
    tested = {r.source for r in rows if r.status != "not tested"}
    assert {"Fix paper, Fig. 2 top", "Fix paper, Table 1", "Fix paper, Fig. 6, Sec. 6"} <= tested
    spikes = next(r for r in rows if r.claim.startswith("standard CE's spikes launch"))
    assert "spikes" in spikes.ours  # the fake standard runs spike: their launch margins


def test_quant_sweep_figure_plots_each_variant_against_the_swept_field(tmp_path):
    rows = [
        {
            "family": "encoder",
            "variant": variant,
            "sweep": {"pi_init": pi},
            "fp_perplexity": 3.0 + pi,
            "max_inf_norm": 10 * pi,
            "w8a8_perplexity": 3.1 + pi,
        }
        for variant in ("gated", "gated_mlp")
        for pi in (0.5, 0.25, 0.9)
    ]
    paths = quant._sweep_figure(rows, "pi_init", tmp_path)
    assert [p.name for p in paths] == ["quant_sweep_pi_init.png", "quant_sweep_pi_init.pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_setup_study_figure_and_table(tmp_path, fake_engine):
    written = _build(tmp_path, ["setup_study"])
    assert [p.name for p in written["setup_study"]] == [
        "setup_study.png",
        "setup_study.pdf",
        "setup_study.md",
    ]
    md = (tmp_path / "setup_study.md").read_text()
    # Every setting of the study and both losses (the seeds given: the quick recipe has none);
    # the fake runs reach 99 % at their last evaluation.
    for label in setup_study.setting_labels():
        for loss in setup_study.LOSSES:
            assert f"| {label} | {loss} | 2/2 (by 100) | 100 |" in md


def test_setup_study_without_runs_says_where_they_come_from(tmp_path, fake_engine):
    """The quick build trains no setup-study run: the figure and the table say so and give the
    full build's command, and nothing is trained."""
    overrides = {k: v for k, v in TINY.items() if k != "seeds"}
    written = _build(tmp_path, ["setup_study"], overrides=overrides)
    _check_written(written["setup_study"], "setup")
    md = (tmp_path / "setup_study.md").read_text()
    assert "the quick build does not run the setup study" in md
    assert "grokbench figures setup_study --full" in md
    assert not fake_engine  # the engine was never called


def test_setup_study_median_counts_non_grokking_runs_as_late():
    assert setup_study.median_grok([100, 300, None]) == 300
    assert setup_study.median_grok([100, None, None]) is None
    assert setup_study.median_grok([100, 200, 300, None]) == 250


def _rows(path) -> int:
    """Non-empty lines of a text file."""
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_the_build_forecasts_what_it_trains_from_its_record(tmp_path, fake_engine):
    """`grokbench figures` says, before it works, what each build will train and how long it
    expects (its last record of this scale scaled by the run-steps left), and records the
    run-steps it trained for the next forecast."""
    lines = []

    def log(text, file=None):
        lines.append(text)

    written = _build(tmp_path, ["fig2"], out=tmp_path / "out", log=log)
    _check_written(written["fig2"], "fig2")  # test_each_run_figure_writes_non_empty_files'
    first = lines[0]
    assert "fig2" in first and "runs to train" in first
    times = json.loads((tmp_path / "out" / build.TIMES_FILE).read_text())
    # fig2's three recipes at TINY: 2 losses x 2 seeds each, 100 steps.
    assert times["fig2"]["runs"] == 12 and times["fig2"]["run_steps"] == 1200
    assert times["scale"] == "quick"
    trained = len(fake_engine)
    assert trained > 0

    lines.clear()
    _build(tmp_path, ["fig2"], out=tmp_path / "out", log=log)
    assert len(fake_engine) == trained  # the second build trains nothing
    row = next(line for line in lines[0].splitlines() if line.startswith("fig2"))
    assert row.split()[1:3] == ["0", "0"]  # nothing left to train
    assert "this OUT's last build" in lines[0]


def test_forecast_scales_the_record_by_the_run_steps_left():
    record = {"fig2": {"wall": 100.0, "run_steps": 1000}, "quant": {"wall": 40.0, "run_steps": 0}}
    plan = {"fig2": (2, 500), "quant": (0, 0), "fig9": (1, 10)}
    expected = build.forecast(plan, record)
    assert expected["fig2"] == pytest.approx(5 + 95 * 0.5)  # 5 % stays (drawing, loading)
    assert expected["quant"] == 40.0  # trains in its own store: as recorded
    assert expected["fig9"] is None  # no record: '?'
    text = build.format_forecast(plan, expected, "a record")
    assert "?" in text and "about" in text and "3 runs to train" in text


def test_the_bar_ends_at_its_total_without_a_warning(recwarn):
    """The build's bar: its updates add up to its total exactly. Three builds expected 0.05 s
    each, rounded to tenths one by one (0.1 each), summed past the total rounded once (0.2):
    tqdm warned ('clamping frac') and showed a negative time left (seen in a quick build)."""
    names = ["a", "b", "c", "d", "e"]
    weights = build.bar_weights(names, {"a": 0.05, "b": 0.05, "c": 0.05, "d": None, "e": 0.0})
    assert weights == {"a": 1, "b": 1, "c": 1, "d": 10, "e": 1}  # tenths; no record: a second
    bar = tqdm.tqdm(total=sum(weights.values()), bar_format="{bar}|{remaining}", file=io.StringIO())
    for name in names:
        bar.update(weights[name])
    assert bar.n == bar.total
    str(bar)  # formats the finished bar, where a fraction past 1 warns
    bar.close()
    assert not [w for w in recwarn if "clamping" in str(w.message)]


def test_the_builds_lines_start_on_their_own_line_beside_its_bar():
    """`build`'s default log clears the bar before a line (`print` ran the line on from the
    bar's text: '~? left[quick] training in 2 processes') and draws the bar again after."""
    log = inspect.signature(build.build).parameters["log"].default
    stream = io.StringIO()
    with tqdm.tqdm(total=3, file=stream, bar_format="[quick] build {bar}") as bar:
        bar.update(1)
        log("[quick] fig1a ...", file=stream)
        after = stream.getvalue().split("[quick] fig1a ...\n")
    assert len(after) == 2
    assert after[0].endswith("\r") and after[1].startswith("\r[quick] build")


def test_a_figure_drawn_without_its_runs_names_the_command_and_trains_nothing(
    tmp_path, fake_engine
):
    """Figures only draw: the build trains first (`build.train`); a figure drawn on a store
    that lacks its runs (or the quant lab's table) raises `MissingRuns` with the command."""
    overrides = {**TINY, "progress_measures": (True,)}
    store = Store(tmp_path / "store")
    ctx = Context(quick=True, out=tmp_path, store=store, overrides=overrides, progress=False)
    for name, command in (
        ("fig2", "`grokbench figures fig2 --quick --results "),
        ("progress", "`grokbench figures fig2 --quick --results "),  # fig2's build makes them
        ("setup_study", "`grokbench figures setup_study --quick --results "),
        ("quant", f"`grokbench figures quant --quick --out {tmp_path} --results "),
    ):
        with pytest.raises(MissingRuns) as caught:
            registry.builds()[name](ctx)
        assert command in str(caught.value), (name, str(caught.value))
    assert ctx.missing("fig2-top").startswith("4 of 4 fig2-top runs of the quick scale")
    assert not fake_engine  # drawing never trains
    build.train(ctx, ["progress"])  # the build's one place: the runs progress draws
    assert fake_engine and ctx.runs("fig2-top")
    assert [p.name for p in registry.builds()["progress"](ctx)] == ["progress.png", "progress.pdf"]


def test_lanes_split_the_builds_that_train_and_keep_shared_recipes_together():
    """`grokbench figures --jobs 2`: the builds that train go in two lanes, the split whose
    longest lane is shortest; progress draws fig2's fig2-top runs, so it trains beside fig2."""
    order = build.resolve([])
    plan = {name: (0, 0) for name in order}
    plan |= {"fig2": (8, 18000), "fig4": (12, 36000), "fig5": (9, 13500), "fig6": (6, 6400)}
    plan |= {"fig7": (9, 1800), "setup_study": (8, 4000), "progress": (1, 100)}
    expected = {"fig2": 111.0, "fig4": 43.0, "fig5": 58.0, "fig6": 49.0, "fig7": 74.0}
    expected |= {"quant": 71.0, "setup_study": 29.0, "progress": 2.0, "fig1a": 2.0}
    # Groups by seconds: fig2 + progress 113, fig7 74, quant 71 (the quant lab's tables),
    # fig5 58, fig6 49, fig4 43, setup_study 29; fig1a trains nothing. Largest first to the
    # least loaded lane would give 214 / 223 s; the best split is 220 / 217 s.
    assert build.lanes(order, plan, expected, 2) == [
        ["fig2", "fig5", "fig6", "progress"],  # 113 + 58 + 49 = 220 s
        ["fig4", "fig7", "quant", "setup_study"],  # 43 + 74 + 71 + 29 = 217 s
    ]
    one = build.lanes(order, plan, expected, 1)
    assert one == [["fig2", "fig4", "fig5", "fig6", "fig7", "progress", "quant", "setup_study"]]
    assert build.lanes(order, {name: (0, 0) for name in order}, {}, 2) == []
    # Without a record a build weighs its run-steps.
    assert build.lanes(["fig2", "fig4"], plan, {}, 2) == [["fig4"], ["fig2"]]


def test_balanced_lanes_minimize_the_longest_and_fall_back_to_greedy():
    # The 2026-12-05 quick build's groups: greedy 344 / 310 s, the best split 314 / 310 s.
    sizes = [191.0, 124.0, 112.0, 74.0, 65.0, 58.0]
    lanes = build._balanced(sizes, 2)
    totals = [sum(s for s, lane in zip(sizes, lanes, strict=True) if lane == k) for k in (0, 1)]
    assert sorted(totals) == [310.0, 314.0]
    assert build._balanced([3.0, 3.0, 3.0], 3) == [0, 1, 2]
    assert build._balanced([], 2) == [] and build._balanced([5.0], 4) == [0]
    # Past the exhaustive bound: largest first to the least loaded lane.
    many = [float(20 - i) for i in range(20)]
    assert build._balanced(many, 2) == [0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0]


class _Finished:
    """A lane's process that has exited with `code`."""

    def __init__(self, code: int) -> None:
        self.code = code

    def wait(self) -> int:
        return self.code

    def poll(self) -> int:
        return self.code


class _Bar:
    """The build's bar, its total and each update appended to `events` (between its lines)."""

    def __init__(self, events: list, total: int, **_) -> None:
        self.events = events
        events.append(("total", total))

    def update(self, n: int) -> None:
        self.events.append(("update", n))

    def close(self) -> None:
        pass


def _lane_in_this_process(fails=()):
    """`build._spawn_lane` run here, to the end, before it returns (lanes in `fails` exit 1
    having trained nothing)."""

    def spawn(ctx, names, lane, warm=False):
        report = ctx.out / f".lane-{lane}.json"
        if lane in fails:
            return _Finished(1), report
        return _Finished(build._lane_main(build._lane_args(ctx, names, report, warm))), report

    return spawn


# The builds of the lane tests below: the cases with fig2 are the slow tier's. Their fast
# siblings build table1 in fig2's place (a build that trains, with a recipe of its own, and
# writes its table in a fraction of the time fig2's three panels take to draw): the same lane
# split, the same assertions, fig4 (two lanes) and fig3 (one lane) still drawn beside it.
# fig2's build and drawing stay fast in test_the_build_forecasts_what_it_trains_from_its_record.
_LANE_PAIRS = [pytest.param(("fig2", "fig4"), marks=pytest.mark.slow), ("table1", "fig4")]


@pytest.mark.parametrize("names", _LANE_PAIRS, ids="+".join)
@pytest.mark.parametrize("fails", [(), (1,)], ids=["both-lanes", "a-lane-stops"])
def test_a_build_in_two_lanes_trains_each_run_once_and_draws_every_figure(
    tmp_path, fake_engine, monkeypatch, fails, names
):
    monkeypatch.setattr(build, "_spawn_lane", _lane_in_this_process(fails))
    events = []  # the log's lines and the bar's total and updates, in order
    monkeypatch.setattr(build, "tqdm", types.SimpleNamespace(tqdm=lambda **kw: _Bar(events, **kw)))
    written = _build(
        tmp_path,
        list(names),
        out=tmp_path / "out",
        log=lambda text, file=None: events.append(text),
        jobs=2,
    )
    lines = [e for e in events if isinstance(e, str)]
    for name in names:
        _check_written(written[name], name)
    trained = [cfg for call in fake_engine for cfg in call]
    assert len(trained) == len(set(trained))  # no run trained twice
    times = json.loads((tmp_path / "out" / build.TIMES_FILE).read_text())
    assert sorted(map(sorted, times["lanes"])) == sorted([name] for name in names)
    assert "training in 2 processes side by side" in lines[0]
    other = times["lanes"][1][0]  # the lane of a process of its own
    assert times[other]["runs"] > 0
    stopped = [line for line in lines if "stopped" in line]
    assert len(stopped) == len(fails)
    if fails:  # its runs trained in the drawing loop instead
        assert f"{other}" in stopped[0] and ".lane-1.log" in stopped[0]
    # The bar: each build counted once, when it is done (a stopped lane's when it trains here).
    (_, total), *updates = [e for e in events if isinstance(e, tuple)]
    assert sum(n for _, n in updates) == total and len(updates) == len(names)
    if fails:
        counted = [i for i, e in enumerate(events) if isinstance(e, tuple) and e[0] == "update"]
        assert counted[-1] > events.index(stopped[0])


def test_a_lane_process_trains_into_the_store_and_reports_its_builds(tmp_path):
    # The command line `build` starts for a lane (a build that trains nothing: the
    # process's start-up, arguments and report, not training), which draws the lane's figures.
    ctx = Context(quick=True, out=tmp_path, store=Store(tmp_path / "store"), overrides=TINY)
    child, report = build._spawn_lane(ctx, ["fig3"], 1)
    assert child.wait() == 0, (tmp_path / ".lane-1.log").read_text()
    reading = json.loads(report.read_text())
    assert set(reading) == {"fig3"} and not list((tmp_path / "store").rglob("summary.json"))
    assert sorted(pathlib.Path(p).name for p in reading["fig3"]["paths"]) == [
        "fig3.pdf",
        "fig3.png",
    ]
    assert all(pathlib.Path(p).stat().st_size > 1000 for p in reading["fig3"]["paths"])


def test_the_lane_expected_to_finish_first_warms_the_report(tmp_path, monkeypatch):
    """`--warm-report` evaluates the report once the lane's figures are drawn, keeping
    nothing (the report after the lanes evaluates everything again); a warm-up that raises
    costs one line, not the lane."""
    from figures import report

    split = [["fig2", "fig5"], ["fig4", "fig7"]]
    expected = {"fig2": 200.0, "fig5": 75.0, "fig4": 71.0, "fig7": 120.0}
    assert build._first_done(split, expected) == 1
    assert build._first_done(split, {**expected, "fig7": 300.0}) == 0
    assert build._first_done(split, {}) == 0  # no record: the first of equals
    ctx = Context(quick=True, out=tmp_path, store=Store(tmp_path / "store"))  # fig3: no runs
    calls = []
    monkeypatch.setattr(report, "evaluate", lambda ev: calls.append(ev.scale) or [])
    args = build._lane_args(ctx, ["fig3"], tmp_path / ".lane-1.json", warm=True)
    assert "--warm-report" in args
    assert build._lane_main(args) == 0 and calls == ["quick"]
    assert "--warm-report" not in build._lane_args(ctx, ["fig3"], tmp_path / "r.json")

    def fails(ev):
        raise RuntimeError("no store")

    monkeypatch.setattr(report, "evaluate", fails)
    lines = []
    build._warm_report(ctx, lambda text, file=None: lines.append(text))
    assert lines == ["[quick] warming the report stopped: RuntimeError('no store')"]


def test_jobs_below_one_is_one_line_exit_2(capsys):
    assert cli.main(["figures", "fig1a", "--jobs", "0"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err


def test_lanes_are_forecast_as_the_longest_lane_or_their_cpu_over_the_cores():
    split = [["fig2"], ["fig4", "fig5"]]
    expected = {"fig1a": 2.0, "fig2": 100.0, "fig4": 30.0, "fig5": 40.0}
    cpu = {"fig2": 180.0, "fig4": 60.0, "fig5": 60.0}
    assert build.side_by_side(split, expected, cpu, 2) == 150.0  # 300 s of CPU on 2 cores
    assert build.side_by_side(split, expected, cpu, 4) == 100.0  # the longest lane
    plan = {"fig1a": (0, 0), "fig2": (1, 10), "fig4": (1, 10), "fig5": (1, 10)}
    text = build.format_forecast(plan, expected, "a record", split, 150.0)
    assert "side by side: fig2 (~100 s); fig4, fig5 (~70 s)" in text
    assert text.count("about") == 1 and "about 2.5 min for 3 runs" in text  # 150 + 2 s


@pytest.mark.parametrize(  # the slow tier's fig2 case: _LANE_PAIRS' comment
    "trains", [pytest.param("fig2", marks=pytest.mark.slow), "table1"]
)
def test_a_build_with_one_lane_of_training_trains_in_this_process(
    tmp_path, fake_engine, monkeypatch, trains
):
    # fig3 trains nothing, so `trains` is the only lane: no second process, and the build's
    # bar still counts every build once.
    def spawn(ctx, names, lane, warm=False):
        raise AssertionError(f"a second process for {names}")

    class Bar:
        def __init__(self, total, **kwargs):
            self.total, self.done = total, 0.0

        def update(self, n):
            self.done += n

        def close(self):
            bars.append(self)

    bars = []
    monkeypatch.setattr(build, "_spawn_lane", spawn)
    monkeypatch.setattr(build.tqdm, "tqdm", Bar)
    lines = []
    _build(
        tmp_path,
        [trains, "fig3"],
        out=tmp_path / "out",
        log=lambda text, file=None: lines.append(text),
        jobs=2,
    )
    assert fake_engine and not any("processes" in line for line in lines)
    assert "lanes" not in json.loads((tmp_path / "out" / build.TIMES_FILE).read_text())
    # The total and each build's step are rounded to 0.1 s: within 0.05 s each of 3 roundings.
    assert bars[0].done == pytest.approx(bars[0].total, abs=0.15)
