"""The shared table helpers: JSON-safe numbers, '-' for missing ones, varying keys, alignment."""

import math

import numpy as np

from grokbench.tables import align, finite_or_none, fmt, run_keys, summary_table, varying_keys


def test_finite_or_none():
    assert finite_or_none(np.float32(0.5)) == 0.5 and type(finite_or_none(np.float32(1))) is float
    assert finite_or_none(None) is None
    assert finite_or_none(math.nan) is None and finite_or_none(-math.inf) is None


def test_fmt():
    assert fmt(0.12345, ".2f") == "0.12"
    assert fmt(None, ".2f") == fmt(math.nan, ".2f") == fmt(math.inf, "g") == "-"


def test_keys_vary_and_seed_comes_last():
    configs = [{"seed": 0, "lr": 1.0, "p": 7}, {"seed": 1, "lr": 2.0, "p": 7}]
    assert varying_keys(configs) == ["seed", "lr"]
    assert run_keys(configs) == ["lr", "seed"]
    assert run_keys(configs[:1]) == ["seed"] and varying_keys([]) == []


def test_align():
    assert align([["a", "bb"], ["ccc", "d"]]) == "  a  bb\nccc   d"
    assert align([["x", "note"], ["long", "n"]], left_last=True) == "   x  note\nlong  n"


def test_summary_table_names_runs_and_marks_cached():
    summaries = [
        {"config": {"seed": 0, "lr": 1.0}, "acc": 0.5, "n": 3, "seconds": 1.25, "cached": True},
        {"config": {"seed": 1, "lr": 1.0}, "acc": None, "n": 4, "seconds": 10.0},
    ]
    table = summary_table(summaries, [("test_acc", "acc", ".2f"), ("n", "n", None)])
    assert table.splitlines() == [
        "seed  test_acc  n   sec",
        "   0      0.50  3  1.2*",
        "   1         -  4  10.0",
    ]
