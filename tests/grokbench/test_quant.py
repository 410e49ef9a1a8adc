"""The quant lab end to end, shrunk to seconds (same code path as the recipe, docs/style.md 13)."""

import inspect
import json
import time

import pytest

from grokbench import quant, quant_eval, quant_train
from grokbench.cli import main
from grokbench.config import ConfigError
from grokbench.quant import QuantConfig, parse_quant_overrides, quant_configs, run_quant

TINY = [
    "n_layers=1",
    "d_model=16",
    "n_heads=2",
    "seq_len=16",
    "batch_size=8",
    "steps=3",
    "eval_batches=1",
    "calib_batches=2",
    "calib_subsets=2",
    "families=encoder",
    "variants=vanilla,clipped",
    "bits=W8A8,W6A6",
    "weight_range=minmax",
]


def test_tiny_quant_run_end_to_end(tmp_path, capsys):
    """Train, evaluate, quantize, write, load from the store, then the CLI with its figures.

    One test, so the compiled programs are built once (the decoder's probe is covered in
    tests/tasks/test_quant_probe.py, the quick recipe with every variant is marked slow).
    """
    results = tmp_path / "results"
    table = run_quant(False, tmp_path / "out", TINY, results=results, progress=False)
    rows = table["rows"]
    assert [(r["family"], r["variant"]) for r in rows] == [
        ("encoder", "vanilla"),
        ("encoder", "clipped"),
    ]
    for r in rows:
        for col in ("fp_perplexity", "max_inf_norm", "avg_kurtosis", "w8a8_perplexity"):
            assert r[col] > 0, col
        for bits in ("w8a8", "w6a6"):
            assert len(r[f"{bits}_perplexity_runs"]) == 2
            assert r[f"{bits}_perplexity_std"] >= 0
    assert rows[1]["gamma"] == pytest.approx(-4.0 / 16) and rows[0]["gamma"] == 0.0
    on_disk = json.loads((tmp_path / "out" / "quant_table.json").read_text())
    assert on_disk["rows"] == json.loads(json.dumps(rows))
    md = (tmp_path / "out" / "quant_table.md").read_text()
    assert "| Method | FP ppl | Max inf. norm | Avg. kurtosis | W8A8 ppl" in md
    assert "Clipped softmax" in md

    # A second call loads every run from the store: nothing is retrained or re-evaluated
    # (the stored timings come back unchanged).
    again = run_quant(False, None, TINY, results=results, progress=False)
    assert [r["train_seconds"] for r in again["rows"]] == [r["train_seconds"] for r in rows]
    assert [r["eval_seconds"] for r in again["rows"]] == [r["eval_seconds"] for r in rows]

    out = tmp_path / "cli"
    argv = ["quant", *TINY, "--out", str(out), "--results", str(results), "--no-progress"]
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "quant_attention_encoder.png",
        "quant_outlier_dims_encoder.png",
        "quant_table.json",
        "quant_table.md",
    ]
    assert "W8A8 ppl" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["quant", "nonsense=1", "--out", "x"],
        ["quant", "steps=abc", "--out", "x"],
        ["quant", "variants=vanilla,bogus", "--out", "x"],
        ["quant", "act_range=median", "--out", "x"],
        ["quant", "variant=vanilla", "--out", "x"],
    ],
)
def test_cli_bad_overrides_exit_2_with_one_line(argv, capsys, tmp_path):
    assert main([*argv[:-1], str(tmp_path / argv[-1])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grokbench quant: error:") and err.count("\n") == 1


def test_config_defaults_hashes_and_checks():
    vanilla = QuantConfig(variant="vanilla")
    clipped = QuantConfig(variant="clipped", seq_len=128, alpha=4.0)
    assert vanilla.resolved("gamma") == 0.0 and vanilla.resolved("zeta") == 1.0
    assert clipped.resolved("gamma") == -4.0 / 128
    assert QuantConfig(variant="clipped", gamma=-0.025).resolved("gamma") == -0.025
    assert QuantConfig(family="decoder").resolved("b2") == 0.95
    assert QuantConfig().resolved("weight_decay") == 0.01
    # Evaluation settings do not retrain; alpha does not change a softmax model.
    assert QuantConfig(bits="W8A8").train_hash() == vanilla.train_hash()
    assert QuantConfig(bits="W8A8").eval_hash() != vanilla.eval_hash()
    assert QuantConfig(alpha=2.0).train_hash() == vanilla.train_hash()
    assert QuantConfig(variant="clipped", alpha=2.0).train_hash() != clipped.train_hash()
    assert QuantConfig(lr=1).lr == 1.0 and isinstance(QuantConfig(lr=1).lr, float)
    for bad in ({"variant": "x"}, {"bits": "W8"}, {"pi_init": 1.0}, {"steps": 0}, {"d_model": 30}):
        with pytest.raises(ConfigError):
            QuantConfig(**bad)


def test_overrides_and_recipe_expansion():
    over = parse_quant_overrides(["steps=10", "families=decoder", "variants=gated,clipped"])
    configs = quant_configs(True, over)
    assert [(c.family, c.variant, c.steps) for c in configs] == [
        ("decoder", "gated", 10),
        ("decoder", "clipped", 10),
    ]
    assert configs[0].d_model == quant.QUICK["d_model"]
    assert len(quant_configs()) == 2 * len(quant.VARIANTS)
    with pytest.raises(ConfigError):
        parse_quant_overrides(["steps=1", "steps=2"])


@pytest.mark.parametrize("module", [quant, quant_train, quant_eval])
def test_public_names_are_documented(module):
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), name


@pytest.mark.slow
def test_quick_recipe_runs_in_minutes(tmp_path):
    """`grokbench quant --quick`: both families, every variant, under ~4 minutes here."""
    start = time.perf_counter()
    table = run_quant(True, tmp_path / "out", None, results=tmp_path / "results", progress=False)
    assert len(table["rows"]) == 2 * len(quant.VARIANTS)
    assert time.perf_counter() - start < 300


def test_quick_recipe_at_tiny_size(tmp_path, monkeypatch):
    """`grokbench quant --quick`'s path (its QUICK settings) shrunk to a few steps, on the
    decoder with the two gates the encoder test above leaves out; the full-size quick recipe
    (both families, every variant) is the slow test above."""
    monkeypatch.setattr(quant, "QUICK", {**quant.QUICK, **_TINY_QUICK})
    variants = ("gated_all_heads", "clipped_gated")
    overrides = {"families": ("decoder",), "variants": variants}
    table = run_quant(True, tmp_path / "out", overrides, results=tmp_path / "r", progress=False)
    assert table["quick"] and [r["variant"] for r in table["rows"]] == list(variants)
    assert all(c["steps"] == 2 and c["d_model"] == 16 for c in table["configs"])
    assert all(r["w8a8_perplexity"] > 0 for r in table["rows"])


_TINY_QUICK = {
    "n_layers": 1,
    "d_model": 16,
    "n_heads": 2,
    "seq_len": 16,
    "batch_size": 4,
    "steps": 2,
    "eval_batches": 1,
    "calib_batches": 1,
    "calib_subsets": 1,
    "bits": "W8A8",
}


@pytest.fixture(scope="module")
def _estimator_results(tmp_path_factory):
    return tmp_path_factory.mktemp("estimators")  # one trained model for every estimator


@pytest.mark.parametrize("act_range", ["percentile", "mse"])
def test_other_activation_range_estimators(_estimator_results, act_range):
    tokens = [t for t in TINY if not t.startswith("variants=")] + ["variants=vanilla"]
    table = run_quant(
        False,
        None,
        [*tokens, f"act_range={act_range}"],
        results=_estimator_results,
        progress=False,
    )
    (row,) = table["rows"]
    assert row["w8a8_perplexity"] == pytest.approx(row["fp_perplexity"], rel=0.05)
    assert row["w6a6_perplexity"] > 0
