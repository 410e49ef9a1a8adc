"""RunConfig validation, typed overrides, hashing, and recipe expansion (no training here)."""

import dataclasses

import pytest

from grokbench import recipes
from grokbench.config import (
    _VMAPPED,
    ConfigError,
    RunConfig,
    _parse_value,
    config_hash,
    group_key,
    identity,
    parse_overrides,
)

REQUIRED_RECIPES = [
    "fig2-top",
    "fig2-bottom",
    "fig2-bottom-cube",
    "fig2-bottom-setup",
    "table1",
    "fig6-mod113",
    "fig6-mod31",
    "fig6-sq",
    "fig6-cube",
    "fig4",
    "fig7",
    "orthograd",
    "eps-settle",
]
CONTRACT_KEYS = [
    "task",
    "p",
    "train_fraction",
    "model",
    "optimizer",
    "lr",
    "b1",
    "b2",
    "eps",
    "weight_decay",
    "precision",
    "loss",
    "steps",
]


def test_defaults_are_the_reference_config():
    cfg = RunConfig()
    assert (cfg.task, cfg.p, cfg.train_fraction, cfg.d_model) == ("a+b", 31, 0.5, 64)
    assert (cfg.optimizer, cfg.lr, cfg.b1, cfg.b2, cfg.eps) == ("adamw", 1e-3, 0.9, 0.98, 1e-8)
    assert (cfg.weight_decay, cfg.precision, cfg.steps) == (1.0, "fp32", 10_000)
    # The unstated choices, as the reference trainers make them (grokbench/recipes.py).
    assert (cfg.split, cfg.init, cfg.warmup_steps, cfg.eq_output) == ("per_seed", "nanda", 0, False)


@pytest.mark.parametrize("key", CONTRACT_KEYS)
def test_contract_keys_are_overridable(key):
    assert key in {f.name for f in dataclasses.fields(RunConfig)}


@pytest.mark.parametrize(
    "token, expected",
    [
        ("steps=200", {"steps": (200,)}),
        ("eps=1e-12", {"eps": (1e-12,)}),
        ("eps=0", {"eps": (0.0,)}),
        ("eps=1e-8,1e-12", {"eps": (1e-8, 1e-12)}),
        ("layer_norm=true", {"layer_norm": (True,)}),
        ("d_mlp=none", {"d_mlp": (None,)}),
        ("d_mlp=256", {"d_mlp": (256,)}),
        ("precision=fp32/bf16", {"precision": ("fp32/bf16",)}),
        ("seeds=3", {"seeds": (3,)}),
        ("loss=fixed,standard", {"loss": ("fixed", "standard")}),
    ],
)
def test_parse_overrides(token, expected):
    assert parse_overrides([token]) == expected


@pytest.mark.parametrize(
    "token, match",
    [
        ("foo=1", "unknown key 'foo'"),
        ("steps=1e4", "expected int"),
        ("steps=1.5", "expected int"),
        ("eps=abc", "expected float"),
        ("eps=nan", "expected float"),
        ("layer_norm=maybe", "expected bool"),
        ("seeds=0", "seeds must be >= 1"),
        ("seeds=two", "positive int"),
        ("steps", "expected key=value"),
        ("=3", "expected key=value"),
    ],
)
def test_bad_overrides_raise_one_line(token, match):
    with pytest.raises(ConfigError, match=match) as info:
        parse_overrides([token])
    assert "\n" not in str(info.value)


def test_duplicate_key_raises():
    with pytest.raises(ConfigError, match="twice"):
        parse_overrides(["eps=1e-8", "eps=1e-12"])


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"loss": "softmax"}, "loss must be one of"),
        ({"precision": "fp8"}, "unknown precision"),
        ({"task": "a%b"}, "task must be one of"),
        ({"eps": -1.0}, "eps must be >= 0"),
        ({"b2": 1.0}, "b2 must be in"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"steps": 150, "eval_every": 100}, "multiple of eval_every"),
        ({"optimizer": "adam"}, "adam has no weight decay"),
        ({"track_sqrt_v": True}, "laprop only"),
        ({"task": "a/b", "p": 32}, "prime"),
        ({"d_model": 10, "n_heads": 4}, "divisible"),
        ({"train_fraction": 1.0}, "train_fraction"),
        ({"steps": "100"}, "steps must be int"),
        ({"layer_norm": 1}, "layer_norm must be bool"),
        ({"p": True}, "p must be int"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"split_seed": -1}, "split_seed must be >= 0"),
        ({"mlp_width": 0}, "mlp_width must be >= 1"),
        ({"mlp_width": -5, "model": "mlp"}, "mlp_width must be >= 1"),
        ({"p": 0}, "p must be in"),
        ({"d_model": -8}, "d_model must be positive"),
        ({"n_heads": 0}, "n_heads must be positive"),
        ({"d_mlp": 0}, "d_mlp must be positive"),
        ({"steps": 0}, "steps must be >= 1"),
        ({"eval_every": -1}, "eval_every must be >= 1"),
        ({"teacher_steps": -1}, "teacher_steps must be >= 0"),
        ({"split": "random"}, "split must be one of fixed, per_seed"),
        ({"split": "per_seed", "split_seed": 3}, "split_seed applies to split=fixed only"),
        ({"init": "xavier"}, "init must be one of nanda, fan_in, tl"),
        ({"init": "tl", "model": "mlp"}, "apply to model=transformer only"),
        ({"eq_output": True, "model": "mlp"}, "apply to model=transformer only"),
        ({"mlp_init": "doshi"}, "mlp_init applies to model=mlp only"),
        ({"mlp_init": "xavier", "model": "mlp"}, "mlp_init must be one of unit, doshi"),
        ({"warmup_steps": -1}, "warmup_steps must be >= 0"),
        (
            {"matmul_precision": "fp16"},
            r"matmul_precision must be one of highest, tf32, bf16; got 'fp16'",
        ),
        ({"matmul_precision": "tf32", "precision": "fp32/bf16"}, "needs float32 compute"),
        ({"matmul_precision": "bf16", "precision": "fp64"}, "got precision=fp64"),
        (
            {"teacher_steps": 10, "eval_every": 1, "steps": 10, "warmup_steps": 10},
            "not distillation runs",
        ),
    ],
)
def test_invalid_configs_raise(changes, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig(**changes)


def test_parse_value_is_typed():
    assert _parse_value("p", "113") == 113 and isinstance(_parse_value("lr", "1"), float)


def test_hash_is_stable_and_type_normalized():
    assert config_hash(RunConfig(weight_decay=1)) == config_hash(RunConfig(weight_decay=1.0))
    assert config_hash(RunConfig()) != config_hash(RunConfig(seed=1))
    assert len(config_hash(RunConfig())) == 16


def test_group_key_ignores_only_vmapped_fields():
    base = RunConfig()
    for name in _VMAPPED:
        value = getattr(base, name)
        other = dataclasses.replace(base, **{name: value + 1 if name == "seed" else value / 2})
        assert group_key(other) == group_key(base), name
    assert group_key(dataclasses.replace(base, loss="standard")) != group_key(base)


@pytest.mark.parametrize("name", REQUIRED_RECIPES)
def test_recipes_expand_to_valid_configs(name):
    recipe = recipes.get_recipe(name)
    full, quick = recipes.expand(recipe), recipes.expand(recipe, quick=True)
    # A recipe without quick runs says so (seeds 0: fig6-mod113, whose panel is full-only).
    assert full and (quick or recipe.quick.get("seeds") == 0) and len(quick) <= len(full)
    assert max((c.steps for c in quick), default=0) <= min(c.steps for c in full)
    assert len(set(full)) == len(full)
    # A quick tuple keeps values of a grid axis: each one must be on that axis.
    for key, values in recipe.quick.items():
        if isinstance(values, tuple):
            axis = {v for grid in recipe.grids for v in grid.get(key, ())}
            assert set(values) <= axis, (name, key)


def test_a_quick_tuple_keeps_those_values_of_the_axis():
    """fig4's quick build drops eps 1e-24 from both weight decays' grid and keeps the rest in
    order; a recipe without the tuple sweeps the whole axis."""
    recipe = recipes.get_recipe("fig4")
    quick = recipes.expand(recipe, quick=True)
    assert [(c.weight_decay, c.eps) for c in quick] == [
        (wd, eps) for wd in (1.0, 0.0) for eps in (1e-4, 1e-8, 1e-12, 1e-16, 0.0)
    ]
    whole = dataclasses.replace(recipe, quick={"steps": 3000, "seeds": 1})
    assert len(recipes.expand(whole, quick=True)) == 12


def test_fig2_top_is_the_paper_config():
    runs = recipes.expand(recipes.get_recipe("fig2-top"), parse_overrides(["seeds=3"]))
    assert [(c.loss, c.seed) for c in runs] == [
        (loss, s) for loss in ("fixed", "standard") for s in range(3)
    ]
    cfg = runs[0]
    assert (cfg.eps, cfg.weight_decay, cfg.precision, cfg.steps) == (1e-8, 1.0, "fp32", 10_000)


def test_mlp_recipes_follow_doshi_and_gromovs_code():
    for name in ("fig2-bottom", "fig2-bottom-cube", "fig6-sq", "fig6-cube"):
        cfg = recipes.get_recipe(name).base
        assert (cfg.activation, cfg.mlp_init, cfg.mlp_width, cfg.lr) == (
            "quadratic",
            "doshi",
            500,
            1e-2,
        )
        assert (cfg.b1, cfg.b2, cfg.split) == (0.9, 0.98, "fixed")
    bottom = recipes.get_recipe("fig2-bottom").base
    assert (bottom.weight_decay, bottom.eps, bottom.steps) == (0.0, 1e-16, 2000)
    setup = recipes.expand(recipes.get_recipe("fig2-bottom-setup"), parse_overrides(["seeds=1"]))
    assert {(c.activation, c.mlp_init, c.lr, c.steps) for c in setup} == {
        ("quadratic", "doshi", 1e-2, 2000),
        ("relu", "doshi", 1e-2, 2000),
        ("quadratic", "unit", 1e-2, 2000),
        ("quadratic", "doshi", 5e-3, 2000),
    }


def test_overrides_replace_grid_axes_and_lists_sweep():
    table1 = recipes.get_recipe("table1")
    runs = recipes.expand(table1, parse_overrides(["precision=fp32", "seeds=1"]))
    assert {c.precision for c in runs} == {"fp32"}
    assert {c.loss for c in runs} == {"fixed", "standard", "zero_sum", "stablemax"}
    runs = recipes.expand(
        recipes.get_recipe("fig2-top"), parse_overrides(["loss=fixed", "eps=1e-8,1e-12", "seeds=2"])
    )
    assert [(c.eps, c.seed) for c in runs] == [(1e-8, 0), (1e-8, 1), (1e-12, 0), (1e-12, 1)]


def test_override_is_validated_by_the_config():
    with pytest.raises(ConfigError, match="eps must be >= 0"):
        recipes.expand(recipes.get_recipe("fig2-top"), parse_overrides(["eps=-1"]))


def test_unknown_recipe():
    with pytest.raises(ConfigError, match=r"unknown recipe 'fig9'.*fig2-top"):
        recipes.get_recipe("fig9")


def test_per_seed_split_follows_the_run_seed():
    fixed = [RunConfig(split="fixed", seed=s).modular_task().split_seed for s in range(3)]
    per_seed = [RunConfig(split="per_seed", seed=s).modular_task().split_seed for s in range(3)]
    assert fixed == [0, 0, 0] and per_seed == [0, 1, 2]


def test_matmul_precision_highest_keeps_every_run_name():
    """`matmul_precision` is an `ADDED_FIELDS` field: at its default ('highest') it is left out
    of the identity, so every stored run keeps its hash (its directory name); the emulated
    ones are runs of their own, trained in their own programs (not vmapped)."""
    for cfg in (RunConfig(), *recipes.expand(recipes.get_recipe("fig2-top-seeds"))[:2]):
        highest = dataclasses.replace(cfg, matmul_precision="highest")
        assert "matmul_precision" not in identity(highest)
        assert config_hash(highest) == config_hash(cfg)
        hashes = {config_hash(dataclasses.replace(cfg, matmul_precision=m)) for m in
                  ("highest", "tf32", "bf16")}  # fmt: skip
        assert len(hashes) == 3
    assert group_key(RunConfig()) != group_key(RunConfig(matmul_precision="tf32"))
    assert parse_overrides(["matmul_precision=highest,tf32,bf16"]) == {
        "matmul_precision": ("highest", "tf32", "bf16")
    }
    mlp = RunConfig(model="mlp", matmul_precision="bf16").model_config()
    assert mlp.matmul_precision == "bf16"
    assert RunConfig(matmul_precision="tf32").model_config().matmul_precision == "tf32"
