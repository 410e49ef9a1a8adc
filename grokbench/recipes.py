"""Named recipes: every experiment of the two papers as a complete config (docs/recipes.md).

A recipe is a base `RunConfig`, a seed count, and zero or more grids (a grid is a product
over a few keys; the recipe's runs are the union of its grids' products x seeds).

Quick vs full: one recipe per experiment, at the paper's scale by default. `--quick`
(`expand(..., quick=True)`) applies the recipe's `quick` overrides (fewer steps and seeds,
sometimes a smaller grid), sized to finish in minutes on a 2-core CPU. Quick runs are
ordinary configs: they go through the same engine and are cached under their own hash.

User overrides (`key=value`) are applied last. A key that a grid varies is replaced by the
user's value(s) in every grid; `key=v1,v2` adds (or replaces) a sweep axis.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from grokbench.config import ConfigError, RunConfig, did_you_mean

__all__ = ["RECIPES", "SETUP_AXES", "check_name", "expand", "format_list", "get_recipe"]

_EPS_TABLE1 = (1e-8, 1e-12, 1e-16)  # Table 1's three epsilons: m* = 18.4, 27.6, 36.8
# The paper's "bf16" rows are bf16 compute on float32 parameters and optimizer state. Wholly
# bf16 training ('bf16') cannot move: with lr 1e-3 an update of |theta| ~ 0.1 is below half
# an ulp of theta (2.4e-4), so weight decay and most Adam steps round away. Measured on
# fig2-top: the parameter norm freezes at 37.4 by step 2,000, fixed CE stops at margin 15.4
# and 39-47% test; with 'fp32/bf16' fixed CE reaches 17.1 and standard CE stalls at 3.7-4.9
# (below c16 = 5.5), as in Table 1.
_BF16 = "fp32/bf16"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A named experiment: base config, seed count, grids, and its quick overrides.

    The base is any frozen config dataclass with a `seed` field: `RunConfig` for the
    grokking lab (`RECIPES`), `QuantConfig` for the quantization lab
    (`grokbench.quant.recipes`); `expand` and `grokbench.config.parse_overrides` serve both.
    """

    name: str
    description: str
    base: Any
    seeds: int
    grids: tuple[Mapping[str, tuple], ...] = ()
    # `--quick`'s settings: a value pins a key; a tuple keeps those values of a grid axis.
    quick: Mapping[str, Any] = dataclasses.field(default_factory=dict)


# The settings the fix paper leaves unstated follow the reference trainers, never a result:
# where Nanda et al.'s trainer (progress-measures-paper) and Prieto et al.'s
# (grokking-at-the-edge-of-numerical-stability) agree, we do as they do; where they differ,
# we keep the choice the TransformerLens grokking demo shares with one of them.
# - split: a new train/test split per run seed (RunConfig.split = per_seed). Nanda's trainer
#   shuffles the pairs after random.seed(seed); Prieto's draws random_split from the seeded
#   torch generator. Only the TL demo keeps one split (DATA_SEED 598) for every run.
# - init: Nanda et al.'s N(0, 1/d_model) (w_u N(0, 1/(p + 1))): our model is theirs (no
#   LayerNorm, learned positions, causal mask, the `=` token). Prieto's trainer builds a
#   different model (post-LN, dropout, no positions) with PyTorch's default init.
# - no warmup, p outputs: Prieto's trainer and the TL demo; Nanda's warms up over 10 steps
#   and has p + 1 outputs (warmup_steps=10, eq_output=true).
# The setup study (`grokbench run setup-study`, figures/setup_study.py) shows every
# alternative beside these. Measured on a 2-core CPU, fixed CE, 5 seeds (0-4) x 10,000 steps,
# runs at >= 99 % test by step 10,000 and their median grok step (a run that never groks
# counted as later than every step): defaults 4/5, 5,800; split=fixed 3/5, 8,500;
# init=fan_in 3/5, 6,200; init=tl 3/5, 4,600; warmup_steps=10 4/5, 5,000; eq_output 3/5,
# 8,100; d_mlp=512 4/5, 5,900; n_heads=1 3/5, 7,800. No setting groks every seed, and
# the spread between seeds (3,100 to 9,100 steps) is wider than any setting's shift:
# 5 seeds cannot rank the settings, so the study does not overrule the trainers. Standard
# CE, same order: 3/5 (7,900), 2/5, 4/5 (8,300), 2/5, 2/5, 1/5, 2/5, 0/5, spikes on every
# run of every setting. Final fixed-CE margins: medians 17.1-17.3 in every setting, runs
# 16.6-17.5 (the paper: 17.9).
_VARMA = RunConfig()  # a+b mod 31, width-64 transformer, AdamW 1e-3 (0.9, 0.98), wd 1, fp32
# The recipes whose runs the progress figure and phase table read record the measures.
_VARMA_PROGRESS = dataclasses.replace(_VARMA, progress_measures=True)
_DOSHI = RunConfig(  # the 2-layer MLP benchmarks mod 97
    task="a^2+b^2",
    p=97,
    model="mlp",
    # The fix paper names only "2-layer MLPs" (Doshi et al., 2024). Everything else follows
    # Doshi and Gromov's code (d-doshi/Grokking: utils/models.py `fcn`, the scripts'
    # AdamW): one-hot a (+) b, no biases, width 500, x^2 activation, both matrices
    # N(0, (0.5 / (2 width)^(1/3))^2), lr 1e-2, betas 0.9/0.98. The loss stays CE (the fix
    # paper's subject; Doshi et al. train MSE). The fig2-bottom setup table
    # (docs/studies/fig2-bottom-setup.md, `grokbench run fig2-bottom-setup`) shows each alternative.
    activation="quadratic",
    mlp_init="doshi",
    lr=1e-2,  # the code's; Doshi et al.'s 2024 text says 5e-3 (with MSE and wd 5)
    # Doshi et al.'s code (d-doshi/Grokking, the MLP benchmarks' source) draws one split for
    # every run (pair_seed 420, fixed), unlike the transformer trainers (`_VARMA`).
    split="fixed",
)
# fig2-bottom: lambda 0 and eps 1e-16 (Fix paper Sec. 4); 2,000 full-batch steps as in
# Doshi and Gromov's scripts (the paper's spike comes near step 1,250).
_FIG2_BOTTOM = dataclasses.replace(
    _DOSHI, optimizer="adam", weight_decay=0.0, eps=1e-16, steps=2000
)
_NANDA = dataclasses.replace(  # Nanda et al.'s a+b mod 113: width 128, MLP 512, 30% split
    _VARMA, p=113, train_fraction=0.3, d_model=128, d_mlp=512
)
_LOSS_PRECISION = {"precision": ("fp32", "fp64"), "loss": ("fixed", "standard")}
_DISTILL = dataclasses.replace(  # fig7: a Varma-width student of a+b mod 53, started as its teacher
    _VARMA,
    p=53,
    # The teacher (grokbench.distill.teacher_config: the fig2-top recipe at p = 53, fixed CE)
    # reaches 100% test by step ~3,000 (seed 0); 5,000 leaves it settled (margin ~16.8).
    teacher_steps=5000,
    temperature=4.0,  # the paper's T: teacher margins ~17 / 4 stay below c16 = 7.6
    optimizer="adam",
    lr=2e-3,  # the paper's distillation step size
    weight_decay=0.0,  # lambda = 0: at z_S = z_T nothing but the loss's residual moves it
    # eps 1e-8 and betas 0.9/0.98 as in every recipe here (the paper names only lr, lambda, eps)
    steps=2000,
    eval_every=1,  # distillation records test metrics every step
)

SETUP_AXES: tuple[Mapping[str, tuple], ...] = (
    {},  # the defaults: split per seed, Nanda's init, no warmup, p outputs, 4 heads, MLP 256
    {"split": ("fixed",)},  # one split (split_seed 0) for every seed: the TL demo, and ours before
    {"init": ("fan_in", "tl")},  # fan-in init; the TL demo's 0.8/sqrt(d)
    {"warmup_steps": (10,)},  # Nanda et al.'s 10-step linear warmup
    {"eq_output": (True,)},  # Nanda et al.'s p + 1 outputs
    {"d_mlp": (512,)},  # an 8x MLP (Nanda's 512, at our width 64)
    {"n_heads": (1,)},  # one head of 64 instead of 4 of 16
)
"""The setup study's settings: the defaults, then one unstated choice changed at a time."""

_MLP_SETUP_AXES: tuple[Mapping[str, tuple], ...] = (
    {},  # Doshi and Gromov's code: x^2, their init, lr 1e-2
    {"activation": ("relu",)},
    {"mlp_init": ("unit",)},  # pre-activations at unit variance, fan-in read-out
    {"lr": (5e-3,)},  # Doshi et al.'s 2024 text
)
"""fig2-bottom's settings: the reference code's, then one unstated choice changed at a time."""

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "fig2-top",
            "slingshot with weight decay: a+b mod 31, AdamW wd 1, eps 1e-8, fp32, fixed vs "
            "standard CE (paper: standard spikes, 94 +- 5% test; fixed 100%, margin ~18)",
            _VARMA_PROGRESS,
            seeds=5,
            grids=({"loss": ("fixed", "standard")},),
            # Quick: 3,000 steps, 1 seed. On the 2-seed quick runs this replaces, standard CE
            # spiked on both seeds (2 and 1 spikes) and fixed CE on neither; seed 0 trained
            # alone (a run's last bits depend on the batch it shares) spikes once (step
            # 1,567) with standard CE and never with fixed CE: one seed shows the figure's
            # contrast and decides its two rows; the second cost ~10 s of the quick build's
            # longest lane (2026-12-05).
            quick={"steps": 3000, "seeds": 1},
        ),
        Recipe(
            "fig2-top-seeds",
            "every seed groks, as a rate: fig2-top's fixed CE on 20 seeds x 10,000 steps "
            "(paper: groks on all 5 seeds, 100.0 +- 0.0% test); the quick variant is "
            "fig2-top's quick fixed runs",
            _VARMA_PROGRESS,
            seeds=20,
            grids=({"loss": ("fixed",)},),
            quick={"steps": 3000, "seeds": 1},
        ),
        Recipe(
            "fig2-bottom",
            "slingshot without weight decay: a^2+b^2 mod 97, 2-layer MLP, Adam, eps 1e-16, "
            "fp32 (paper: standard spikes at c32 near step 1250, test 61% -> 23%; fixed 85%)",
            _FIG2_BOTTOM,
            seeds=3,
            grids=({"loss": ("fixed", "standard")},),
            quick={"steps": 1500, "seeds": 1},
        ),
        Recipe(
            "fig2-bottom-cube",
            "slingshot without weight decay on a^3+b mod 97: fig2-bottom's MLP and optimizer "
            "(paper, Sec. 4: standard CE test accuracy 60% -> 21% at the spike)",
            dataclasses.replace(_FIG2_BOTTOM, task="a^3+b"),
            seeds=3,
            grids=({"loss": ("fixed", "standard")},),
            # No quick runs. Its two 1,500-step quick runs cost 84.6 s (41.9 + 42.7 s) of a
            # 408 s quick build's longest lane (2026-12-06) and decided one row, standard CE's
            # accuracy before the spike (15.0 % against the paper's 60 %: fails, as the full
            # recipe's 28.2 % does). Fig. 2 of the paper has two rows; Sec. 4's third is
            # drawn from the full recipe only, its panel naming the command.
            quick={"seeds": 0},
        ),
        Recipe(
            "fig2-bottom-setup",
            "what each MLP choice the fix paper leaves unstated does to fig2-bottom: ReLU "
            "instead of x^2, the unit-variance init instead of Doshi's, Doshi et al.'s "
            "stated lr 5e-3 instead of their code's 1e-2 (one at a time), fixed and standard CE",
            _FIG2_BOTTOM,
            seeds=3,
            grids=tuple({"loss": ("fixed", "standard"), **axis} for axis in _MLP_SETUP_AXES),
            quick={"steps": 1500, "seeds": 1, "loss": "standard"},
        ),
        Recipe(
            "table1",
            "Table 1 / fig5: a+b mod 31, wd 1, eps 1e-8/1e-12/1e-16 x fp32/bf16 (bf16 compute, "
            "fp32 params)/fp32/fp64 x "
            "fixed/standard CE, plus zero-sum projection (fp32) and StableMax (fp32, fp64)",
            _VARMA,
            seeds=3,
            grids=(
                {
                    "precision": (_BF16, "fp32", "fp64"),
                    "loss": ("fixed", "standard"),
                    "eps": _EPS_TABLE1,
                },
                {"precision": ("fp32",), "loss": ("zero_sum",), "eps": _EPS_TABLE1},
                {"precision": ("fp32", "fp64"), "loss": ("stablemax",), "eps": _EPS_TABLE1},
            ),
            # Quick: eps 1e-8 only (Fig. 5's top row, Table 1's first column), 1 seed, 1,000
            # steps: 6 runs. The three eps columns cost 24 runs (a sixth of the quick build's
            # training) and decided no row: every Table 1 cell needs the full recipe. On the
            # 1,500-step quick runs this replaces, bf16 standard CE had spiked at step 482 and
            # stalled below c16 (margin 3.97 at step 1,000), fixed CE was past c16 in every
            # precision by step 1,000 (12.99-13.03) with no spike, and fp32 standard CE had not
            # yet spiked at c32 (first spike ~1,570 on fig2-top's runs): the figure shows at
            # 1,000 steps what it showed at 1,500, and the row decided there still is.
            # Fixed and standard CE only: Fig. 5 draws those two, and no row reads the
            # zero-sum and StableMax baselines below full scale (their three quick runs, three
            # programs, cost 27.6 s of the quick build on 2026-12-06: 8.0, 9.0 and 10.6 s).
            quick={"steps": 1000, "seeds": 1, "eps": 1e-8, "loss": ("fixed", "standard")},
        ),
        Recipe(
            "fig4",
            "margin equilibria: a+b mod 31, fixed CE, LaProp (0.9, 0.98) tracking sqrt(v), "
            "fp32, eps down to 0, wd 1 (levels off at log(1/eps)) and wd 0 (overshoots)",
            dataclasses.replace(_VARMA, optimizer="laprop", track_sqrt_v=True),
            seeds=3,
            grids=({"weight_decay": (1.0, 0.0), "eps": (1e-4, 1e-8, 1e-12, 1e-16, 1e-24, 0.0)},),
            # Margins climb ~10 nats per 1,000 steps along the eps = 0 path: eps 1e-16 levels
            # off by ~3,500 steps, eps 1e-24 by ~5,500 and eps = 0 peaks at the fp32 underflow
            # (m ~ 82) by ~8,000. The quick variant (3,000 steps, 1 seed: 12 runs) shows eps
            # 1e-4 to 1e-12 levelling off in order and the rest still climbing, and without
            # weight decay four of five eps already past log(1/eps) (measured on the 5,000-step
            # quick runs it replaces: 12.44, 22.25, 31.28, 37.45 at step 3,000 against 9.21,
            # 18.42, 27.63, 36.84); the plateau values are tested on the full recipe only.
            # eps 1e-24 is left out of it: at 3,000 steps its margin is eps = 0's to within
            # 3e-4 nats (wd 0) and equal to the bit (wd 1), the same curve drawn twice, and its
            # row (overshoot past 55.3) needs the full recipe.
            quick={"steps": 3000, "seeds": 1, "eps": (1e-4, 1e-8, 1e-12, 1e-16, 0.0)},
        ),
        Recipe(
            "fig6-mod113",
            "benchmark: a+b mod 113, Nanda's transformer (128/512, 30% split), AdamW wd 1, "
            "eps 1e-12, fp32/fp64 x fixed/standard CE",
            dataclasses.replace(_NANDA, eps=1e-12, steps=20_000),
            seeds=3,
            grids=(_LOSS_PRECISION,),
            # No quick runs: 1,000 of its 20,000 steps (2 runs, a fifth of the quick build's
            # training) stayed at 6 % test accuracy with margins below every cliff and decided
            # no row. Figure 6 draws its panel at full scale only.
            quick={"seeds": 0},
        ),
        Recipe(
            "fig6-mod31",
            "benchmark: a+b mod 31, Varma's transformer, AdamW wd 1, eps 1e-12, "
            "fp32/fp64 x fixed/standard CE",
            dataclasses.replace(_VARMA, eps=1e-12),
            seeds=3,
            grids=(_LOSS_PRECISION,),
            # No quick runs: its 2,000-step quick runs (fp32, 2 runs, ~30 s of a 390 s quick
            # build, 2026-12-05) decided no row: fixed CE at 45 % test, and standard CE's spike
            # (step 1,379) launched before the mean train margin reached c32, the row's premise.
            # Figure 6 draws its panel at full scale only, as fig6-mod113's.
            quick={"seeds": 0},
        ),
        Recipe(
            "fig6-sq",
            "benchmark: a^2+b^2 mod 97, 2-layer MLP, AdamW wd 0.2, eps 1e-12, "
            "fp32/fp64 x fixed/standard CE",
            dataclasses.replace(_DOSHI, weight_decay=0.2, eps=1e-12, steps=5000),
            seeds=3,
            grids=(_LOSS_PRECISION,),
            # Quick: 600 steps. Both losses reach >= 99 % test by step 400-500 (measured on
            # the 1,000-step quick runs this replaces), so the figure still shows it.
            quick={"steps": 600, "seeds": 1, "precision": "fp32"},
        ),
        Recipe(
            "fig6-cube",
            "benchmark: a^3+b mod 97, 2-layer MLP, AdamW wd 0.2, eps 1e-12, "
            "fp32/fp64 x fixed/standard CE",
            dataclasses.replace(_DOSHI, task="a^3+b", weight_decay=0.2, eps=1e-12, steps=5000),
            seeds=3,
            grids=(_LOSS_PRECISION,),
            # Quick: 600 steps. Both losses reach >= 99 % test by step 400-500 (measured on
            # the 1,000-step quick runs this replaces), so the figure still shows it.
            quick={"steps": 600, "seeds": 1, "precision": "fp32"},
        ),
        Recipe(
            "setup-study",
            "how much each choice the fix paper leaves unstated moves grokking: fig2-top "
            "(fixed and standard CE) with the split, init scale, warmup, p+1 outputs, MLP "
            "width and heads changed one at a time (SETUP_AXES), 5 seeds each",
            _VARMA_PROGRESS,
            seeds=5,
            grids=tuple({"loss": ("fixed", "standard"), **axis} for axis in SETUP_AXES),
            # No quick runs. The 500-step quick runs it had (fixed CE, 1 seed, 8 runs in 8
            # programs) grokked in no setting and decided no row: the figure showed eight
            # crosses, and cost 40 s of a 390 s quick build (2026-12-05). The study's figure
            # and table say so at quick scale and come whole from the full build.
            quick={"seeds": 0},
        ),
        Recipe(
            "eps-settle",
            "no slingshot when eps >= 1e-7: fig2-top with standard CE at eps 1e-7 and 1e-6 "
            "(paper, Sec. 5: log(1/eps) <= 16.1 < c32, so standard CE settles without spiking)",
            dataclasses.replace(_VARMA, loss="standard"),
            # fig2-top's 5 seeds and 10,000 steps; the claim is tested on the full recipe only.
            seeds=5,
            grids=({"eps": (1e-7, 1e-6)},),
            quick={"steps": 3000, "seeds": 1},
        ),
        Recipe(
            "orthograd",
            "⊥Grad (Prieto et al.): fig2-top with standard, StableMax and fixed CE, with and "
            "without ⊥Grad, at weight decay 0 and 1 (paper: ⊥Grad groks without weight decay)",
            _VARMA_PROGRESS,
            # Table 1's smallest seed count; Prieto et al.'s trainer chains ⊥Grad before AdamW
            # (`OrthoGrad(params, AdamW)`), as RunConfig.orthograd does.
            seeds=3,
            grids=(
                {
                    "loss": ("standard", "stablemax", "fixed"),
                    "orthograd": (False, True),
                    "weight_decay": (0.0, 1.0),
                },
            ),
            # Quick: 12 runs in 6 programs of 1,500 steps, 1 seed: the pipeline, not the answer
            # (the claim is tested on the full recipe only).
            quick={"steps": 1500, "seeds": 1},
        ),
        Recipe(
            "fig7",
            "distillation (Softmax Cancellation): a+b mod 53, the student starts as its teacher "
            "(5,000 steps, 100% test); Adam lr 2e-3, wd 0, eps 1e-8, T = 4, 2,000 steps; "
            "fp32/bf16, fp32, fp64 x fixed/standard soft-target CE, and fixed KL as the loss "
            "(paper: standard's residual moves the student, worst in bf16; fixed stays at KL 0, "
            "100%)",
            _DISTILL,
            seeds=1,
            grids=(
                {"precision": (_BF16, "fp32", "fp64"), "loss": ("fixed", "standard")},
                # KL(p || q) as the loss: the fixed one (numerics.kl_divergence). The standard
                # one, optax's kl_divergence, has standard soft-target CE's gradient bit for
                # bit, so its students are those above (tests/tasks/test_distill.py).
                {
                    "precision": (_BF16, "fp32", "fp64"),
                    "loss": ("fixed",),
                    "distill_objective": ("kl",),
                },
            ),
            # Quick: 200 student steps (the teacher is the full recipe's, cached in the store).
            # On the 500-step quick runs this replaces, the standard students had already moved
            # by step 200 (bf16: parameter distance 6.4, KL 8.4e-4; fp32 0.50 / 1.4e-4; fp64
            # 0.26 / 5.6e-5) and the fixed ones were exactly at their teacher at every step, so
            # the figure still shows both; the rows decided at quick read step-0 residuals and
            # "never moves", which 200 steps decide as 500 did.
            quick={"steps": 200},
        ),
    )
}
"""Every recipe by name."""


def get_recipe(name: str) -> Recipe:
    """The recipe called `name` (ConfigError listing the known names otherwise)."""
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; known recipes: {', '.join(RECIPES)}")
    return RECIPES[name]


def check_name(name: str, figures: Sequence[str] = ()) -> None:
    """ConfigError, with suggestions, unless `name` is a grokking-lab recipe; a figure's name
    (one of `figures`) gets its command."""
    if name in RECIPES:
        return
    message = f"unknown recipe {name!r}; {did_you_mean(name, list(RECIPES))}"
    if name in figures:
        message += f" ({name} is a figure: grokbench figures {name})"
    raise ConfigError(message)


def format_list(recipes: Mapping[str, Recipe]) -> str:
    """`grokbench recipes`: one line per recipe, its run counts and what it shows."""
    return "\n".join(
        f"{r.name:<12} {len(expand(r)):3d} runs ({len(expand(r, quick=True))} with --quick): "
        f"{r.description}"
        for r in recipes.values()
    )


def expand(
    recipe: Recipe, overrides: Mapping[str, tuple] | None = None, quick: bool = False
) -> list[Any]:
    """The recipe's runs, configs of its base's class (validated, deduplicated, in grid
    order, seeds innermost)."""
    user = dict(overrides or {})
    settings: dict[str, Any] = {"seeds": recipe.seeds}
    if quick:
        settings.update(recipe.quick)
    recipe_seeds = settings.pop("seeds")  # a run count, not a RunConfig field
    # A quick tuple keeps only those values of a grid's axis (fig4: one eps fewer).
    kept = {k: settings.pop(k) for k in list(settings) if isinstance(settings[k], tuple)}
    seeds = user.pop("seeds", (recipe_seeds,))[0]
    axes_user = {k: v for k, v in user.items() if len(v) > 1}
    fixed_user = {k: v[0] for k, v in user.items() if len(v) == 1}
    runs: dict[RunConfig, None] = {}
    for grid in recipe.grids or ({},):
        # Quick settings and single-valued user overrides pin a key; lists sweep it.
        axes = {
            k: tuple(x for x in v if x in kept[k]) if k in kept else v
            for k, v in grid.items()
            if k not in settings and k not in user
        }
        axes.update(axes_user)
        pinned = {**settings, **fixed_user}
        for combo in itertools.product(*axes.values()):
            values = {**pinned, **dict(zip(axes, combo, strict=True))}
            try:
                base = dataclasses.replace(recipe.base, **values)
            except TypeError as err:  # an unknown key in a recipe: a programming error
                raise ConfigError(str(err)) from None
            for offset in range(seeds):
                runs[dataclasses.replace(base, seed=base.seed + offset)] = None
    return list(runs)
