"""The one registry of figures: each figure module declares itself once, as `FIGURE`, and
each module of the report's claims declares which figure its claims are about, as `CLAIMS`.

A figure module (any public module of this package) that defines `FIGURE = Figure(...)` is
a figure: `grokbench figures` builds it (training first the runs it `needs`), the
reproduction report gives it a section, and the CLI knows its names. A module of
`figures.report` that defines `CLAIMS = Claims(figure=NAME, ...)` fills that figure's
section with its claims. Nothing else lists figures or claims; everything below is derived
from the declarations, so adding a figure is adding one module, and its claims one more
(docs/architecture.md). This module is the link between the two: the figure scripts never
import the report, and the report imports no figure script.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pathlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "Claims",
    "Figure",
    "aliases",
    "builds",
    "claimed_recipes",
    "claims",
    "figure_of",
    "figures",
    "run_only",
]

Draw = Callable[[Any], list[pathlib.Path]]  # a Context -> the paths it wrote


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure module's declaration.

    `name` is what `grokbench figures NAME` builds: every entry of `builds` (output name ->
    draw function taking a `figures._common.Context`); where `name` is not itself one of
    them, it is an alias for all of them (fig1 -> fig1a, fig1b). `order` places the figure
    in the build and in the report. `title` and `images` make its report section (no title:
    no section), which its claims fill (`Claims`). `recipes` are the recipes whose runs its
    build makes (a recipe's hints name this figure); `draws` are recipes it draws whose runs
    another figure's build makes; `quant_lab`: it draws the quant lab's tables, which the
    build makes in the lab's own store first. The build trains what a figure `needs` before
    drawing it; a draw function only reads.
    """

    name: str
    order: int
    builds: Mapping[str, Draw]
    title: str | None = None
    images: tuple[str, ...] = ()
    recipes: tuple[str, ...] = ()
    draws: tuple[str, ...] = ()
    quant_lab: bool = False

    @property
    def needs(self) -> tuple[str, ...]:
        """Every recipe whose runs the figure draws: its own, then the others'."""
        return tuple(dict.fromkeys([*self.recipes, *self.draws]))


@dataclasses.dataclass(frozen=True)
class Claims:
    """One module of the report's claims (`figures.report`), declared as `CLAIMS`.

    `figure` is the name of the figure whose report section the rows fill; `claims` maps the
    report's `Evidence` to the rows; `reads` are recipes the claims read that no figure
    draws (`grokbench run NAME` makes them).
    """

    figure: str
    claims: Callable[[Any], list]
    reads: tuple[str, ...] = ()


def _declared(package: str, name: str, kind: type) -> list:
    """Every public module of `package` whose attribute `name` is a `kind`: those values."""
    path = pathlib.Path(importlib.import_module(package).__file__).parent
    found = []
    for info in pkgutil.iter_modules([str(path)]):
        if info.name.startswith("_"):
            continue
        value = getattr(importlib.import_module(f"{package}.{info.name}"), name, None)
        if isinstance(value, kind):
            found.append(value)
    return found


@functools.cache
def figures() -> tuple[Figure, ...]:
    """Every declared figure, in `order`: the public modules of this package with a FIGURE."""
    found = sorted(_declared("figures", "FIGURE", Figure), key=lambda f: f.order)
    seen: dict[str, str] = {}
    for f in found:
        for name in {f.name, *f.builds}:
            if name in seen:
                raise RuntimeError(f"figure name {name!r} declared by {seen[name]} and {f.name}")
            seen[name] = f.name
    return tuple(found)


@functools.cache
def claims() -> dict[str, Claims]:
    """Each figure's name -> its claims (the modules of `figures.report` with a CLAIMS), in
    the figures' order."""
    names = [f.name for f in figures()]
    found: dict[str, Claims] = {}
    for c in _declared("figures.report", "CLAIMS", Claims):
        if c.figure not in names:
            raise RuntimeError(f"claims declared for {c.figure!r}, which is no figure")
        if c.figure in found:
            raise RuntimeError(f"two modules declare the claims of {c.figure!r}")
        found[c.figure] = c
    return {name: found[name] for name in names if name in found}


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
    return tuple(dict.fromkeys(r for c in claims().values() for r in c.reads if r not in made))


def claimed_recipes() -> tuple[str, ...]:
    """The recipes whose stored runs the report reads: those of figures with claims, then
    the run-only ones."""
    claimed = claims()
    drawn = (r for f in figures() if f.name in claimed for r in f.recipes)
    return tuple(dict.fromkeys([*drawn, *run_only()]))
