"""Golden numbers, in nanodo's style: shrunken real configs whose first numbers are pinned.

The engine's numbers decide every stored run, so they may move only on purpose: a change
that moves them must bump a cache version (`CONFIG_VERSION` in grokbench/config.py,
`QUANT_VERSION` in grokbench/quant/config.py, ...) and re-record golden.json with
`python -m tests.grokbench.record_golden --record` (CONTRIBUTING.md).

The cases and their checks live in `tests/grokbench/golden.py`. Each is held three ways:
its program digest and config hash must match on every machine (so any change of the
computation fails everywhere, even one that moves the numbers by less than an ulp); its
values must repeat to the bit on a machine fingerprint recorded in golden.json, and lie
within the file's stated tolerance on any other (an unrecorded CPU rounds differently).

CPU only: another backend's kernels round differently and lower other programs.
"""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from grokbench import config, recipes
from tests.grokbench import golden

pytestmark = [
    pytest.mark.skipif(
        jax.default_backend() != "cpu", reason="golden numbers are those of the XLA CPU backend"
    ),
    pytest.mark.bitwise,
]

# Hashes that the per-program XLA options must leave alone: the width-64 reference config
# (fig2-top, Table 1) keeps the hash it had before them; width 128 takes a new one.
GOLDEN_REFERENCE_HASH = "58f966357f68ea7c"  # "54c6880ffb400c04" at CONFIG_VERSION 4
GOLDEN_WIDE_HASH = "82c6c7ae192cc860"  # another hash on XLA's default fusions
GOLDEN_FIG7_HASH = "52cc857a0a20318c"  # "29f341d09d75360a" at CONFIG_VERSION 4

UNRECORDED = "an-unrecorded-machine"  # a fingerprint id no record has


@pytest.fixture(scope="module")
def record() -> dict:
    return golden.load()


def test_versions_are_pinned(record):
    """Bumping a cache version must come with new goldens (and new goldens with a bump)."""
    assert record["versions"] == golden.versions(), (
        "a cache version changed: re-record golden.json (python -m tests.grokbench.record_golden"
        " --record --isa native,AVX,SSE4_2)"
    )


@functools.cache
def _computed(name: str) -> golden.Golden:
    return golden.CASES[name]()


# "elsewhere": the check an unrecorded CPU makes (values to the tolerance), on this
# machine's numbers, so both paths run on every machine.
@pytest.mark.parametrize("where", ["here", "elsewhere"])
@pytest.mark.parametrize("name", list(golden.CASES))
def test_case_is_golden(name, where, record):
    fingerprint = None if where == "here" else UNRECORDED
    failures = golden.mismatches(name, _computed(name), record, fingerprint)
    assert not failures, "\n".join(failures)


def test_tolerance_is_derived_from_the_recorded_spread(record):
    """Every pair of recorded machines agrees within a quarter of the tolerance, so it has
    its factor of 4 over the measured spread; a machine recorded later that breaks this
    says the tolerance must be revisited (with its reason in golden.json)."""
    assert len(record["machines"]) >= 2
    assert record["tolerance"]["reason"]
    spread = golden.spread_in_ulps(record)
    assert set(spread) == set(golden.CASES)
    assert max(spread.values()) <= record["tolerance"]["ulps"] / 4, spread


@pytest.mark.parametrize("fingerprint", ["recorded", UNRECORDED])
def test_a_change_of_one_ulp_fails_on_every_machine(fingerprint, record):
    """A one-ulp move of a value fails on a recorded machine; a change of the program (a
    reordered sum, a new constant) or of the config (b2 0.98 -> 0.9801) fails on any."""
    key = next(iter(record["machines"])) if fingerprint == "recorded" else fingerprint
    values = next(iter(record["machines"].values()))["values"]["reference"]
    same = golden.Golden(values, record["programs"]["reference"], record["configs"]["reference"])
    assert not golden.mismatches("reference", same, record, key)
    nudged = {m: list(np.nextafter(np.float32(v), np.float32(np.inf))) for m, v in values.items()}
    moved = golden.mismatches("reference", dataclasses.replace(same, values=nudged), record, key)
    assert bool(moved) == (fingerprint == "recorded"), moved  # within tolerance elsewhere
    reordered = dataclasses.replace(same, program="0" * 16)
    assert golden.mismatches("reference", reordered, record, key)
    b2 = config.config_hash(config.RunConfig(steps=3, eval_every=3, b2=0.9801))
    assert golden.mismatches("reference", dataclasses.replace(same, config=b2), record, key)


def test_xla_options_move_only_the_hashes_of_the_runs_they_change():
    assert golden.WIDE.d_model == 128 and config.xla_options(golden.WIDE)  # individual_dot
    assert config.xla_options(config.RunConfig()) == {}
    assert config.config_hash(config.RunConfig()) == GOLDEN_REFERENCE_HASH
    assert config.config_hash(golden.WIDE) == GOLDEN_WIDE_HASH


def test_distillation_hash_is_golden():
    """Only distillation runs hash DISTILL_VERSION: fig7 has its own, the others keep theirs."""
    assert config.config_hash(recipes.RECIPES["fig7"].base) == GOLDEN_FIG7_HASH
    assert config.config_hash(config.RunConfig()) == GOLDEN_REFERENCE_HASH
