"""tasks.compiled_cache: bounded caches of compiled programs, all cleared by one call."""

import importlib
import pathlib
import re

import pytest

import tasks
from grokbench import engine

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Every cache of compiled programs in the packages, by module and builder.
CACHES = {
    "grokbench.engine._compiled",
    "grokbench.distill._compiled",
    "grokbench.balance._radial_slope",
    "grokbench.quant.train._programs",
    "tasks.quant._probe._make_probe",
    "tasks.quant._probe._tap_names",
    "figures._analytic._target_grad",
}

# functools caches that hold no program: host facts probed once per process, and the
# figure modules found once.
HOST_FACTS = {
    "grokbench/runtime.py",  # the machine fingerprint and float16 probe
    "grokbench/config.py",  # each config class's resolved annotations
    "figures/registry.py",  # the figure modules, found once
    "figures/_analytic.py",  # mpmath's exact gradients of fixed inputs (64 entries)
    "figures/report/fig1.py",  # fig1's claims: one jitted loss or gradient per measurement
    "figures/report/fig3.py",  # Adam's step sizes of fixed residuals (arrays, no program)
    "grokbench/quant/table.py",  # generated corpora, built once per process (4 entries)
}


def test_least_recently_used_results_go_first():
    calls = []

    @tasks.compiled_cache(maxsize=2)
    def build(key):
        calls.append(key)
        return object()

    a = build("a")
    build("b")
    assert build("a") is a  # a hit: "a" is now the most recently used
    build("c")  # evicts "b"
    build("b")
    assert calls == ["a", "b", "c", "b"]
    assert build.cache_info().maxsize == 2 and build.cache_info().currsize == 2


@pytest.mark.parametrize("maxsize, error", [(None, TypeError), (0, ValueError), (True, TypeError)])
def test_every_cache_is_bounded(maxsize, error):
    with pytest.raises(error, match="maxsize"):
        tasks.compiled_cache(maxsize=maxsize)


def test_one_call_clears_every_cache():
    @tasks.compiled_cache(maxsize=4)
    def build(key):
        return [key]

    build(1)
    first = build(2)
    engine.clear_compiled()  # the engine's clear is everyone's
    assert build.cache_info().currsize == 0
    assert build(2) is not first
    tasks.clear_compiled_caches()
    assert build.cache_info().currsize == 0


def test_every_program_cache_is_registered():
    for name in {c.rsplit(".", 1)[0] for c in CACHES}:
        importlib.import_module(name)
    registered = {f"{f.__module__}.{f.__qualname__}" for f in tasks.compiled_caches()}
    assert registered >= CACHES, CACHES - registered


def test_no_unbounded_cache_is_left():
    """Program caches go through `tasks.compiled_cache`; plain functools caches only where
    they hold no program (HOST_FACTS)."""
    pattern = re.compile(
        r"functools\.(cache|lru_cache)\b|from functools import .*\b(cache|lru_cache)\b"
    )
    found = set()
    for package in ("tasks", "grokbench", "figures"):  # numerics cannot import tasks
        for path in (ROOT / package).rglob("*.py"):
            if pattern.search(path.read_text(encoding="utf-8")):
                found.add(path.relative_to(ROOT).as_posix())
    assert found == HOST_FACTS | {"tasks/_compiled.py"}
