"""The labs behind `grokbench run` and `sweep`: one small interface that each lab implements.

A `Lab` is a config class, the recipes it owns, how it expands a recipe and `key=value`
overrides into configs (through the one parser, `grokbench.overrides`), how it trains a batch
of configs into a `grokbench.store.Store` (loading the finished ones), how it sweeps them into
one resumable directory, and how it summarises its runs for the terminal and OUT. `LABS`
registers the three: the grokking engine (`grokbench.engine`), distillation
(`grokbench.distill`) and the quantization lab (`grokbench.quant`); `lab_for(recipe)` is the
one that owns a recipe. Each is a thin adapter over its module's own training loop, which
stays where it is: the grokking and distillation labs share `experiment.run_configs` (the one
place runs split by kind), the quant lab trains through `grokbench.quant.table`.
`grokbench quant` is the quant lab's synonym of `grokbench run`.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grokbench import experiment, recipes
from grokbench import sweep as sweeps
from grokbench.config import ConfigError, RunConfig, did_you_mean
from grokbench.quant import table as quant_table
from grokbench.quant.config import QuantConfig
from grokbench.quant.recipes import QUANT_RECIPES
from grokbench.recipes import Recipe
from grokbench.store import Store

__all__ = ["LABS", "QUANT", "Lab", "lab_for", "recipe_names"]


@dataclasses.dataclass(frozen=True)
class Lab:
    """One lab: its configs, its recipes, and how it trains, sweeps and summarises them.

    `expand(recipe, tokens, quick)`: the recipe's configs with `key=value` tokens applied.
    `train(configs, store, *, quick, progress, chunk_steps)`: train what `store` lacks of
    `configs`, load the rest; the stored runs (the grokking labs: one summary per config; the
    quant lab: its table, one row per config). `sweep(configs, out, *, quick, progress,
    chunk_steps, executor, max_batch)`: the same into OUT as a store, under OUT's lock, with
    the lab's tables written there. `summarise(runs, recipe, quick)`: what `run` and `sweep`
    print. `write(out, runs)`: the lab's files under `grokbench run --out OUT`. `sweep_files`:
    the files `sweep` writes in OUT beside its store.
    """

    name: str
    config: type
    recipes: Mapping[str, Recipe]
    expand: Callable[[Recipe, Sequence[str], bool], list]
    train: Callable[..., Any]
    sweep: Callable[..., Any]
    summarise: Callable[[Any, str, bool], str]
    write: Callable[[pathlib.Path, Any], list[pathlib.Path]]
    sweep_files: tuple[str, ...]

    def configs(self, recipe: str, *, quick: bool = False, overrides: Sequence[str] = ()) -> list:
        """The runs of `recipe` (one of this lab's) with `key=value` `overrides`."""
        return self.expand(self.recipes[recipe], list(overrides), quick)


# --- the grokking engine and distillation: RunConfig runs, `experiment.run_configs` ----------


def _expand_runs(recipe: Recipe, tokens: Sequence[str], quick: bool) -> list[RunConfig]:
    return sweeps.expand_grid(recipe.name, tokens, quick=quick)


def _train_runs(
    configs: Sequence[RunConfig],
    store: Store,
    *,
    quick: bool = False,
    progress: bool = True,
    chunk_steps: int = 1000,
) -> list[dict]:
    """`experiment.run_configs`: engine runs through `grokbench.engine`, distillation runs
    (`teacher_steps > 0`) through `grokbench.distill`, each summary with `run_dir`, `cached`."""
    return experiment.run_configs(configs, store, progress=progress, chunk_steps=chunk_steps)


def _sweep_runs(
    configs: Sequence[RunConfig],
    out: pathlib.Path,
    *,
    quick: bool = False,
    progress: bool = True,
    chunk_steps: int = 1000,
    executor: Any = None,
    max_batch: int | None = None,
) -> list[dict]:
    """`sweep.run_sweep`: OUT/runs/HASH, OUT/summary.json and OUT/sweep.csv."""
    return sweeps.run_sweep(
        configs,
        out,
        executor=executor,
        max_batch=max_batch,
        chunk_steps=chunk_steps,
        progress=progress,
    )


def _summarise_runs(summaries: Sequence[dict], recipe: str, quick: bool) -> str:
    return experiment.format_results(summaries, recipe, quick)


def _write_runs(out: pathlib.Path, summaries: Sequence[dict]) -> list[pathlib.Path]:
    return [experiment.write_out(out, summaries)]


def _grokking_recipes(distillation: bool) -> dict[str, Recipe]:
    """The grokking lab's recipes: those whose base distils from a teacher, or the others."""
    return {
        name: r
        for name, r in recipes.RECIPES.items()
        if bool(getattr(r.base, "teacher_steps", 0)) == distillation
    }


_GROKKING = Lab(
    name="grokking",
    config=RunConfig,
    recipes=_grokking_recipes(False),
    expand=_expand_runs,
    train=_train_runs,
    sweep=_sweep_runs,
    summarise=_summarise_runs,
    write=_write_runs,
    sweep_files=("summary.json", sweeps.TABLE_FILE),
)
"""The grokking engine (`grokbench.engine`): every `RECIPES` recipe but distillation's."""

_DISTILL = dataclasses.replace(_GROKKING, name="distillation", recipes=_grokking_recipes(True))
"""Distillation (`grokbench.distill`, teacher first): the recipes whose base has a teacher
(fig7). Same configs, store and commands as the engine's: `experiment.run_configs` sends its
runs to the distillation loop and `experiment.format_table` prints their residual and KL."""


# --- the quantization lab: QuantConfig runs, `grokbench.quant.table` ----------------------------


def _expand_quant(recipe: Recipe, tokens: Sequence[str], quick: bool) -> list[QuantConfig]:
    overrides = quant_table.parse_quant_overrides(tokens)
    return quant_table.quant_configs(quick, overrides, recipe)


def _train_quant(
    configs: Sequence[QuantConfig],
    store: Store,
    *,
    quick: bool = False,
    progress: bool = True,
    chunk_steps: int | None = None,
) -> dict:
    """`quant.table.quant_table`: train (cached), evaluate (cached), quantize; the table.
    `chunk_steps` is not used: the quant loop's chunk is `quant.train.CHUNK` steps."""
    return quant_table.quant_table(configs, store, quick=quick, progress=progress)


def _sweep_quant(
    configs: Sequence[QuantConfig],
    out: pathlib.Path,
    *,
    quick: bool = False,
    progress: bool = True,
    chunk_steps: int | None = None,
    executor: Any = None,
    max_batch: int | None = None,
) -> dict:
    """The quant lab into OUT (OUT/quant/{train,eval}/HASH, OUT/quant_table.{json,md}) under
    OUT's sweep lock; its runs train one after another in this process."""
    if executor is not None or max_batch is not None:
        raise ConfigError("the quant lab trains in this process: no --executor or --batch")
    with sweeps.lock(out):
        store = Store(out)
        store.remove_temporaries()
        table = _train_quant(configs, store, quick=quick, progress=progress)
        quant_table.write_quant_table(out, table)
    return table


def _summarise_quant(table: dict, recipe: str, quick: bool) -> str:
    return quant_table.format_markdown(table)


QUANT = Lab(
    name="quant",
    config=QuantConfig,
    recipes=QUANT_RECIPES,
    expand=_expand_quant,
    train=_train_quant,
    sweep=_sweep_quant,
    summarise=_summarise_quant,
    write=quant_table.write_quant_table,
    sweep_files=("quant_table.json", "quant_table.md"),
)
"""The quantization lab (`grokbench.quant`): `QUANT_RECIPES`, runs under ROOT/quant/."""

LABS: dict[str, Lab] = {lab.name: lab for lab in (_GROKKING, _DISTILL, QUANT)}
"""Every lab by name; each recipe belongs to exactly one (`lab_for`)."""


def recipe_names() -> list[str]:
    """Every lab's recipe names, in `LABS` order."""
    return [name for lab in LABS.values() for name in lab.recipes]


def lab_for(recipe: str, figures: Sequence[str] = ()) -> Lab:
    """The lab that owns `recipe`; else a `ConfigError` with suggestions from every lab's
    recipes, and the figure's command if `recipe` is the name of one of `figures`."""
    for lab in LABS.values():
        if recipe in lab.recipes:
            return lab
    message = f"unknown recipe {recipe!r}; {did_you_mean(recipe, recipe_names())}"
    if recipe in figures:
        message += f" ({recipe} is a figure: grokbench figures {recipe})"
    raise ConfigError(message)
