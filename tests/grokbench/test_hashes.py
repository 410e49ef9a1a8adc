"""Stored runs keep their names: every recipe's config hashes and the quant lab's, recorded.

stored_hashes.json holds, per recipe and variant (full, `--quick`), the number of configs and
a digest of their sorted `config_hash`es, and the quant lab's recipe, quick variant and
ablation configs (as their fields that differ from `QuantConfig()`) with their train and eval
hashes. It was recorded from the code before the hash helper moved to `grokbench.versions`;
a refactor of hashing, configs or recipes must leave every one of them as it is.

A cache-version bump renames stored runs on purpose: re-record then (and say why in the
commit), with

    python -m tests.grokbench.test_hashes --record
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys

from grokbench import quant, recipes, versions
from grokbench.config import config_hash
from grokbench.quant import QuantConfig
from grokbench.quant.recipes import QUANT_RECIPES
from tests.grokbench import golden

RECORD = pathlib.Path(__file__).with_name("stored_hashes.json")
_VERSIONS = ("CONFIG_VERSION", "DISTILL_VERSION", "QUANT_VERSION", "QUANT_EVAL_VERSION")


def _recipe_hashes() -> dict[str, dict[str, list]]:
    """recipe -> {"full"|"quick": [number of configs, digest of their sorted hashes]}."""
    out = {}
    for name, recipe in recipes.RECIPES.items():
        out[name] = {}
        for variant, quick in (("full", False), ("quick", True)):
            hashes = sorted(config_hash(cfg) for cfg in recipes.expand(recipe, quick=quick))
            digest = hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:16]
            out[name][variant] = [len(hashes), digest]
    return out


def _quant_hashes(fields_list: list[dict]) -> list[dict]:
    return [
        {"fields": f, "train": QuantConfig(**f).train_hash(), "eval": QuantConfig(**f).eval_hash()}
        for f in fields_list
    ]


def _quant_fields() -> list[dict]:
    """The quant lab's recipe (full and quick) and ablation configs, as their non-defaults."""
    configs = quant.quant_configs(False) + quant.quant_configs(True)
    for recipe in quant.ABLATIONS.values():
        configs += quant.quant_configs(True, None, recipe)
        configs += quant.quant_configs(False, None, recipe)  # the encoder's at full scale
    for name in ("quant-constant-lr", "quant-mechanisms"):  # full scale: new runs of issue 44
        configs += quant.quant_configs(False, None, QUANT_RECIPES[name])
    default = QuantConfig().to_dict()
    return [{k: v for k, v in c.to_dict().items() if v != default[k]} for c in configs]


def _record() -> dict:
    return {
        "versions": {name: getattr(versions, name) for name in _VERSIONS},
        "recipes": _recipe_hashes(),
        "quant": _quant_hashes(_quant_fields()),
    }


def _load() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


def test_versions_are_the_recorded_ones():
    """Every hash below depends on these: a bump means re-recording (module docstring)."""
    assert _load()["versions"] == {name: getattr(versions, name) for name in _VERSIONS}


def test_golden_pins_every_cache_version():
    """tests/grokbench/golden.py's VERSIONS names every version `grokbench.versions` declares."""
    declared = {name for name in versions.__all__ if name.endswith("_VERSION")}
    assert sorted(golden.VERSIONS.values()) == sorted(declared)


def test_every_recipe_keeps_its_config_hashes():
    recorded = _load()["recipes"]
    now = _recipe_hashes()
    assert set(recorded) <= set(now), set(recorded) - set(now)
    moved = {name: (now[name], want) for name, want in recorded.items() if now[name] != want}
    assert not moved, moved


def test_quant_configs_keep_their_hashes():
    recorded = _load()["quant"]
    assert len(recorded) >= 20  # the recipe, its quick variant and the ablations
    assert _quant_hashes([entry["fields"] for entry in recorded]) == recorded


def test_quant_recipe_makes_the_recorded_configs():
    assert [entry["fields"] for entry in _load()["quant"]] == _quant_fields()


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python -m tests.grokbench.test_hashes --record")
    RECORD.write_text(json.dumps(_record(), indent=1) + "\n", encoding="utf-8")
    print(f"recorded {RECORD}")
