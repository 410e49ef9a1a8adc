"""What a figure draws and the report's claims about it both name, stated once: the recipes
and variants of Figure 6's panels, Figure 7's columns, Table 1's names for precisions.

The figure scripts draw their panels from these; the report's claims (`figures.report`) test
the same settings and print the same names, without importing a figure script.
"""

from __future__ import annotations

__all__ = [
    "FIG6_RECIPES",
    "FIG6_TITLES",
    "FIG6_VARIANTS",
    "FIG7_PRECISIONS",
    "FIG7_SOFT_TARGET",
    "TABLE1_SHOW",
]

FIG6_RECIPES = ("fig6-mod113", "fig6-mod31", "fig6-sq", "fig6-cube")
"""Figure 6's benchmarks, one column each."""

FIG6_VARIANTS = (  # (precision, loss, colour, label)
    ("fp32", "standard", "#b2182b", "fp32 standard"),
    ("fp32", "fixed", "#1b7837", "fp32 fixed"),
    ("fp64", "standard", "#4d4d4d", "fp64 standard"),
)
"""Figure 6's lines: (precision, loss, colour, label)."""

FIG6_TITLES = {
    "fig6-mod113": "a+b mod 113 (transformer)",
    "fig6-mod31": "a+b mod 31 (transformer)",
    "fig6-sq": "a^2+b^2 mod 97 (MLP)",
    "fig6-cube": "a^3+b mod 97 (MLP)",
}
"""Each benchmark's name: its panel's title and its claims' prefix."""

FIG7_PRECISIONS = (("fp32/bf16", "bf16"), ("fp32", "fp32"), ("fp64", "fp64"))
"""Figure 7's columns: (precision policy, the name its claims give it)."""

FIG7_SOFT_TARGET = {"distill_objective": "soft_target"}
"""Figure 7's runs: the paper's soft-target loss (the recipe's "kl" runs are the report's)."""

TABLE1_SHOW = {"fp32/bf16": "bf16", "fp32": "fp32", "fp64": "fp64"}
"""How Table 1 names a precision policy (bf16 = bf16 compute on fp32 parameters)."""
