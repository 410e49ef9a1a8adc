"""The examples under examples/ run, at a tiny size, and show what their docstrings say."""

import importlib.util
import io
import pathlib

import jax
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_collapse_monitor_shows_collapse_with_optax_and_none_with_numerics():
    monitor = _load("collapse_monitor")
    out = io.StringIO()
    tiny = ["--steps", "60", "--examples", "32", "--width", "32", "--lr", "1e-2"]
    # optax.adam's bias correction mixes int32 and float: run as users do, with JAX's
    # standard promotion rather than the suite's strict one.
    with jax.numpy_dtype_promotion("standard"):
        stats = monitor.main([*tiny, "--log-every", "30"], out=out)
    optax_stats, fixed = stats["optax"], stats["numerics"]
    # Both losses drive the margins past bf16's cliff ...
    assert optax_stats["frac_past_cliff"] > 0.5 and fixed["frac_past_cliff"] > 0.5
    # ... where optax's target gradients are exactly 0 and the fixed ones never are.
    assert optax_stats["frac_zero_target_grad"] > 0.5
    assert fixed["frac_zero_target_grad"] == 0.0
    # Collapsed rows keep their other gradients: the row sums are e^-m-sized, not rounding.
    assert fixed["grad_sum_max"] < optax_stats["grad_sum_max"] / 10
    assert "zero target grad" in out.getvalue()


def test_collapse_monitor_rejects_bad_sizes(capsys):
    monitor = _load("collapse_monitor")
    with pytest.raises(SystemExit) as exit_info:
        monitor.main(["--classes", "1"])
    assert exit_info.value.code == 2
    assert "--classes >= 2" in capsys.readouterr().err
