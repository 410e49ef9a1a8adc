"""The quant lab's recipes, in the harness's recipe language (`grokbench.recipes.Recipe`).

`QUANT` is the lab's recipe (`grokbench quant`): each family with its default variants, the
paper's Table 2 rows. The ablations are recipes of their own at the quick scale
(`grokbench quant --recipe quant-gamma`). `grokbench recipes` lists them beside the
grokking lab's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grokbench.quant.config import BERT_GAMMA, MECHANISMS, QuantConfig
from grokbench.recipes import Recipe

__all__ = [
    "ABLATIONS",
    "CONSTANT_LR",
    "ENCODER_SETTING",
    "MECHANISMS_RECIPE",
    "QUANT",
    "QUANT_RECIPES",
    "TRANSFER_SEQ_LENS",
]

_DEFAULT_VARIANTS: dict[str, tuple[str, ...]] = {
    "encoder": ("vanilla", "clipped", "gated_mlp"),
    "decoder": ("vanilla", "clipped", "gated"),
}
"""The recipe's variants per family: the paper's Table 2 rows (BERT's MLP gate, OPT's linear
gate) and OPT's clipped softmax (Table 6); `variants=...` picks others for every family."""

_QUICK: dict[str, Any] = {
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
docs/studies/quant-encoder-recipe.md before its runs): `delimited_backcopy`, whose `.` and
`[SEP]` delimiters come at about BERT's density and depend on their neighbours (the closer
stand-in for the paper's MLM text, argued in docs/studies/quant-outlier-probes.md before any
run on it), for 6,000 steps with the paper's warmup and linear decay. The decoder keeps the
defaults (`bigram_backcopy`, 2,000 steps)."""

QUANT = Recipe(
    name="quant",
    description="Quantizable Transformers Table 2: vanilla, clipped softmax and gated "
    "attention; outliers and W8A8 (encoder on delimited_backcopy, 6,000 steps)",
    base=QuantConfig(),
    seeds=1,
    grids=(
        {"family": ("encoder",), "variant": _DEFAULT_VARIANTS["encoder"], **ENCODER_SETTING},
        {"family": ("decoder",), "variant": _DEFAULT_VARIANTS["decoder"]},
    ),
    quick=_QUICK,
)
"""The lab's recipe, `grokbench quant`: Table 2's variants in both families."""

CONSTANT_LR = Recipe(
    name="quant-constant-lr",
    description="Gu et al.'s setting: the encoder recipe at a constant lr after the warmup "
    "(no decay); Table 2's encoder rows again",
    base=QuantConfig(),
    seeds=1,
    grids=(
        {
            "family": ("encoder",),
            "variant": _DEFAULT_VARIANTS["encoder"],
            **ENCODER_SETTING,
            "decay_lr": (False,),
        },
    ),
    quick=_QUICK,
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
    quick=_QUICK,
)
"""The mechanisms table of docs/quant.md (`grokbench quant --recipe quant-mechanisms`)."""

_QUICK_BASE = dataclasses.replace(QuantConfig(), **_QUICK)
_ENCODER_BASE = dataclasses.replace(QuantConfig(), **{k: v[0] for k, v in ENCODER_SETTING.items()})

_ALPHAS: tuple[float, ...] = (0.5, 2.0, 8.0)
"""Fig. 6's alpha (gamma = -alpha / T): too weak, the recommended range, too strong."""

TRANSFER_SEQ_LENS: tuple[int, ...] = (64, 32)
"""Fig. 6's sequence lengths here: the recipe's T and half of it (the paper: 32 to 256)."""


def _gamma_of(alpha: float, seq_len: int) -> float:
    return float(f"{-alpha / seq_len:.6g}")


def _encoder_ablation(axis: str, description: str, grids: tuple[dict, ...]) -> Recipe:
    """An ablation at the encoder recipe's setting, the one chosen to grow outliers (issue 44;
    its vanilla reached 39.3, docs/studies/quant-encoder-recipe.md): `delimited_backcopy`,
    6,000 steps, the paper's schedule; quick: `_QUICK` but the grid's T."""
    return Recipe(
        name=f"quant-{axis}",
        description=description,
        base=_ENCODER_BASE,
        seeds=1,
        grids=grids,
        quick={k: v for k, v in _QUICK.items() if k != "seq_len"},
    )


ABLATIONS: dict[str, Recipe] = {
    "gamma": _encoder_ablation(
        "gamma",
        "Quantizable Transformers Fig. 6: clipped softmax's gamma = -alpha/T, alpha 1/2, 2, 8, "
        "at T 64 and 32 (with vanilla at 32), on the encoder recipe",
        (
            *(
                {
                    "variant": ("clipped",),
                    "seq_len": (t,),
                    "gamma": tuple(_gamma_of(a, t) for a in _ALPHAS),
                }
                for t in TRANSFER_SEQ_LENS
            ),
            {"variant": ("vanilla",), "seq_len": TRANSFER_SEQ_LENS[1:]},
        ),
    ),
    "pi_init": _encoder_ablation(
        "pi_init",
        "Quantizable Transformers Fig. 7: the linear gate's initial openness pi_init, 0.12 to 0.9, "
        "on the encoder recipe",
        ({"variant": ("gated",), "pi_init": (0.12, 0.25, 0.5, 0.9)},),
    ),
    "zeta": _encoder_ablation(
        "zeta",
        "Quantizable Transformers Table 1: clipped softmax's upper stretch zeta 1 / 1.03 at the "
        "recipe's gamma, and zeta 1.03 alone (gamma 0), on the encoder recipe",
        (
            {"variant": ("clipped",), "gamma": (BERT_GAMMA,), "zeta": (1.0, 1.03)},
            {"variant": ("clipped",), "gamma": (0.0,), "zeta": (1.03,)},
        ),
    ),
    "ln_weight_decay": Recipe(
        name="quant-ln_weight_decay",
        description="Quantizable Transformers Table 6: weight decay on the LayerNorm scales "
        "(the decoder, at the quick scale: no decoder setting here grows outliers)",
        base=dataclasses.replace(_QUICK_BASE, family="decoder"),
        seeds=1,
        grids=({"variant": ("vanilla", "gated"), "ln_weight_decay": (True, False)},),
    ),
}
"""The paper's ablations as recipes (axis -> recipe). The encoder's three run at the encoder
recipe's setting, chosen to grow outliers (pre-registered in
docs/studies/quant-ablations.md): Fig. 6, gamma = -alpha/T for alpha 1/2, 2, 8 at T 64 and 32
(BERT-6L); Fig. 7, the linear gate's pi_init from the 0.12 that degrades to 0.9 (BERT-6L);
Table 1, zeta 1.03 with and without gamma < 0 (BERT-base). Table 6, weight decay on
LayerNorm gamma for vanilla and the linear gate (OPT-125m), needs a decoder with outliers,
which no CPU setting here has grown: it stays at the quick scale."""

QUANT_RECIPES: dict[str, Recipe] = {
    QUANT.name: QUANT,
    CONSTANT_LR.name: CONSTANT_LR,
    MECHANISMS_RECIPE.name: MECHANISMS_RECIPE,
    **{r.name: r for r in ABLATIONS.values()},
}
"""Every quant-lab recipe by name."""
