"""Figures a reader can read: no two texts of a figure (reference-line labels, other texts in
its axes, legend entries, titles) overlap once the figure is drawn.

Every registered figure is drawn on fabricated data: the runs of test_figures.py's fake
engine at its TINY sizes (margins reaching fp64's cliff), numpy stand-ins for fig1's and
fig3's exact curves, fabricated fig7 runs; the quant build (it trains in its own store) is
replaced by its outlier and sweep figures on a fabricated table (its attention figure has
tick labels and titles only). Saving is replaced by keeping the figure: each is drawn once,
no file is written. Tick and axis labels are not checked."""

import itertools

import matplotlib.pyplot as plt
import numpy as np
import pytest

import figures._analytic
import figures._common
import numerics
from figures import build, fig1, quant, registry
from figures._common import Context, Run
from grokbench.store import Store
from tests.figures import test_figures

fake_engine = test_figures.fake_engine  # the fixture: standard CE runs spike, others do not

_NOT_RUN = ("quant",)  # trains in its own store: drawn from a fabricated table instead


@pytest.fixture
def kept(monkeypatch):
    """Saving replaced by keeping: name -> the figure (closed at the end)."""
    figs = {}

    def keep(fig, out, name):
        figs[name] = fig
        return []

    monkeypatch.setattr(figures._common, "save_to", keep)
    monkeypatch.setattr(quant, "save_to", keep)
    yield figs
    for fig in figs.values():
        plt.close(fig)


def _texts(fig):
    """(where, Text) for every visible, non-empty text of the figure's axes: texts and
    annotations, legend entries, titles."""
    found = []
    for i, ax in enumerate(fig.axes):
        name = ax.get_title() or ax.get_title("left") or ax.get_ylabel() or "untitled"
        where = f"axes {i} ({name!r})"
        texts = [*ax.texts, ax.title, ax._left_title, ax._right_title]
        legend = ax.get_legend()
        if legend is not None:
            texts += legend.get_texts()
        found += [(where, t) for t in texts if t.get_visible() and t.get_text().strip()]
    return found


def _box(bbox) -> str:
    """A window extent as 'x0,y0 to x1,y1' in pixels."""
    x0, y0, x1, y1 = (round(float(v), 1) for v in bbox.extents)
    return f"[{x0},{y0} to {x1},{y1}]"


def overlaps(fig) -> list[str]:
    """One line per pair of the figure's texts whose boxes intersect."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(where, t, t.get_window_extent(renderer)) for where, t in _texts(fig)]
    return [
        f"{wa}: {ta.get_text()!r} {_box(ba)} overlaps {wb}: {tb.get_text()!r} {_box(bb)}"
        for (wa, ta, ba), (wb, tb, bb) in itertools.combinations(boxes, 2)
        if ba.overlaps(bb)
    ]


@pytest.fixture
def numpy_curves(monkeypatch):
    """fig1's and fig3's exact curves (JAX programs and mpmath: seconds to compile and run)
    replaced by numpy ones of their shape: the target gradient -1/(1 + e^m), the standard
    one exactly 0 past its dtype's cliff; soft-target errors growing with the distance, the
    fixed one's exactly 0 at the smallest. The figures draw the same texts."""

    def target_gradients(dtype, margins, truth=True):
        m = np.asarray(margins, np.float64)
        exact = -np.exp(-m) / (1.0 + np.exp(-m))  # -1 / (1 + e^m), without overflow
        cols = {
            "m": m,
            "fixed": exact,
            "standard": np.where(m > numerics.precision_cliff(dtype), 0.0, exact),
        }
        return cols | ({"truth": exact} if truth else {})

    def soft_target_errors(dtype, distances):
        d = np.asarray(distances, np.float64)
        return {
            "distance": d,
            "truth": 0.1 * d,
            "standard": 1e-3 * d + 1e-9,
            "fixed": np.where(d < 1e-10, 0.0, 1e-8 * d),
        }

    monkeypatch.setattr(fig1, "target_gradients", target_gradients)
    monkeypatch.setattr(figures._analytic, "target_gradients", target_gradients)  # fig3's
    monkeypatch.setattr(fig1, "soft_target_errors", soft_target_errors)


def _quant_table(tmp_path) -> dict:
    """A fabricated quant table: two variants of one family, a sweep, outlier counts."""
    rows = []
    for variant in ("gated", "gated_mlp"):
        for pi in (0.25, 0.5):
            analysis = tmp_path / f"{variant}_{pi}.npz"
            dims = np.zeros((2, 16))
            dims[1, 3] = 5 if variant == "gated" else 0
            np.savez(analysis, outlier_dims=dims)
            rows.append(
                {
                    "family": "encoder",
                    "variant": variant,
                    "label": f"{variant} (pi {pi})",
                    "sweep": {"pi_init": pi},
                    "fp_perplexity": 3.0 + pi,
                    "max_inf_norm": 10 * pi,
                    "w8a8_perplexity": 3.1 + pi,
                    "analysis": str(analysis),
                }
            )
    return {"rows": rows}


def _distilled(tmp_path) -> Context:
    """A context holding fabricated fig7 runs (distillation has its own loop, not the fake
    engine's): KL and parameter distance falling, exactly 0 for the fixed loss."""
    store = Store(tmp_path / "store")
    ctx = Context(True, tmp_path, store, progress=False, overrides={"steps": (20,)})
    runs = []
    for cfg in ctx.configs("fig7"):
        n = cfg.steps
        falling = np.zeros(n) if cfg.loss == "fixed" else np.geomspace(1e-3, 1e-12, n)
        run = Run(cfg, {}, tmp_path / "fig7")
        run.__dict__["metrics"] = {  # the cached property, filled
            "step": np.arange(n),
            "kl": falling,
            "param_distance": falling,
            "test_step": np.arange(1, n + 1),
            "test_acc": np.ones(n),
        }
        runs.append(run)
    ctx._cache["fig7"] = runs
    return ctx


def _context(tmp_path, name: str) -> Context:
    """The context `name` is drawn in: test_figures.py's TINY recipes (fig5 at both of its
    eps rows, 1e-8 and 1e-16, as at full scale), fig7's fabricated runs."""
    if name == "fig7":
        return _distilled(tmp_path)
    overrides = {**test_figures.TINY, "progress_measures": (True,)}
    if name == "fig5":
        overrides["eps"] = (1e-8, 1e-16)
    return Context(
        quick=True,
        out=tmp_path,
        store=Store(tmp_path / "store"),
        overrides=overrides,
        progress=False,
    )


@pytest.fixture
def long_margins(monkeypatch):
    """test_figures.py's fake runs with margins rising to 36.8 (-log 1e-16), past fp64's
    cliff (36.7) as full-scale runs do: the margin axes span every cliff they mark."""
    fabricate = test_figures._fake_metrics

    def fake_metrics(cfg, spiky):
        cols = fabricate(cfg, spiky)
        return cols | {"margin_mean": 2 * cols["margin_mean"]}

    monkeypatch.setattr(test_figures, "_fake_metrics", fake_metrics)


def test_no_two_texts_of_a_figure_overlap(tmp_path, fake_engine, long_margins, numpy_curves, kept):
    for name, draw in registry.builds().items():
        if name not in _NOT_RUN:
            ctx = _context(tmp_path, name)
            build.train(ctx, [name])  # the build trains; a figure only draws
            draw(ctx)
    rows = _quant_table(tmp_path)["rows"]
    quant._outlier_dims_figure(rows, "encoder", tmp_path)
    quant._sweep_figure(rows, "pi_init", tmp_path)
    assert {"fig1a", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7", "progress"} <= set(kept)
    found = {name: overlaps(fig) for name, fig in kept.items()}
    failures = [f"{name}: {line}" for name, lines in found.items() for line in lines]
    assert not failures, "texts overlap:\n" + "\n".join(failures)


def test_labels_of_nearby_lines_are_spread_apart_and_keep_their_text():
    """The helper alone: labels of lines closer than a text's height (at the top edge too,
    where a label cannot move up) come apart, keep their text, and a second draw places
    them where the first did."""
    fig, axes = figures._common.new_figure(1, 1, width=3.0)
    ax = axes[0, 0]
    ax.plot([0, 10], [0, 40])
    cliffs = {"cliff 36.7": 36.7, "log(1/eps) 36.8": 36.8, "c32 = 16.6": 16.6, "m 17": 17.0}
    figures._common.mark_cliffs(ax, cliffs, axis="y")
    figures._common.mark_cliffs(ax, {"M": 5.0, "C": 5.0, "K": 5.05})
    try:
        assert overlaps(fig) == []
        assert [t.get_text() for t in ax.texts] == [*cliffs, "M", "C", "K"]
        placed = [t.xyann for t in ax.texts]
        assert placed != [(0, 0)] * 4 + [(2, -2)] * 3  # some moved
        assert overlaps(fig) == [] and [t.xyann for t in ax.texts] == placed
    finally:
        plt.close(fig)
