"""The quant lab end to end, shrunk to seconds (same code path as the recipe, docs/style.md 13)."""

import dataclasses
import json
import time

import numpy as np
import pytest

from grokbench import quant
from grokbench.cli import main
from grokbench.config import ConfigError
from grokbench.quant import QuantConfig, parse_quant_overrides, quant_configs, run_quant
from grokbench.quant import table as quant_table
from grokbench.quant.recipes import _QUICK, QUANT
from grokbench.quant.train import train_batches
from tasks import quant as tasks_quant

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

TINY_FIELDS = {
    k: v for k, v in parse_quant_overrides(TINY).items() if k not in ("families", "variants")
}
"""The `QuantConfig` fields of TINY (the encoder's vanilla run)."""


@pytest.fixture(scope="module")
def _tiny_results(tmp_path_factory):
    """The store of TINY's runs: test_tiny_quant_run_end_to_end trains them, and
    test_other_activation_range_estimators evaluates its vanilla model (act_range is an
    evaluation setting: the same train hash), not training it again."""
    return tmp_path_factory.mktemp("tiny") / "results"


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_tiny_quant_run_end_to_end(tmp_path, capsys, _tiny_results):
    """Train, evaluate, quantize, write, load from the store, then the CLI with its figures.

    One test, so the compiled programs are built once (the decoder's probe is covered in
    tests/tasks/test_quant_probe.py, the quick recipe with every variant is marked slow).
    """
    results = _tiny_results
    table = run_quant(
        quick=False, out=tmp_path / "out", overrides=TINY, results=results, progress=False
    )
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
    assert rows[1]["gamma"] == -0.025 and rows[0]["gamma"] == 0.0  # BERT's clipped(-.025:1)
    on_disk = json.loads((tmp_path / "out" / "quant_table.json").read_text())
    assert on_disk["rows"] == json.loads(json.dumps(rows))
    md = (tmp_path / "out" / "quant_table.md").read_text()
    assert "| Method | FP ppl | Max inf. norm | Avg. kurtosis | W8A8 ppl" in md
    assert "Clipped softmax" in md

    # A second call loads every run from the store: nothing is retrained or re-evaluated
    # (the stored timings come back unchanged).
    again = run_quant(quick=False, out=None, overrides=TINY, results=results, progress=False)
    assert [r["train_seconds"] for r in again["rows"]] == [r["train_seconds"] for r in rows]
    assert [r["eval_seconds"] for r in again["rows"]] == [r["eval_seconds"] for r in rows]

    # A damaged record (a truncated params.npz, as a kill between writes could leave without
    # the store's atomic writes) is detected and redone; the other run is still loaded.
    vanilla = quant_configs(False, parse_quant_overrides(TINY))[0]  # with the recipe's corpus
    assert vanilla.variant == "vanilla"
    damaged = results / "quant" / "train" / vanilla.train_hash() / "params.npz"
    damaged.write_bytes(damaged.read_bytes()[:100])
    redone = run_quant(quick=False, out=None, overrides=TINY, results=results, progress=False)[
        "rows"
    ]
    assert redone[0]["train_seconds"] != rows[0]["train_seconds"]
    assert redone[1]["train_seconds"] == rows[1]["train_seconds"]

    out = tmp_path / "cli"
    argv = ["quant", *TINY, "--out", str(out), "--results", str(results), "--no-progress"]
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "quant_attention_encoder.pdf",  # the shared figures._common.save: PNG and PDF
        "quant_attention_encoder.png",
        "quant_outlier_dims_encoder.pdf",
        "quant_outlier_dims_encoder.png",
        "quant_table.json",
        "quant_table.md",
    ]
    assert "W8A8 ppl" in capsys.readouterr().out
    _check_tap_costs(tmp_path, results, rows)


def _check_tap_costs(tmp_path, results, rows):
    """`run_tap_costs` on the stored models: 'every tap' is evaluate's first calibration
    subset, the per-tap flags select (at 3 bits a single tap moves the perplexity)."""
    costs = quant.run_tap_costs(
        quick=False,
        out=tmp_path / "out",
        overrides=TINY,
        results=results,
        bits="w8a8,W3A3",
        progress=False,
    )
    assert [(c["variant"], c["bits"]) for c in costs] == [
        ("vanilla", "W8A8"), ("vanilla", "W3A3"), ("clipped", "W8A8"), ("clipped", "W3A3"),
    ]  # fmt: skip
    names = tasks_quant.quant_tap_names(QuantConfig(**TINY_FIELDS).model_config(32))
    for c, row in zip(costs[::2], rows, strict=True):
        assert c["all_taps_perplexity"] == row["w8a8_perplexity_runs"][0]
        assert c["fp_perplexity"] == row["fp_perplexity"]
        assert [t["tap"] for t in c["taps"]] == list(names)
    coarse = costs[1]
    base, full = coarse["weights_only_perplexity"], coarse["all_taps_perplexity"]
    assert any(t["only_this"] != base for t in coarse["taps"])
    assert any(t["all_but_this"] != full for t in coarse["taps"])
    assert all(t["lo"] <= t["hi"] for t in coarse["taps"])
    on_disk = json.loads((tmp_path / "out" / "quant_tap_costs.json").read_text())
    assert on_disk == json.loads(json.dumps(costs))
    md = (tmp_path / "out" / "quant_tap_costs.md").read_text()
    assert md.count("| tap | range | only this tap | every tap but this |") == 4


@pytest.mark.parametrize(
    "argv",
    [
        ["quant", "nonsense=1", "--out", "x"],
        ["quant", "steps=abc", "--out", "x"],
        ["quant", "variants=vanilla,bogus", "--out", "x"],
        ["quant", "act_range=median", "--out", "x"],
        ["quant", "variant=vanilla", "--out", "x"],
        ["quant", "gamma=0.1", "--out", "x"],
        ["quant", "pi_init=1.5", "--out", "x"],
        ["quant", "corpus=no_such_corpus", "--out", "x"],
        ["quant", "corpus=bigram_backcopy", "seq_len=100000", "steps=1", "--out", "x"],
        ["quant", "--tap-costs", "W9", "--out", "x"],
        ["quant", "--tap-costs", ",", "--out", "x"],
        ["quant", "--recipe", "quant-nope", "--out", "x"],
    ],
)
def test_cli_bad_overrides_exit_2_with_one_line(argv, capsys, tmp_path):
    assert main([*argv[:-1], str(tmp_path / argv[-1])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grokbench quant: error:") and err.count("\n") == 1


def test_config_defaults_hashes_and_checks():
    vanilla = QuantConfig(variant="vanilla")
    clipped = QuantConfig(family="decoder", variant="clipped", seq_len=128)
    assert vanilla.resolved("gamma") == 0.0 and vanilla.resolved("zeta") == 1.0
    # The paper's code: OPT's gamma = -alpha/T with alpha 12, BERT's a fixed -0.025.
    assert clipped.resolved("gamma") == -12.0 / 128
    assert QuantConfig(variant="clipped", seq_len=128).resolved("gamma") == -0.025
    assert QuantConfig(variant="clipped", gamma=-0.1).resolved("gamma") == -0.1
    decoder = QuantConfig(family="decoder")
    assert decoder.resolved("b2") == 0.95 and decoder.resolved("pi_init") == 0.25
    assert decoder.resolved("ln_weight_decay") is True  # OPT decays LN gamma in every variant
    assert QuantConfig().resolved("weight_decay") == 0.01
    assert QuantConfig().resolved("ln_weight_decay") is False
    # Evaluation settings do not retrain; alpha changes neither a softmax model nor the encoder.
    assert QuantConfig(bits="W8A8").train_hash() == vanilla.train_hash()
    assert QuantConfig(bits="W8A8").eval_hash() != vanilla.eval_hash()
    assert QuantConfig(alpha=2.0).train_hash() == vanilla.train_hash()
    enc_clipped = QuantConfig(variant="clipped")
    assert QuantConfig(variant="clipped", alpha=2.0).train_hash() == enc_clipped.train_hash()
    other = QuantConfig(family="decoder", variant="clipped", seq_len=128, alpha=2.0)
    assert other.train_hash() != clipped.train_hash()
    # A default written out is the same model: one record.
    assert QuantConfig(family="decoder", ln_weight_decay=True).train_hash() == decoder.train_hash()
    assert (
        QuantConfig(weight_decay=0.01, bits="W8A8").eval_hash()
        == QuantConfig(bits="W8A8").eval_hash()
    )
    assert QuantConfig(decay_lr=False).train_hash() != vanilla.train_hash()
    # Fields added later (ADDED_FIELDS) leave every hash as it was while at their default.
    assert not {"bos_noise", "corpus_chars"} & set(vanilla.train_dict())
    assert QuantConfig(bos_noise=0.0).train_hash() == vanilla.train_hash()
    assert QuantConfig(corpus_chars=400_000).train_hash() == vanilla.train_hash()
    assert QuantConfig(bos_noise=1.0).train_hash() != vanilla.train_hash()
    assert QuantConfig(corpus_chars=10_000).train_hash() != vanilla.train_hash()
    assert QuantConfig(lr=1).lr == 1.0 and isinstance(QuantConfig(lr=1).lr, float)
    bads = ({"variant": "x"}, {"bits": "W8"}, {"pi_init": 1.0}, {"pi_init": 0.0}, {"steps": 0})
    bads += ({"bos_noise": -1.0}, {"corpus_chars": 0}, {"corpus": "pydoc", "corpus_chars": 10})
    for bad in (*bads, {"d_model": 30}, {"gamma": 0.1}):  # gamma 0: Table 1's zeta alone
        with pytest.raises(ConfigError):
            QuantConfig(**bad)


def test_overrides_and_recipe_expansion():
    over = parse_quant_overrides(["steps=10", "families=decoder", "variants=gated,clipped"])
    configs = quant_configs(True, over)
    assert [(c.family, c.variant, c.steps) for c in configs] == [
        ("decoder", "gated", 10),
        ("decoder", "clipped", 10),
    ]
    assert configs[0].d_model == _QUICK["d_model"]
    assert [c.variant for c in quant_configs()] == [
        *("vanilla", "clipped", "gated_mlp"),  # BERT's MLP gate
        *("vanilla", "clipped", "gated"),  # OPT's linear gate
    ]
    with pytest.raises(ConfigError):
        parse_quant_overrides(["steps=1", "steps=2"])
    # The paper's ablations as sweep axes: a comma list for a numeric or bool field.
    over = parse_quant_overrides(["families=decoder", "variants=clipped", "alpha=2,4", "zeta=1"])
    assert (
        over["alpha"] == (2.0, 4.0)
        and over["zeta"] == 1.0
        and quant_table._sweep_axes(quant_configs(False, over)) == ("alpha",)
    )
    assert [c.alpha for c in quant_configs(False, over)] == [2.0, 4.0]
    over = parse_quant_overrides(["variants=gated", "ln_weight_decay=true,false"])
    assert [(c.family, c.ln_weight_decay) for c in quant_configs(False, over)] == [
        ("encoder", True),
        ("encoder", False),
        ("decoder", True),
        ("decoder", False),
    ]
    assert parse_quant_overrides(["bits=W8A8,W4A8"])["bits"] == "W8A8,W4A8"  # one string


@pytest.mark.slow
def test_quick_recipe_runs_in_minutes(tmp_path):
    """`grokbench quant --quick`: both families, every variant, under ~4 minutes here."""
    start = time.perf_counter()
    table = run_quant(
        quick=True, out=tmp_path / "out", results=tmp_path / "results", progress=False
    )
    assert len(table["rows"]) == 6
    assert time.perf_counter() - start < 300


# One variant the recipe leaves out in the fast tier: gated_all_heads, whose gate no other
# fast test trains. clipped_gated (a second model's programs) is the slow tier's; in the fast
# tier it trains a step in tests/tasks/test_quant_mechanisms.py (encoder-clipped_gated), and
# this recipe path runs here.
@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
@pytest.mark.parametrize(
    "variants",
    [("gated_all_heads",), pytest.param(("clipped_gated",), marks=pytest.mark.slow)],
    ids=lambda v: v[0],
)
def test_quick_recipe_at_tiny_size(tmp_path, variants):
    """`grokbench quant --quick`'s path (its QUICK settings) shrunk to a few steps, on the
    decoder with a variant the recipe leaves out, on the delimited corpus with a noisy
    [BOS]; the full-size quick recipe is the slow test above."""
    recipe = dataclasses.replace(QUANT, quick={**_QUICK, **_TINY_QUICK})
    overrides = {
        "families": ("decoder",),
        "variants": variants,
        "corpus": "delimited_backcopy",
        "corpus_chars": 5_000,
        "bos_noise": 1.0,
    }
    out, results = tmp_path / "out", tmp_path / "r"
    table = run_quant(
        quick=True, out=out, overrides=overrides, results=results, progress=False, recipe=recipe
    )
    assert table["quick"] and [r["variant"] for r in table["rows"]] == list(variants)
    assert all(c["steps"] == 2 and c["d_model"] == 16 for c in table["configs"])
    for r in table["rows"]:
        assert r["w8a8_perplexity"] > 0
        # What the delimiter claim reads: outliers and head mass on delimiters, per layer.
        assert len(r["outlier_share_on_delimiters"]) == 1
        assert 0 < r["delimiter_attention_by_layer"][0] <= r["max_head_delimiter_attention"]
        assert r["delimiter_share_of_tokens"] > 1 / 11  # '.' and [BOS]
        # Fig. 2's values: the parking head and its value-norm ratio, per layer too.
        layer, head = r["parking_head"]
        assert layer == 0 and 0 <= head < 2
        assert r["parking_head_value_ratio"] == r["delimiter_value_ratio_by_layer"][0] > 0


def test_bos_noise_has_a_stream_of_its_own():
    """A run with the noise sees the same text in the same order as the run without it."""
    corpus = tasks_quant.build_corpus("delimited_backcopy", n_chars=5_000)
    cfg = QuantConfig(family="decoder", d_model=16, n_heads=2, seq_len=16, batch_size=4)
    noisy = dataclasses.replace(cfg, bos_noise=2.0)
    plain = train_batches(cfg, corpus, np.random.default_rng(1), 3)
    batches = train_batches(noisy, corpus, np.random.default_rng(1), 3, np.random.default_rng(2))
    for a, b in zip(plain, batches, strict=True):
        assert "bos_noise" not in a and np.array_equal(a["tokens"], b["tokens"])
        assert b["bos_noise"].shape == (4, 16) and b["bos_noise"].dtype == np.float32
    assert 1.5 < float(np.std(np.concatenate([b["bos_noise"] for b in batches]))) < 2.5
    with pytest.raises(ValueError, match="noise_rng"):
        train_batches(noisy, corpus, np.random.default_rng(1), 1)


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


# slow: the percentile estimator's probe is a program of its own; fast siblings: the [mse]
# case (the lab's calibration with an estimator other than running min-max, the same
# _Runner.calibrate and evaluate) and tests/tasks/test_quant_probe.py::
# test_probe_on_a_tiny_gated_decoder (the probe with percentiles: its per-batch plo/phi are
# numpy's quantiles of each tap).
@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
@pytest.mark.parametrize("act_range", [pytest.param("percentile", marks=pytest.mark.slow), "mse"])
def test_other_activation_range_estimators(_tiny_results, act_range):
    tokens = [t for t in TINY if not t.startswith("variants=")] + ["variants=vanilla"]
    table = run_quant(
        quick=False,
        out=None,
        overrides=[*tokens, f"act_range={act_range}"],
        results=_tiny_results,  # one trained model for every estimator
        progress=False,
    )
    (row,) = table["rows"]
    assert row["w8a8_perplexity"] == pytest.approx(row["fp_perplexity"], rel=0.05)
    assert row["w6a6_perplexity"] > 0
