"""The quant lab's recipes, in the harness's recipe language (`grokbench.recipes.Recipe`).

`QUANT` is the lab's recipe (`grokbench quant`): each family with its default variants, the
paper's Table 2 rows. The ablations are recipes of their own at the quick scale
(`grokbench quant --recipe quant-gamma`). `grokbench recipes` lists them beside the
grokking lab's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grokbench.quant.config import MECHANISMS, QuantConfig
from grokbench.recipes import Recipe

__all__ = [
    "ABLATIONS",
    "CONSTANT_LR",
    "DEFAULT_VARIANTS",
    "ENCODER_SETTING",
    "MECHANISMS_RECIPE",
    "QUANT",
    "QUANT_RECIPES",
    "QUICK",
]

DEFAULT_VARIANTS: dict[str, tuple[str, ...]] = {
    "encoder": ("vanilla", "clipped", "gated_mlp"),
    "decoder": ("vanilla", "clipped", "gated"),
}
"""The recipe's variants per family: the paper's Table 2 rows (BERT's MLP gate, OPT's linear
gate) and OPT's clipped softmax (Table 6); `variants=...` picks others for every family."""

QUICK: dict[str, Any] = {
    "d_model": 32,
    "seq_len": 48,
    "steps": 600,
    "eval_batches": 4,
    "calib_subsets": 2,
    "bits": "W8A8",
}
"""`--quick`: the same recipe at half the width, 600 steps and W8A8 only: under 5 minutes."""

ENCODER_SETTING: dict[str, tuple] = {"corpus": ("delimited_backcopy",), "steps": (6000,)}
"""The encoder's recipe settings beside `QuantConfig`'s defaults (issue 44, pre-registered in
docs/quant.md before its runs): `delimited_backcopy`, whose `.` and `[SEP]` delimiters come at
about BERT's density and depend on their neighbours (the closer stand-in for the paper's MLM
text, argued in docs/studies/quant-outlier-probes.md before any run on it), for 6,000 steps
with the paper's warmup and linear decay. The decoder keeps the defaults (`bigram_backcopy`,
2,000 steps)."""

QUANT = Recipe(
    name="quant",
    description="Quantizable Transformers Table 2: vanilla, clipped softmax and gated "
    "attention; outliers and W8A8 (encoder on delimited_backcopy, 6,000 steps)",
    base=QuantConfig(),
    seeds=1,
    grids=(
        {"family": ("encoder",), "variant": DEFAULT_VARIANTS["encoder"], **ENCODER_SETTING},
        {"family": ("decoder",), "variant": DEFAULT_VARIANTS["decoder"]},
    ),
    quick=QUICK,
)

CONSTANT_LR = Recipe(
    name="quant-constant-lr",
    description="Gu et al.'s setting: the encoder recipe at a constant lr after the warmup "
    "(no decay); Table 2's encoder rows again",
    base=QuantConfig(),
    seeds=1,
    grids=(
        {
            "family": ("encoder",),
            "variant": DEFAULT_VARIANTS["encoder"],
            **ENCODER_SETTING,
            "decay_lr": (False,),
        },
    ),
    quick=QUICK,
)
"""The encoder's recipe with the lr held after the warmup instead of decayed: the setting of
run A (docs/studies/quant-outlier-probes.md), where Gu et al. find attention sinks grow with
a constant lr. An ablation of the schedule, not the paper's recipe; the full build runs it."""

MECHANISMS_RECIPE = Recipe(
    name="quant-mechanisms",
    description="the mechanisms that let a head do nothing, side by side on the encoder "
    "recipe: vanilla, clipped softmax, MLP and all-heads gates, softmax off by one, a learned "
    "sink logit, sigmoid attention, softpick, the elementwise output gate",
    base=QuantConfig(),  # every bit width: its first three rows are the recipe's own
    seeds=1,
    grids=({"family": ("encoder",), "variant": MECHANISMS, **ENCODER_SETTING},),
    quick=QUICK,
)
"""The mechanisms table of docs/quant.md (`grokbench quant --recipe quant-mechanisms`)."""

_QUICK_BASE = dataclasses.replace(QuantConfig(), **QUICK)


def _ablation(axis: str, description: str, family: str, variants: tuple[str, ...], values):
    return Recipe(
        name=f"quant-{axis}",
        description=description,
        base=dataclasses.replace(_QUICK_BASE, family=family, variant=variants[0]),
        seeds=1,
        grids=({"variant": variants, axis: tuple(values)},),
    )


ABLATIONS: dict[str, Recipe] = {
    "gamma": _ablation(
        "gamma",
        "Quantizable Transformers Fig. 6: clipped softmax's gamma = -alpha/T, alpha 1/2, 2, 8",
        "encoder",
        ("clipped",),
        (float(f"{-a / QUICK['seq_len']:.4g}") for a in (0.5, 2, 8)),
    ),
    "pi_init": _ablation(
        "pi_init",
        "Quantizable Transformers Fig. 7: the linear gate's initial openness pi_init",
        "encoder",
        ("gated",),
        (0.25, 0.5, 0.9),
    ),
    "zeta": _ablation(
        "zeta",
        "Quantizable Transformers Table 1: clipped softmax's upper stretch zeta",
        "encoder",
        ("clipped",),
        (1.0, 1.03),
    ),
    "ln_weight_decay": _ablation(
        "ln_weight_decay",
        "Quantizable Transformers Table 6: weight decay on the LayerNorm scales",
        "decoder",
        ("vanilla", "gated"),
        (True, False),
    ),
}
"""The paper's ablations as recipes (axis -> recipe), run at the `--quick` scale: Fig. 6,
gamma = -alpha/T for alpha 1/2, 2, 8 (BERT-6L); Fig. 7, the linear gate's pi_init over the
range the paper calls robust (BERT-6L); Table 1, upper clipping zeta (BERT-base); Table 6,
weight decay on LayerNorm gamma for vanilla and the linear gate (OPT-125m)."""

QUANT_RECIPES: dict[str, Recipe] = {
    QUANT.name: QUANT,
    CONSTANT_LR.name: CONSTANT_LR,
    MECHANISMS_RECIPE.name: MECHANISMS_RECIPE,
    **{r.name: r for r in ABLATIONS.values()},
}
"""Every quant-lab recipe by name."""
