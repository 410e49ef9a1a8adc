"""The one registry of figures: each figure module declares itself once, as `FIGURE`.

A figure module (any public module of this package) that defines `FIGURE = Figure(...)` is
a figure: `grokbench figures` builds it, the reproduction report gives it a section, and
the CLI knows its names. Nothing else lists figures; everything below is derived from the
declarations, so adding a figure is adding one module (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pathlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Figure", "aliases", "builds", "claimed_recipes", "figure_of", "figures", "run_only"]

Draw = Callable[[Any], list[pathlib.Path]]  # a Context -> the paths it wrote


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure module's declaration.

    `name` is what `grokbench figures NAME` builds: every entry of `builds` (output name ->
    draw function taking a `figures._common.Context`); where `name` is not itself one of
    them, it is an alias for all of them (fig1 -> fig1a, fig1b). `order` places the figure
    in the build and in the report. `title`, `images` and `claims` make its report section
    (no title: no section). `recipes` are the recipes whose runs its build makes (a recipe's
    hints name this figure); `reads` are recipes its claims read that no figure draws
    (`grokbench run NAME` makes them).
    """

    name: str
    order: int
    builds: Mapping[str, Draw]
    title: str | None = None
    images: tuple[str, ...] = ()
    claims: Callable[[Any], list] | None = None
    recipes: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()


@functools.cache
def figures() -> tuple[Figure, ...]:
    """Every declared figure, in `order`: the public modules of this package with a FIGURE."""
    package = pathlib.Path(__file__).parent
    found = []
    for info in pkgutil.iter_modules([str(package)]):
        if info.name.startswith("_"):
            continue
        figure = getattr(importlib.import_module(f"figures.{info.name}"), "FIGURE", None)
        if isinstance(figure, Figure):
            found.append(figure)
    found.sort(key=lambda f: f.order)
    seen: dict[str, str] = {}
    for f in found:
        for name in {f.name, *f.builds}:
            if name in seen:
                raise RuntimeError(f"figure name {name!r} declared by {seen[name]} and {f.name}")
            seen[name] = f.name
    return tuple(found)


def builds() -> dict[str, Draw]:
    """Every buildable figure or table by name, in build order."""
    return {name: draw for f in figures() for name, draw in f.builds.items()}


def aliases() -> dict[str, tuple[str, ...]]:
    """Names that stand for several builds (a figure's name that is none of its builds)."""
    return {f.name: tuple(f.builds) for f in figures() if f.name not in f.builds}


def figure_of() -> dict[str, str]:
    """Each recipe a figure's build makes -> that figure's name (the first to declare it)."""
    out: dict[str, str] = {}
    for f in figures():
        for recipe in f.recipes:
            out.setdefault(recipe, f.name)
    return out


def run_only() -> tuple[str, ...]:
    """Recipes the report reads that no figure draws."""
    made = figure_of()
    return tuple(dict.fromkeys(r for f in figures() for r in f.reads if r not in made))


def claimed_recipes() -> tuple[str, ...]:
    """The recipes whose stored runs the report reads: those of figures with claims, then
    the run-only ones."""
    drawn = (r for f in figures() if f.claims is not None for r in f.recipes)
    return tuple(dict.fromkeys([*drawn, *run_only()]))
