"""The command line as a new user meets it: paths checked before any work, one-line
interrupts and disk-full errors, readable files, help for every command, suggestions for
near-miss names, and output that says what it shows (issue 18)."""

import dataclasses
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time

import matplotlib.pyplot as plt
import numpy as np
import pytest

from figures import fig1, fig7
from figures._common import Context, Run
from grokbench import cli, cliffs, console, engine, executors, experiment, metrics, store, sweep
from grokbench.cli import app
from grokbench.config import RunConfig, config_hash
from grokbench.store import Store
from tests.fakes import progress_columns

# The smallest real run: a+b mod 7 (24 training examples), width 8, 20 steps.
TINY = ["p=7", "d_model=8", "n_heads=2", "steps=20", "eval_every=10", "loss=fixed"]
TINY += ["progress_measures=false"]  # their compile time; tests/grokbench/test_fourier.py


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's own errors and help
        return exc.code


def _one_line(capsys, match):
    """The command printed exactly one line on stderr, containing `match`, and no traceback."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def fake_engine(monkeypatch):
    """engine.train without the training: flat metrics of the right shape, chunk by chunk."""

    def train(configs, *, chunk_steps=1000, on_chunk=None, **kwargs):
        cfg = configs[0]
        for _ in range(0, cfg.steps, chunk_steps):
            if on_chunk is not None:
                on_chunk(min(chunk_steps, cfg.steps))
        n, n_tests = cfg.steps, cfg.steps // cfg.eval_every
        cols = {name: np.full(n, 0.5) for name in metrics.STEP_METRICS}
        cols |= {name: np.full(n_tests, 0.5) for name in metrics._TEST_METRICS}
        cols |= {"step": np.arange(n), "test_step": cfg.eval_every * np.arange(1, n_tests + 1)}
        cols |= progress_columns(cfg, n_tests)
        return [engine.RunOutput(c, cols, 0.1) for c in configs]

    monkeypatch.setattr(engine, "train", train)


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if anything starts training or building."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the paths were checked")

    monkeypatch.setattr(engine, "train", refuse)
    monkeypatch.setattr(experiment, "run_configs", refuse)
    monkeypatch.setattr("figures.build.build", refuse)
    monkeypatch.setattr("grokbench.quant.run_quant", refuse)


# --- 1. paths are checked before any work ---------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "fig2-top", *TINY, "--results", "{file}"],
        ["run", "fig2-top", *TINY, "--out", "{file}"],
        ["run", "fig2-top", *TINY, "--results", "/proc/x"],
        ["run", "fig2-top", *TINY, "--out", "/proc"],
        ["sweep", "fig4", *TINY, "--out", "{file}"],
        ["sweep", "fig4", *TINY, "--out", "/proc"],
        ["figures", "fig1a", "--out", "/proc/x"],
        ["figures", "fig1a", "--results", "{file}"],
        ["quant", "--quick", "--out", "/proc/x"],
        ["quant", "--quick", "--out", "{tmp}", "--results", "{file}"],
        ["equilibrium", "{tmp}", "--out", "{file}/sub"],
    ],
)
def test_bad_paths_fail_in_one_line_before_any_work(argv, tmp_path, capsys, no_work):
    file = tmp_path / "a_file"
    file.write_text("not a directory")
    argv = [a.format(file=file, tmp=tmp_path) for a in argv]
    assert _main(argv) == 2
    line = _one_line(capsys, "error: --")
    assert re.search(r"is not a directory|is a file|not writable|cannot be created", line), line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory_is_refused(tmp_path, capsys, no_work):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    assert _main(["run", "fig2-top", *TINY, "--results", str(locked)]) == 2
    _one_line(capsys, "not writable")


def test_disk_full_mid_run_says_so_and_keeps_finished_runs(
    tmp_path, capsys, monkeypatch, fake_engine
):
    real_write = store.atomic_write_bytes
    calls = []

    def fills_up(path, data):  # the first run's three files fit, then the disk is full
        calls.append(path)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_write(path, data)

    monkeypatch.setattr(store, "atomic_write_bytes", fills_up)
    root = tmp_path / "store"
    argv = ["run", "fig2-top", *TINY, "seeds=2", "--results", str(root), "--no-progress"]
    assert _main(argv) == 1
    line = _one_line(capsys, "disk is full")
    assert "1 run finished and stored" in line
    first, second = (
        RunConfig(
            p=7, d_model=8, n_heads=2, steps=20, eval_every=10, progress_measures=False, seed=s
        )
        for s in (0, 1)
    )
    saved = Store(root)
    assert saved.load_summary(first) is not None and saved.metrics_ok(first)
    assert saved.load_summary(second) is None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_unreachable_ray_address_is_one_line_at_once(tmp_path, capsys, no_work):
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_closed_port()}"
    argv = ["sweep", "fig4", *TINY, "--out", str(tmp_path / "s"), "--executor", "ray"]
    start = time.perf_counter()
    assert _main([*argv, "--ray-address", address]) == 2
    assert time.perf_counter() - start < 5
    line = _one_line(capsys, f"cannot reach the Ray cluster at {address}")
    assert "`ray start --head` prints the address to use" in line


def test_ray_connection_error_is_one_line(tmp_path, capsys, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(engine, "train", lambda *a, **k: pytest.fail("trained locally"))

    def unreachable(*args, **kwargs):  # what ray.init raises when the head does not answer
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "init", unreachable)
    argv = ["sweep", "fig4", *TINY, "--out", str(tmp_path / "s"), "--executor", "ray"]
    assert _main([*argv, "--no-progress", "--ray-address", "auto"]) == 2
    _one_line(capsys, "cannot reach the Ray cluster at auto (Could not find any running Ray")


def test_missing_ray_gives_the_install_line_for_a_clone(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(executors, "_ray_available", lambda: False)
    assert _main(["sweep", "fig4", "--out", str(tmp_path), "--executor", "ray"]) == 2
    _one_line(capsys, "pip install -e '.[ray]'")


# --- 2. Ctrl-C ---------------------------------------------------------------------------------


def test_ctrl_c_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "train", interrupted)
    argv = ["run", "fig2-top", *TINY, "--results", str(tmp_path), "--no-progress"]
    assert _main(argv) == 130
    line = _one_line(capsys, "interrupted")
    assert "0 runs finished and stored" in line and "Rerunning the same command resumes" in line


@pytest.mark.slow
def test_sigint_to_a_training_process_exits_130_promptly(tmp_path):
    shape = ["p=7", "d_model=8", "n_heads=2", "steps=10000000", "eval_every=10", "seeds=1"]
    argv = ["run", "fig2-top", *shape, "loss=fixed", "--no-progress"]
    # Ctrl-C as a terminal delivers it: a pytest started in the background by a
    # non-interactive shell ignores SIGINT, a child inherits an ignored (or blocked) signal
    # through exec, and Python then installs no KeyboardInterrupt handler. A handled one is
    # reset to the default in the child, so handle it, unblocked, while the child starts.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grokbench.cli", *argv, "--results", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, old)
    assert proc.stderr.readline().startswith("planned:")  # the forecast: training is under way
    start = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.perf_counter() - start < 5
    assert "Traceback" not in err and "interrupted" in err and len(err.strip().splitlines()) == 1


# --- 3. file modes -----------------------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_respect_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        store.atomic_write_bytes(tmp_path / "f.bin", b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == mode


# --- 4. one name for a dtype, short or long ----------------------------------------------------


def test_cliffs_takes_short_dtype_names(capsys):
    assert _main(["cliffs", "--json", "bf16"]) == 0
    assert '"dtype": "bfloat16"' in capsys.readouterr().out


def test_precision_takes_numpy_names_and_stores_the_short_one():
    cfg = RunConfig(precision="float32/bfloat16")
    assert cfg.precision == "fp32/bf16"
    assert config_hash(cfg) == config_hash(RunConfig(precision="fp32/bf16"))


# --- 6. long work says how long -----------------------------------------------------------------


def test_forecast_speaks_once_when_the_work_is_long():
    said, now = [], iter([0.0, 10.0, 11.0, 12.0])
    forecast = console._Forecast(
        10_000, "2 runs in 1 program", write=said.append, clock=lambda: next(now)
    )
    for _ in range(3):
        forecast.update(100)  # 100 run-steps per 10 s after the first chunk
    assert len(said) == 1 and said[0].startswith("planned: 2 runs in 1 program, 10,000 run-steps")
    assert "about 16.3 min more" in said[0]  # 9,800 run-steps left at 10 run-steps/s
    quick = console._Forecast(1000, "x", write=said.append, clock=iter([0.0, 1.0]).__next__)
    quick.update(100)
    quick.update(100)
    assert len(said) == 1 and quick.estimate == pytest.approx(8.0)


def test_run_prints_the_plan_when_the_forecast_is_long(tmp_path, capsys, monkeypatch, fake_engine):
    monkeypatch.setattr(console, "_LONG", 0.0)  # every run is "long"
    shape = ["p=7", "d_model=8", "n_heads=2", "steps=30", "eval_every=10", "seeds=1"]
    argv = ["run", "fig2-top", *shape, "loss=fixed", "--chunk", "10", "--results", str(tmp_path)]
    assert _main([*argv, "--no-progress"]) == 0
    assert "planned: 1 run in 1 program, 30 run-steps" in capsys.readouterr().err


# --- 7. help ----------------------------------------------------------------------------------


def test_bare_grokbench_lists_every_command_in_one_line_each(capsys):
    assert _main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: grokbench") and "parse, dispatch" not in err
    parser = app._build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        assert re.search(rf"^    {name} +\S", err, re.MULTILINE), name
        assert sub.description, f"{name} has no description"
        for action in sub._actions:
            assert action.help, f"{name} {action.dest} has no help"
    assert re.search(r"\(default:\s+out/figures\)", commands["figures"].format_help())


def test_keys_lists_every_override_key_with_default_and_meaning(capsys):
    from grokbench.quant import QuantConfig

    assert _main(["keys"]) == 0
    run, quant = capsys.readouterr().out.split("Override keys of `grokbench quant`")
    for out, cls in ((run, RunConfig), (quant, QuantConfig)):
        for field in dataclasses.fields(cls):
            if cls is QuantConfig and field.name in ("family", "variant"):
                continue  # chosen with families=... and variants=... (listed below)
            (line,) = [x for x in out.splitlines() if x.startswith(f"{field.name} ")]
            assert repr(field.default) in line and len(line.split(maxsplit=3)) == 4, line
    assert re.search(r"^seeds ", run, re.MULTILINE)
    assert re.search(r"^variants ", quant, re.MULTILINE)
    assert re.search(r"^families ", quant, re.MULTILINE)


# --- 8. did you mean ---------------------------------------------------------------------------


def test_run_suggests_recipes_and_names_the_figure(capsys):
    assert _main(["run", "fig2"]) == 2
    line = _one_line(capsys, "unknown recipe 'fig2'")
    assert (
        "did you mean fig2-top or fig2-top-seeds or fig2-bottom or fig2-bottom-cube or "
        "fig2-bottom-setup?" in line
    )
    assert "grokbench figures fig2" in line


def test_figures_given_a_recipe_names_its_figure(capsys):
    assert _main(["figures", "fig2-top"]) == 2
    line = _one_line(capsys, "fig2-top is a recipe")
    assert "its figure is fig2" in line
    assert _main(["figures", "fig8"]) == 2
    _one_line(capsys, "did you mean")


# --- 9 and 10. output that explains itself ----------------------------------------------------


def _fake_summaries(configs, store, **kwargs):
    return [
        {
            "config": cfg.to_dict(),
            "test_accuracy": 0.5,
            "train_accuracy": 1.0,
            "final_margin": 3.0,
            "max_train_loss_after_memorization": None,
            "spikes": 0,
            "seconds": 1.0,
            "cached": True,
        }
        for cfg in configs
    ]


def test_quick_run_says_it_is_too_short_and_names_the_full_recipe(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(experiment, "run_configs", _fake_summaries)
    assert _main(["run", "fig2-top", "--quick", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "* loaded from the store" in out  # the sec column's marker, explained
    assert "--quick (3,000 steps) is too short to grok" in out
    assert "`grokbench run fig2-top` (10 runs of 10,000 steps)" in out


def test_plurals():
    assert console.plural(1, "run") == "1 run" and console.plural(2, "program") == "2 programs"


def test_cliffs_headers_are_separated():
    row = cliffs._CliffRow("bfloat16", 8, 5.5, 5.6, 4.0, 87.5, -3.8e-3, -3.8e-3)
    header = cliffs._format_table([row]).splitlines()[0]
    assert len(re.split(r"\s{2,}", header.strip())) == 8, header


def test_a_bare_store_lists_runs_by_config_not_hash(tmp_path):
    configs = [RunConfig(loss=loss, seed=seed) for loss in ("standard", "fixed") for seed in (1, 0)]
    for cfg in configs:
        store.atomic_write_json(
            tmp_path / "runs" / config_hash(cfg) / "summary.json", {"config": cfg.to_dict()}
        )
    listed = [(s["config"]["loss"], s["config"]["seed"]) for s, _ in sweep.dir_runs(tmp_path)]
    assert listed == [("fixed", 0), ("fixed", 1), ("standard", 0), ("standard", 1)]


# --- 11. figures ---------------------------------------------------------------------------------


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The figure a draw function made, kept open instead of saved."""
    figs = []
    for module in (fig1, fig7):
        monkeypatch.setattr(module, "save", lambda fig, ctx, name: figs.append(fig) or [])
    yield figs
    plt.close("all")


def test_fig1a_legend_ticks_and_exact_zero_region(monkeypatch, tmp_path, drawn):
    def analytic(dtype, margins, truth=True):  # the layout, not the numerics: no JAX, no mpmath
        m = np.asarray(margins, np.float64)
        true = -np.exp(-m)
        true[-true < float(fig1.ml_dtypes.finfo(dtype).smallest_subnormal)] = 0.0
        cliff = fig1.numerics.precision_cliff(dtype)
        return {"m": m, "truth": true, "fixed": true, "standard": np.where(m < cliff, true, 0.0)}

    monkeypatch.setattr(fig1, "target_gradients", analytic)
    fig1.draw_fig1a(Context(quick=True, out=tmp_path, store=Store(tmp_path)))
    bf16, _, fp64 = drawn[0].axes
    assert bf16.get_legend() is None and fp64.get_legend() is not None
    exponents = [round(np.log10(t)) for t in fp64.get_yticks() if fp64.get_ylim()[0] <= t <= 1]
    assert exponents == [0, -100, -200, -300]
    for ax in drawn[0].axes:  # the past-the-cliff region is shaded and says what it is
        assert ax.patches and any("exactly 0" in t.get_text() for t in ax.texts)


def test_fig7_labels_its_zero_band_and_names_precisions_as_the_table(tmp_path, drawn):
    runs = []
    for precision, _ in fig7.PRECISIONS:
        for loss in ("standard", "fixed"):
            cfg = RunConfig(
                p=7,
                teacher_steps=10,
                optimizer="adam",
                weight_decay=0.0,
                steps=20,
                eval_every=1,
                precision=precision,
                loss=loss,
            )
            moving = np.r_[0.0, np.geomspace(1e-8, 1e-3, 19)]
            kl = moving if loss == "standard" else np.zeros(20)
            step = np.arange(20)
            metrics = {
                "step": step,
                "kl": kl,
                "param_distance": kl,
                "test_step": step,
                "test_acc": np.ones(20),
            }
            run = Run(cfg, {}, tmp_path)
            run.__dict__["metrics"] = metrics
            runs.append(run)
    ctx = Context(quick=True, out=tmp_path, store=Store(tmp_path))
    ctx.runs = lambda recipe: runs
    fig7.draw(ctx)
    axes = np.asarray(drawn[0].axes).reshape(3, 3)
    assert [ax.get_title() for ax in axes[0]] == ["fp32/bf16", "fp32", "fp64"]
    labels = [
        t.get_text() for ax in drawn[0].axes if ax.get_legend() for t in ax.get_legend().get_texts()
    ]
    assert labels == ["standard", "fixed"]
    for ax in axes[:2].ravel():
        assert any(t.get_text() == "band: exactly 0" for t in ax.texts)
        assert min(ax.get_yticks()) >= 1e5 * ax.get_ylim()[0]  # no decade labels the band
