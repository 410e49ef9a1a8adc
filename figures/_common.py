"""What every figure script shares: the build context, stored runs, one plot style, saving.

A figure script gets a `Context` and asks it for a recipe's runs (`ctx.runs("fig2-top")`).
The context expands the recipe at the build's scale (`--quick` or `--full`) and hands out
the finished runs: those the build trained before drawing (`figures.build.train`, through
`grokbench.experiment.run_configs`, the path `grokbench run` takes), else the store's. A
figure never trains: drawn with runs the store lacks, it raises `MissingRuns`, naming the
command that makes them. So figures never train anything a second way, and a warm store
makes a build take seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display needed (or wanted) on a headless machine

import matplotlib.artist
import matplotlib.pyplot as plt
import matplotlib.transforms
import numpy as np

from grokbench import recipes
from grokbench.config import RunConfig
from grokbench.store import Store, atomic_write_bytes, default_root, load_metrics

__all__ = [
    "ABLATIONS_FILE",
    "CLIFF_STYLE",
    "CONSTANT_LR_FILE",
    "LOSS_COLORS",
    "PRECISION_COLORS",
    "QUANT_TABLE_FILE",
    "Context",
    "MissingRuns",
    "Run",
    "line_label",
    "margin_curves",
    "mark_cliffs",
    "new_figure",
    "save",
    "save_to",
    "select",
    "style",
]

QUANT_TABLE_FILE = "quant_table.json"
"""The quant lab's table of this build's scale, which the build writes into OUT before the
quant figures are drawn from it (`grokbench.quant.run_quant`)."""

ABLATIONS_FILE = "quant_ablations.json"
"""The full build's ablation sweeps: {"vanilla": table, AXIS: table} (`run_ablations`)."""

CONSTANT_LR_FILE = "quant_constant_lr.json"
"""The full build's `quant-constant-lr` table (`grokbench.quant.recipes.CONSTANT_LR`): the
encoder recipe at a constant lr, read as `Evidence.quant["constant_lr"]`."""

LOSS_COLORS: dict[str, str] = {
    "fixed": "#1b7837",  # green: the fix
    "standard": "#b2182b",  # red: the bug
    "zero_sum": "#2166ac",
    "stablemax": "#762a83",
}
"""One colour per loss variant, in every figure."""

PRECISION_COLORS: dict[str, str] = {
    "bf16": "#e08214",
    "fp32/bf16": "#e08214",
    "fp32": "#2166ac",
    "fp64": "#4d4d4d",
}
"""One colour per precision (bf16 compute on fp32 parameters shares bf16's)."""

CLIFF_STYLE: dict[str, Any] = {"color": "0.45", "linestyle": ":", "linewidth": 1.0}
"""Vertical/horizontal marker lines for precision cliffs."""

_RC: dict[str, Any] = {
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 7.5,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "lines.linewidth": 1.2,
    "pdf.fonttype": 42,  # embed TrueType, so the PDF text stays text
}


def style() -> None:
    """Apply the one style all grokbench figures share."""
    plt.rcParams.update(_RC)


def new_figure(nrows: int, ncols: int, width: float = 7.0, height: float = 2.4, **kw: Any):
    """A styled (figure, axes) grid, `height` inches per row; axes always a 2-D array."""
    style()
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width, height * nrows), squeeze=False, layout="constrained", **kw
    )
    return fig, axes


def mark_cliffs(ax, cliffs: Mapping[str, float], axis: str = "x", label: bool = True) -> None:
    """Dotted lines at the given cliffs (name -> margin), labelled at the top/right edge."""
    for name, value in cliffs.items():
        (ax.axvline if axis == "x" else ax.axhline)(value, **CLIFF_STYLE)
        if label:
            line_label(ax, name, value, axis=axis)


def line_label(ax, text: str, value: float, axis: str = "x", *, above: bool = False, **style):
    """Label the reference line at `value` of `ax` (a vertical line if `axis` is "x", a
    horizontal one if "y"). Every reference-line label of a figure goes through here, so
    that none overlap: `_LabelPlacer` moves them apart once the figure is laid out.

    A vertical line's label hangs from the top edge, just right of the line (`above`: it
    stands on the top edge, outside the axes); a horizontal line's sits on its line at the
    right edge. fontsize 7, grey, on a translucent white box that keeps the curves behind it
    from striking through the text, unless `style` says otherwise. Returns the annotation."""
    box = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}
    style = {"fontsize": 7, "color": "0.35", "bbox": box, "zorder": 5, **style}
    if axis == "y":
        kind, at, xycoords = "y", (1.0, value), ("axes fraction", "data")
        (ha, va), offset = ("right", "bottom"), (0, 0)
    else:
        kind, at, xycoords = ("above" if above else "x"), (value, 1.0), ("data", "axes fraction")
        (ha, va), offset = (("left", "baseline"), (0, 0)) if above else (("left", "top"), (2, -2))
    label = ax.annotate(
        text,
        at,
        xycoords=xycoords,
        ha=ha,
        va=va,
        xytext=offset,
        textcoords="offset points",
        **style,
    )
    _LabelPlacer.of(ax).add(label, kind)
    return label


_MOVES = {"x": ((0, -1), (1, 0)), "y": ((0, 1), (-1, 0)), "above": ((0, 1), (1, 0))}
"""A label's two directions (display x, y) by kind: away from its line's side, along its edge."""


class _LabelPlacer(matplotlib.artist.Artist):
    """An invisible artist of one axes that places the axes' reference-line labels so that
    none overlaps another, or another text of the axes (its texts and titles).

    It places them whenever the figure is laid out (constrained layout asks the axes' artists
    for their extents: the placer answers with its labels' once placed, so the layout makes
    room for a label moved out of the axes) and again when the axes is drawn (zorder below
    Text's: before the labels are drawn). Each time, every label starts from its home (where
    `line_label` put it, against its line); then the labels are taken in order (vertical
    lines' left to right, horizontal lines' bottom to top), each moved clear of the texts
    placed before it, `GAP` points apart, in one of two directions: away from its line's side
    (a hanging label down, a horizontal line's up, one above the axes up) or along the edge
    it sits on (right, left, right). Of the two it takes the shorter move that keeps the label
    in the axes (a label above the axes: in the column above them); if neither does, the
    shorter."""

    GAP = 1.5  # points between two texts

    def __init__(self):
        super().__init__()
        self.set_zorder(2.9)  # below Text's 3: drawn before the labels
        self.labels: list[tuple[Any, str, tuple[float, float]]] = []

    @classmethod
    def of(cls, ax) -> _LabelPlacer:
        """The axes' placer (added on first use)."""
        placer = getattr(ax, "_grokbench_label_placer", None)
        if placer is None:
            placer = ax._grokbench_label_placer = cls()
            ax.add_artist(placer)
            placer.set_clip_on(False)  # else the layout leaves it out, as inside the axes
        return placer

    def add(self, label, kind: str) -> None:
        label.set_in_layout(False)  # the placer gives the layout its placed labels' extents
        self.labels.append((label, kind, tuple(label.xyann)))

    def draw(self, renderer) -> None:
        self.place(renderer)

    def get_window_extent(self, renderer=None):
        boxes = self.place(renderer or self.figure._get_renderer())
        return matplotlib.transforms.Bbox.union(boxes) if boxes else None

    def get_tightbbox(self, renderer=None):
        return self.get_window_extent(renderer)

    def place(self, renderer) -> list:
        """Place the labels (see the class); their extents."""
        ax = self.axes
        for label, _, home in self.labels:
            label.xyann = home
        labels = [item for item in self.labels if item[0].get_visible()]
        mine = {id(item[0]) for item in self.labels}
        others = [*ax.texts, ax.title, ax._left_title, ax._right_title]
        placed = [  # the axes' other texts and titles stay where they are
            t.get_window_extent(renderer)
            for t in others
            if id(t) not in mine and t.get_visible() and t.get_text().strip()
        ]
        frame = ax.get_window_extent(renderer)
        gap = renderer.points_to_pixels(self.GAP)
        points = renderer.points_to_pixels(1.0)  # display units per point

        def order(item):  # vertical lines' labels left to right, then horizontal ones' upwards
            box = item[0].get_window_extent(renderer)
            return (1, box.y0, -box.x1) if item[1] == "y" else (0, box.x0, -box.y1)

        boxes = []
        for label, kind, home in sorted(labels, key=order):
            box = label.get_window_extent(renderer)
            room = matplotlib.transforms.Bbox.union([frame, box])
            if kind == "above":
                room = matplotlib.transforms.Bbox([[room.x0, room.y0], [room.x1, np.inf]])
            options = [(_clear(box, placed, d, gap), d) for d in _MOVES[kind]]
            inside = [o for o in options if _within_room(box, *o, room)]
            shift, (dx, dy) = min(inside or options, key=lambda o: o[0])
            if shift:
                label.xyann = (home[0] + dx * shift / points, home[1] + dy * shift / points)
                box = label.get_window_extent(renderer)
            placed.append(box)
            boxes.append(box)
        return boxes


def _clear(box, placed, direction, gap: float) -> float:
    """How far (display units) `box` must move along `direction` ((0, 1) up, (0, -1) down,
    (1, 0) right, (-1, 0) left) to come no closer than `gap` to any box in `placed`."""
    dx, dy = direction
    shift = 0.0
    for _ in range(len(placed) + 1):  # moving one way, a box once cleared stays cleared
        moved = box.translated(dx * shift, dy * shift)
        hit = next((b for b in placed if _near(moved, b, gap)), None)
        if hit is None:
            break
        shift += {
            (0, 1): hit.y1 + gap - moved.y0,
            (0, -1): moved.y1 - (hit.y0 - gap),
            (1, 0): hit.x1 + gap - moved.x0,
            (-1, 0): moved.x1 - (hit.x0 - gap),
        }[direction]
    return shift


def _near(a, b, gap: float) -> bool:
    """Whether boxes `a` and `b` overlap or come closer than `gap`."""
    return a.x0 < b.x1 + gap and b.x0 < a.x1 + gap and a.y0 < b.y1 + gap and b.y0 < a.y1 + gap


def _within_room(box, shift: float, direction, room) -> bool:
    """Whether `box` moved `shift` along `direction` stays in `room`."""
    moved = box.translated(direction[0] * shift, direction[1] * shift)
    return (
        room.x0 <= moved.x0 and moved.x1 <= room.x1 and room.y0 <= moved.y0 and moved.y1 <= room.y1
    )


@dataclasses.dataclass
class Run:
    """One finished run: its config, summary.json, and (loaded on first use) its metrics."""

    config: RunConfig
    summary: dict
    run_dir: pathlib.Path

    @functools.cached_property
    def metrics(self) -> dict[str, np.ndarray]:
        """The stored metric columns (see grokbench.metrics)."""
        return load_metrics(self.run_dir)


class MissingRuns(RuntimeError):
    """A figure was drawn without runs (or a table) it reads: the message names the command
    that makes them. A build never raises it: it trains what each figure reads first."""


@dataclasses.dataclass
class Context:
    """One figures build: its scale, where images go, the store, and the runs it loaded.

    `overrides` (key -> tuple of values, as `grokbench run` parses them) are applied to every
    recipe; tests use them to shrink recipes. Nothing here trains: `runs` hands out the runs
    the build trained (`keep`) or the store holds, and raises `MissingRuns` for a recipe
    with a missing run; `stored` gives None instead (the report uses that to say what was
    not tested). `progress` is the build's: its training shows progress bars.
    """

    quick: bool
    out: pathlib.Path
    store: Store
    progress: bool = True
    overrides: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    _cache: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def scale(self) -> str:
        """'quick' or 'full'."""
        return "quick" if self.quick else "full"

    def configs(self, recipe: str) -> list[RunConfig]:
        """The recipe's runs at this build's scale."""
        return recipes.expand(recipes.get_recipe(recipe), self.overrides, quick=self.quick)

    def keep(self, recipe: str, summaries: Sequence[dict]) -> list[Run]:
        """Hold the recipe's runs, one summary per config of `configs(recipe)` (as the build's
        training returns them), for every later `runs` or `stored` of this context."""
        runs = [
            Run(cfg, summary, self.store.run_dir(cfg))
            for cfg, summary in zip(self.configs(recipe), summaries, strict=True)
        ]
        self._cache[recipe] = runs
        return runs

    def kept(self, recipe: str) -> bool:
        """Whether this context holds the recipe's runs already."""
        return recipe in self._cache

    def stored(self, recipe: str) -> list[Run] | None:
        """The recipe's finished runs; None when the store lacks any (nothing is trained)."""
        if recipe in self._cache:
            return self._cache[recipe]
        configs = self.configs(recipe)
        summaries = [self.store.load_summary(cfg) for cfg in configs]
        if any(s is None for s in summaries):
            return None
        return self.keep(recipe, summaries)

    def runs(self, recipe: str) -> list[Run]:
        """The recipe's finished runs; `MissingRuns`, naming the command that trains them,
        when the store lacks any (a figure drawn outside a build, or on another store)."""
        runs = self.stored(recipe)
        if runs is None:
            raise MissingRuns(self.missing(recipe))
        return runs

    def missing(self, recipe: str) -> str:
        """What `runs` says of a recipe the store lacks runs of: how many, and the command."""
        from figures import registry  # it imports the figure modules, which import this one

        configs = self.configs(recipe)
        lacking = sum(self.store.load_summary(cfg) is None for cfg in configs)
        figure = registry.figure_of().get(recipe)
        flag = "--quick" if self.quick else "--full"
        command = (
            f"grokbench figures {figure} {flag}"
            if figure
            else f"grokbench run {recipe}{' --quick' if self.quick else ''}"
        )
        if self.store.root != default_root():
            command += f" --results {self.store.root}"
        make = f"`{command}` trains them"
        return (
            f"{lacking} of {len(configs)} {recipe} runs of the {self.scale} scale are not in "
            f"the store {self.store.root}; a figure never trains: {make}"
        )


def margin_curves(ax, runs: Sequence[Run], *, color, label: str | None = None, alpha=0.8) -> None:
    """One thin line per run: its mean training margin against the step (`label` on the
    first only, so a legend names the group once)."""
    for i, run in enumerate(runs):
        m = run.metrics
        ax.plot(
            m["step"],
            m["margin_mean"],
            color=color,
            alpha=alpha,
            linewidth=0.9,
            label=label if i == 0 else None,
        )


def select(runs: Sequence[Run], **where: Any) -> list[Run]:
    """The runs whose config has every given key = value."""
    return [r for r in runs if all(getattr(r.config, k) == v for k, v in where.items())]


def save(fig, ctx: Context, name: str) -> list[pathlib.Path]:
    """Write OUT/NAME.png and OUT/NAME.pdf (each atomically), close the figure, return paths."""
    return save_to(fig, ctx.out, name)


def save_to(fig, out: pathlib.Path, name: str) -> list[pathlib.Path]:
    """`save` into the directory `out` (for figures drawn outside a build: `grokbench quant`)."""
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    try:
        for path in paths:
            buf = io.BytesIO()
            fig.savefig(buf, format=path.suffix[1:])
            atomic_write_bytes(path, buf.getvalue())
    finally:
        plt.close(fig)
    return paths
