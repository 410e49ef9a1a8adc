"""The shared table helpers: JSON-safe numbers, '-' for missing ones, varying keys, alignment."""

import math

import numpy as np

from grokbench.tables import align, finite_or_none, fmt, run_keys, varying_keys


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
