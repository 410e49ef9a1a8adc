"""The ten-minute GPU recipe (`benchmarks/gpu_quant_10min.sh` and `benchmarks/quant_budget.py`):
end to end on the CPU at a tiny size, its FLOP count against XLA's, its budget arithmetic."""

import json
import os
import pathlib
import subprocess
import sys
import tarfile

import jax
import jax.numpy as jnp
import pytest

from grokbench.quant import QuantConfig
from tasks.quant import lm_head_loss_sums, quant_model_hidden, quant_model_init
from tests.tasks._compile import FAST_COMPILE

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import quant_budget  # noqa: E402  (a script's module, found through the path above)

TINY = [
    "n_layers=1",
    "d_model=16",
    "n_heads=2",
    "seq_len=16",
    "batch_size=4",
    "corpus_chars=20000",
    "eval_batches=1",
    "calib_batches=1",
    "calib_subsets=1",
    "bits=W8A8",
]


def _script(tmp_path, budget_s, *args):
    # XLA's cheapest compile: this tests the script, not its speed, and nearly all of its
    # time at this size is compiling (half of it with level 0 alone).
    fast = " ".join(f"--{k}={str(v).lower()}" for k, v in FAST_COMPILE.items())
    env = {
        **os.environ,
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {fast}".strip(),
        "OUT": str(tmp_path / "out"),
        "GROKBENCH_RESULTS": str(tmp_path / "store"),
        "BUDGET_S": str(budget_s),
        "MAX_STEPS": "100",
    }
    cmd = ["bash", "benchmarks/gpu_quant_10min.sh", *TINY, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _check_decoder(tmp_path, proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "timing: 100 steps with the compile" in out and "ms per step" in out
    assert "plan: vanilla, gated, 100 steps each" in out and "FLOP per training step" in out
    table = json.loads((tmp_path / "out" / "decoder" / "quant_table.json").read_text())
    assert [r["variant"] for r in table["rows"]] == ["vanilla", "gated"]
    assert all(c["steps"] == 100 and c["d_model"] == 16 for c in table["configs"])
    assert all(r["w8a8_perplexity"] > 0 for r in table["rows"])
    with tarfile.open(tmp_path / "out" / "quant_records.tar.xz") as tar:
        names = tar.getnames()
    assert sum(n.endswith("summary.json") for n in names) >= 4  # train and eval, both models
    assert not any(n.endswith("params.npz") for n in names)
    assert len(list((tmp_path / "out").glob("quant_params-*.tar.xz"))) >= 2


@pytest.mark.slow  # a bash script and two fresh Python processes; the planner stays fast
def test_ten_minute_script_end_to_end_at_a_tiny_size(tmp_path):
    """The decoder pair within its budget; the encoder's pair is skipped before its compile."""
    proc = _script(tmp_path, 300, "--encoder-min-steps", "1000000")
    _check_decoder(tmp_path, proc)
    assert "== encoder: skipped" in proc.stdout
    assert not (tmp_path / "out" / "encoder").exists()


@pytest.mark.slow
def test_ten_minute_script_runs_the_encoder_when_time_allows(tmp_path):
    proc = _script(tmp_path, 600, "--encoder-min-steps", "100")
    _check_decoder(tmp_path, proc)
    table = json.loads((tmp_path / "out" / "encoder" / "quant_table.json").read_text())
    assert [r["variant"] for r in table["rows"]] == ["vanilla", "gated_mlp"]


@pytest.mark.parametrize("family", ["decoder", "encoder"])
def test_train_flops_match_xla_within_the_elementwise_share(family):
    """`train_flops` counts matmuls only; XLA's count of the whole training gradient adds the
    elementwise work, LayerNorms and softmaxes: a few percent at width 128 (10% allowed)."""
    cfg = QuantConfig(family=family, n_layers=2, d_model=128, n_heads=4, seq_len=64, batch_size=2)
    model = cfg.model_config(32)
    params = jax.eval_shape(lambda: quant_model_init(jax.random.key(0), model))
    tokens = jax.ShapeDtypeStruct((cfg.batch_size, cfg.seq_len), jnp.int32)
    weights = jax.ShapeDtypeStruct((cfg.batch_size, cfg.seq_len), jnp.float32)

    def loss(p, t, w):
        total, count = lm_head_loss_sums(p, quant_model_hidden(p, t, t, model), t, w)
        return total / count

    xla = jax.jit(jax.value_and_grad(loss)).lower(params, tokens, weights).cost_analysis()
    ratio = xla["flops"] / quant_budget.train_flops(cfg, 32)
    assert 1.0 <= ratio <= 1.10, ratio


def test_plan_fits_the_steps_to_what_is_left():
    plan = quant_budget.Plan(budget_s=100.5, margin=0.0)  # 0.5 s for the clock to run
    plan.start -= 20.0  # 80 s left
    # Two models, 20 s reserved: 30 s of training each at 0.01 s a step.
    assert plan.steps(2, 0.01, 20.0, None) == 3000
    assert plan.steps(2, 0.01, 20.0, 1000) == 1000  # the cap
    assert plan.steps(2, 0.7, 20.0, None) == 0  # not one chunk of 100 fits
    half = quant_budget.Plan(budget_s=101.0, margin=0.5)  # 50 s usable
    assert half.steps(1, 0.01, 0.0, None) == 5000
