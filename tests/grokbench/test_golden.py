"""Golden numbers, in nanodo's style: a shrunken real config whose first steps are pinned.

The engine's numbers decide every stored run, so they may move only on purpose: a change
that moves them must bump `CONFIG_VERSION` (grokbench/config.py) or `QUANT_VERSION`
(grokbench/quant/config.py), and then update the literals here, which were printed by the code
itself (`float(x)` of each value). The versions are pinned too, so a bump without new
goldens (or new goldens without a bump) fails here as well.

CPU only: another backend's kernels round differently, so the literals hold for the
XLA CPU backend of the pinned jax.
"""

import pathlib

import jax
import numpy as np
import pytest

import tasks
from grokbench import config, engine, quant, recipes
from grokbench.quant import QuantConfig
from grokbench.store import Store
from tasks.quant import build_corpus

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="golden numbers are those of the XLA CPU backend"
)

CHANGED = "numbers changed: if intended, bump CONFIG_VERSION"
RTOL = 1e-6  # fp32 carries ~7 digits; the same program on the same backend repeats to the bit

GOLDEN_CONFIG_VERSION = 5
GOLDEN_QUANT_VERSION = 6
GOLDEN_DISTILL_VERSION = 2

# The reference config itself (fig2-top, Table 1: p = 31, width 64), 3 steps, compared to the
# bit: CONFIG_VERSION 5's change of the loss's layout left the p = 7 numbers above bit for
# bit as they were and moved these by an ulp (adam_step at step 1 was 0.9183518886566162),
# below RTOL, yet thousands of steps carry an ulp into every stored number.
GOLDEN_REFERENCE_STEPS = {
    "train_loss": [3.548563241958618, 3.491384267807007, 3.4573495388031006],
    "adam_step": [0.918351948261261, 0.8357094526290894, 0.7745741009712219],
    "param_norm": [29.491233825683594, 29.45863914489746, 29.427927017211914],
    "margin_mean": [-3.5154762268066406, -3.4581193923950195, -3.423884391784668],
}

# p = 7, width 8, 3 full-batch steps of the reference AdamW recipe in fp32 (step t: the
# parameters after t updates). At these small margins standard CE equals the fixed CE.
GOLDEN_GROKKING = {
    "train_loss": [2.3787546157836914, 2.3388428688049316, 2.301398754119873],
    "margin_mean": [-2.17622709274292, -2.139270544052124, -2.1047163009643555],
    "adam_step": [0.9063174724578857, 0.8971005082130432, 0.8925540447235107],
    "param_norm": [10.42329216003418, 10.411787033081055, 10.400289535522461],
}

# The same config at seed 1 draws its own split (split=per_seed, CONFIG_VERSION 3): train_loss.
GOLDEN_SEED1_TRAIN_LOSS = [2.3756356239318848, 2.348179817199707, 2.322178840637207]

# The same steps at width 128, where `config.xla_options` compiles YNNPACK on the dots only
# (`individual_dot`): XLA's default fusions give other last bits (adam_step at step 1:
# 0.8907386064529419), so these runs hash apart (`xla` in `config_hash`).
GOLDEN_WIDE = {
    "train_loss": [2.1637635231018066, 1.863267183303833, 1.8168506622314453],
    "adam_step": [0.8907396197319031, 0.6186042428016663, 0.564173698425293],
}

# Hashes that the per-program XLA options must leave alone: the width-64 reference config
# (fig2-top, Table 1) keeps the hash it had before them; width 128 takes a new one.
GOLDEN_REFERENCE_HASH = "58f966357f68ea7c"  # "54c6880ffb400c04" at CONFIG_VERSION 4
GOLDEN_WIDE_HASH = "82c6c7ae192cc860"  # another hash on XLA's default fusions

# The distillation KL metric (float64, so exact) on fixed logits at T = 4, and the fig7
# recipe's hash: a change that moves it bumps DISTILL_VERSION, which only distillation
# runs hash. DISTILL_VERSION 1 gave [1.6402494507922922e-08, ..., 1.3332951756026292e-08].
GOLDEN_KL = [
    1.640249450792292e-08,
    1.6371840367534367e-08,
    1.4683035702739758e-08,
    1.3332951756026293e-08,
]
GOLDEN_FIG7_HASH = "52cc857a0a20318c"  # "29f341d09d75360a" at CONFIG_VERSION 4

# One encoder layer, clipped softmax, 2 steps on a fixed synthetic text: the loss before and
# after one AdamW step, and the final parameters' global L2 norm (float64 sum of squares).
GOLDEN_QUANT_LOSS = [3.0358405113220215, 3.0267815589904785]
GOLDEN_QUANT_PARAM_NORM = 9.080979038977697  # 9.08097903456371 at QUANT_VERSION 5


def _check(name: str, actual, expected, version: str = "CONFIG_VERSION") -> None:
    np.testing.assert_allclose(
        np.asarray(actual, np.float64),
        expected,
        rtol=RTOL,
        atol=0,
        err_msg=f"{name}: {CHANGED.replace('CONFIG_VERSION', version)}",
    )


def _check_bits(name: str, actual, expected, version: str = "CONFIG_VERSION") -> None:
    """`_check` to the bit: the same program on the same backend repeats exactly."""
    got = [float(x) for x in np.atleast_1d(np.asarray(actual, np.float64))]
    want = list(np.atleast_1d(expected))
    assert got == want, f"{name}: {CHANGED.replace('CONFIG_VERSION', version)}"


def test_versions_are_pinned():
    """Bumping a version must come with new goldens (and new goldens with a bump)."""
    assert config.CONFIG_VERSION == GOLDEN_CONFIG_VERSION, (
        "CONFIG_VERSION changed: recompute the golden numbers below and update them"
    )
    assert quant.QUANT_VERSION == GOLDEN_QUANT_VERSION, (
        "QUANT_VERSION changed: recompute the golden quant numbers below and update them"
    )
    assert config.DISTILL_VERSION == GOLDEN_DISTILL_VERSION, (
        "DISTILL_VERSION changed: recompute GOLDEN_KL and GOLDEN_FIG7_HASH and update them"
    )


@pytest.mark.parametrize("loss", ["fixed", "standard"])
def test_grokking_steps_are_golden(loss):
    cfg = config.RunConfig(p=7, d_model=8, n_heads=2, steps=3, eval_every=3, loss=loss)
    (out,) = engine.train([cfg], progress=False)
    for name, expected in GOLDEN_GROKKING.items():
        assert out.metrics[name].dtype == np.float32, name
        _check(f"{loss} {name}", out.metrics[name], expected)


def test_reference_config_steps_are_golden_to_the_bit():
    cfg = config.RunConfig(steps=3, eval_every=3)
    (out,) = engine.train([cfg], progress=False)
    for name, expected in GOLDEN_REFERENCE_STEPS.items():
        _check_bits(f"reference {name}", out.metrics[name], expected)


def test_wide_transformer_steps_are_golden():
    cfg = config.RunConfig(p=7, d_model=128, n_heads=2, steps=3, eval_every=3)
    assert config.xla_options(cfg)  # the individual_dot program
    (out,) = engine.train([cfg], progress=False)
    for name, expected in GOLDEN_WIDE.items():
        _check(f"width 128 {name}", out.metrics[name], expected)


def test_xla_options_move_only_the_hashes_of_the_runs_they_change():
    assert config.xla_options(config.RunConfig()) == {}
    assert config.config_hash(config.RunConfig()) == GOLDEN_REFERENCE_HASH
    wide = config.RunConfig(p=7, d_model=128, n_heads=2, steps=3, eval_every=3)
    assert config.config_hash(wide) == GOLDEN_WIDE_HASH


def test_distillation_kl_is_golden(x64):
    student = np.linspace(-3.0, 5.0, 40).reshape(4, 10)
    teacher = student + 1e-3 * np.cos(np.arange(40.0)).reshape(4, 10)
    kl = tasks.kl_divergence(jax.numpy.asarray(student), jax.numpy.asarray(teacher), 4.0)
    assert [float(x) for x in kl] == GOLDEN_KL, CHANGED.replace("CONFIG", "DISTILL")
    assert config.config_hash(recipes.RECIPES["fig7"].base) == GOLDEN_FIG7_HASH
    assert config.config_hash(config.RunConfig()) == GOLDEN_REFERENCE_HASH  # others keep theirs


def test_per_seed_split_is_golden():
    cfg = config.RunConfig(p=7, d_model=8, n_heads=2, steps=3, eval_every=3, seed=1)
    (out,) = engine.train([cfg], progress=False)
    _check("seed 1 train_loss", out.metrics["train_loss"], GOLDEN_SEED1_TRAIN_LOSS)


def _synthetic_text() -> str:
    return "\n".join(f"{a} + {b} = {(a + b) % 97}." for a in range(60) for b in range(12))


def test_quant_training_step_is_golden(tmp_path: pathlib.Path):
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text(_synthetic_text(), encoding="utf-8")
    cfg = QuantConfig(
        n_layers=1,
        d_model=16,
        n_heads=2,
        seq_len=16,
        batch_size=8,
        steps=2,
        variant="clipped",
        corpus=str(corpus_path),
    )
    corpus = build_corpus(cfg.corpus, cfg.level)
    params, _ = quant.train(cfg, corpus, Store(tmp_path / "results"), progress=False)
    with np.load(tmp_path / "results" / "quant" / "train" / cfg.train_hash() / "metrics.npz") as m:
        losses = m["train_loss"]
    norm = np.sqrt(sum(np.sum(np.square(np.asarray(v, np.float64))) for v in params.values()))
    _check("quant train_loss", losses, GOLDEN_QUANT_LOSS, "QUANT_VERSION")
    # To the bit: QUANT_VERSION 6's change moved it by 5e-10 relative, far below RTOL.
    _check_bits("quant param_norm", norm, GOLDEN_QUANT_PARAM_NORM, "QUANT_VERSION")
