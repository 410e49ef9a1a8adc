"""One lab interface (`grokbench.labs`): every recipe has one lab, and `grokbench run` and
`sweep` on a quant-lab recipe store the runs `grokbench quant` stores and print its table."""

import json
import pathlib

import pytest

from grokbench import labs
from grokbench.cli import commands, main
from grokbench.quant import run_quant
from grokbench.quant import table as quant_table

TINY = [
    "n_layers=1",
    "d_model=16",
    "n_heads=2",
    "seq_len=16",
    "batch_size=8",
    "steps=2",
    "eval_batches=1",
    "calib_batches=1",
    "calib_subsets=1",
    "bits=W8A8",
    "weight_range=minmax",
]
"""tests/grokbench/test_quant.py's sizes, 2 steps, one bit width, one calibration batch."""


def test_every_listed_recipe_has_exactly_one_lab(capsys):
    assert main(["recipes"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if " runs (" in line]
    assert listed and sorted(listed) == sorted(labs.recipe_names())
    for name in listed:
        owners = [lab.name for lab in labs.LABS.values() if name in lab.recipes]
        assert len(owners) == 1, (name, owners)
        assert labs.lab_for(name).name == owners[0]
    assert set(labs.LABS) == {"grokking", "distillation", "quant"}
    assert (
        labs.lab_for("fig7") is labs.LABS["distillation"]
        and labs.lab_for("quant-gamma") is labs.QUANT
    )


def _records(root: pathlib.Path) -> dict[str, dict]:
    """'train/HASH' or 'eval/HASH' -> its summary.json, without the timings (paths in the
    store as ROOT/...)."""
    out = {}
    for path in sorted(root.glob("quant/*/*/summary.json")):
        summary = json.loads(path.read_text().replace(str(root), "ROOT"))
        key = f"{path.parent.parent.name}/{path.parent.name}"
        out[key] = {k: v for k, v in summary.items() if "seconds" not in k}
    return out


def _table(out: pathlib.Path) -> dict:
    table = json.loads((out / "quant_table.json").read_text().replace(str(out), "ROOT"))
    rows = [{k: v for k, v in r.items() if "seconds" not in k} for r in table["rows"]]
    return {**table, "rows": rows, "seconds": None}


def _printed(capsys, *paths: pathlib.Path) -> str:
    text = capsys.readouterr().out
    for path in paths:
        text = text.replace(str(path), "DIR")
    return text


# slow: two full quant-lab commands with their figures. Fast siblings: the sweep test below
# (the quant lab through the lab interface, its store, table and printout equal to
# `grokbench quant`'s), tests/grokbench/test_quant.py::test_tiny_quant_run_end_to_end (`grokbench
# quant`: lab.train, lab.write and the figures this command draws) and
# tests/grokbench/test_cli.py::test_summary_json_contract (`grokbench run` itself).
@pytest.mark.slow
@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_run_quant_recipe_is_grokbench_quant(tmp_path, capsys):
    """The same store records (hash directories and summaries), table and printout."""
    tokens = [*TINY, "families=encoder", "variants=vanilla"]
    a, b = tmp_path / "a", tmp_path / "b"
    quiet = ["--no-progress"]
    assert main(["run", "quant", *tokens, "--results", str(a), "--out", str(a), *quiet]) == 0
    by_run = _printed(capsys, a)
    assert main(["quant", *tokens, "--results", str(b), "--out", str(b), *quiet]) == 0
    assert _printed(capsys, b) == by_run
    assert "W8A8 ppl" in by_run and "wrote DIR/quant_table.json, DIR/quant_table.md" in by_run
    records = _records(a)
    assert sorted(k.split("/")[0] for k in records) == ["eval", "train"]
    assert records == _records(b)
    assert _table(a) == _table(b)
    assert sorted(p.name for p in a.glob("quant_*")) == sorted(p.name for p in b.glob("quant_*"))


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_sweep_quant_gamma_is_grokbench_quant_recipe(tmp_path, capsys, monkeypatch):
    """`sweep quant-gamma --out DIR` stores in DIR what `quant --recipe quant-gamma` stores.
    Its figures are the ones tests/grokbench/test_quant.py::test_tiny_quant_run_end_to_end
    draws (drawing them would take two thirds of this test)."""
    drawn = []
    monkeypatch.setitem(commands._DRAW, "quant", lambda table, out: drawn.append(out) or [])
    quiet = ["--no-progress"]
    out, ref = tmp_path / "sweep", tmp_path / "ref"
    assert main(["sweep", "quant-gamma", *TINY, "--out", str(out), *quiet]) == 0
    swept = _printed(capsys, out)
    argv = ["quant", "--recipe", "quant-gamma", *TINY, "--out", str(ref), "--results", str(ref)]
    assert main([*argv, *quiet]) == 0
    assert _printed(capsys, ref) == swept and "Clipped softmax, gamma=" in swept
    assert len(_records(out)) == 2 * 7  # the recipe's 7 runs, trained and evaluated
    assert _records(out) == _records(ref)
    assert _table(out) == _table(ref) and drawn == [out, ref]
    # Rerun: everything is loaded from DIR, nothing retrained.
    before = {p: p.stat().st_mtime_ns for p in out.glob("quant/*/*/summary.json")}
    assert main(["sweep", "quant-gamma", *TINY, "--out", str(out), *quiet]) == 0
    assert capsys.readouterr().out == swept.replace("DIR", str(out))
    assert {p: p.stat().st_mtime_ns for p in out.glob("quant/*/*/summary.json")} == before


def test_sweep_quant_refuses_the_grokking_executor_options(tmp_path, capsys):
    assert main(["sweep", "quant", "--out", str(tmp_path), "--batch", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "grokbench sweep: error: the quant lab trains in this process: no --executor or --batch"
    )


def test_unknown_recipe_suggests_every_labs_recipes(capsys):
    assert main(["run", "quant-gama"]) == 2
    assert "did you mean quant-gamma" in capsys.readouterr().err


def test_run_quant_takes_keywords_only():
    """Positional calls are a TypeError."""
    with pytest.raises(TypeError, match="positional argument"):
        run_quant(True, None)
    with pytest.raises(TypeError, match="positional argument"):
        quant_table.run_tap_costs(True, None)
