"""Figure 7: distillation from an identical teacher (Softmax Cancellation), from `fig7`.

The student starts with the teacher's weights on a+b mod 53 and trains on its soft targets
(T = 4, Adam lr 2e-3, lambda 0, eps 1e-8). Columns: fp32/bf16 (bf16 compute on fp32 weights),
fp32, fp64. Rows: KL(teacher || student) on the training inputs (float64 from the logits;
an exact 0 is drawn as a labelled band on the bottom edge, since a log axis has no 0), the
parameter distance from the teacher, and test accuracy. Standard vs fixed soft-target cross-entropy.

    python -m figures fig7 [--quick | --full]
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np

from figures import paper
from figures._common import LOSS_COLORS, Context, new_figure, save, select
from figures.claims import Evidence, Row, claim_row, measured
from figures.registry import Figure

PRECISIONS = (("fp32/bf16", "bf16"), ("fp32", "fp32"), ("fp64", "fp64"))
_SOFT_TARGET = {"distill_objective": "soft_target"}  # the paper's loss; "kl" runs: _kl_rows
_FLOOR = {"kl": 1e-40, "param_distance": 1e-20}


def _log_curve(ax, step, values, floor, color, label) -> bool:
    """Plot the positive values; exact zeros as a band (or a dot) at `floor`. Any zeros?"""
    positive = values > 0
    ax.plot(step, np.where(positive, values, np.nan), color=color, label=label)
    zero = step[values == 0]
    if zero.size:  # a log axis has no 0: a band on the bottom edge
        ax.plot(
            zero[[0, -1]],
            [floor, floor],
            color=color,
            linewidth=3,
            alpha=0.7,
            marker="o",
            markersize=3,
        )
    return bool(zero.size)


def draw(ctx: Context) -> list:
    """Figure 7 from the fig7 recipe."""
    runs = ctx.runs("fig7")
    fig, axes = new_figure(3, 3, width=7.8, height=2.1, sharex=True)
    for col, (precision, _) in enumerate(PRECISIONS):
        ax_kl, ax_dist, ax_acc = axes[:, col]
        zeros = {"kl": False, "param_distance": False}
        for loss in ("standard", "fixed"):
            for run in select(runs, precision=precision, loss=loss, **_SOFT_TARGET):
                m = run.metrics
                color = LOSS_COLORS[loss]
                for name, ax in (("kl", ax_kl), ("param_distance", ax_dist)):
                    zeros[name] |= _log_curve(ax, m["step"], m[name], _FLOOR[name], color, loss)
                ax_acc.plot(m["test_step"], 100 * m["test_acc"], color=color, label=loss)
        for name, ax, top in (("kl", ax_kl, 100), ("param_distance", ax_dist, 1e3)):
            floor = _FLOOR[name]
            ax.set_yscale("log")
            ax.set_ylim(floor / 10, top)
            # Labelled decades stop well above the zero band, so the band reads as no value.
            gap = 10 if name == "kl" else 5
            ax.set_yticks(10.0 ** np.arange(np.log10(floor) + gap, np.log10(top), gap))
            ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            if zeros[name]:
                ax.annotate(
                    "band: exactly 0",
                    (0.5, floor),
                    xycoords=("axes fraction", "data"),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=6.5,
                    color="0.3",
                )
        ax_acc.set_ylim(-2, 102)
        ax_kl.set_title(precision)  # the precision's name, as in Table 1 and the report
        ax_acc.set_xlabel("step")
    axes[0, 0].set_ylabel("KL(teacher || student)")
    axes[1, 0].set_ylabel("|theta_S - theta_T|")
    axes[2, 0].set_ylabel("test accuracy (%)")
    axes[2, 0].legend(loc="lower left", fontsize=6.5)
    return save(fig, ctx, "fig7")


# --- the report's claims (Sec. 7, Fig. 7) -----------------------------------------------------


def _teacher_params(run, store):
    """The stored parameters of `run`'s teacher; None when the store does not hold them."""
    from grokbench.distill import teacher_config

    return store.load_params(teacher_config(run.config)) if store is not None else None


def typical_residual(run, store, objective: str = "soft_target") -> float | None:
    """Standard soft-target CE's (or `objective`'s) residual gradient at z_S = z_T as the
    paper means it: the median over the teacher's training rows of max_k |g_k| (Fig. 1b's
    statistic), at the run's compute dtype and temperature. None when the teacher's
    parameters are not stored."""
    import jax
    import jax.numpy as jnp

    import tasks
    from grokbench.precision import get_precision

    cfg, params = run.config, _teacher_params(run, store)
    if params is None:
        return None
    policy = get_precision(cfg.precision)
    with jax.enable_x64(policy.needs_x64):
        model = tasks.build_model(cfg.model_config())
        x = jnp.asarray(tasks.modular_split(cfg.modular_task())[0])
        z = model.apply(policy.cast_to_compute(policy.cast_to_param(params)), x)
        g = tasks.soft_target_gradient("standard", z, z, cfg.temperature, objective)
        rows = np.abs(np.asarray(g, np.float64)).max(axis=-1)
    return float(np.median(rows))


def teacher_margins(run, store) -> np.ndarray | None:
    """The stored teacher's logit margins on the training inputs (float32 logits from the
    float32 weights), or None when the teacher's parameters are not stored."""
    import jax.numpy as jnp

    import numerics
    import tasks

    cfg, params = run.config, _teacher_params(run, store)
    if params is None:
        return None
    model = tasks.build_model(cfg.model_config())
    x, y = (jnp.asarray(a) for a in tasks.modular_split(cfg.modular_task())[:2])
    z = model.apply(params, x).astype(jnp.float32)
    return np.asarray(numerics.logit_margin(z, y), np.float64)


def _mechanism_rows(ev: Evidence) -> list[Row]:
    """Sec. 7: T = 4 keeps the teacher's scaled margins m / T below c16, so its soft targets
    do not round to one-hot (read from the stored teacher). Sec. 7's other mechanism, Adam
    turning a residual above eps into steps of size lr, is analytic: figures/fig3.py."""
    import ml_dtypes

    import numerics
    from grokbench import recipes

    base = recipes.RECIPES["fig7"].base
    runs = select(ev.runs("fig7"), precision="fp32", loss="standard", **_SOFT_TARGET)
    margins = teacher_margins(runs[0], ev.store) if runs else None
    cliff = numerics.precision_cliff(ml_dtypes.bfloat16)
    t = runs[0].config.temperature if runs else base.temperature

    def targets_one_hot() -> int:
        import jax
        import jax.numpy as jnp

        # Each row's scaled margin as logits [m / T, 0] (target 0), its softmax in bf16.
        scaled = jnp.stack([jnp.asarray(margins / t), jnp.zeros(margins.shape)], -1)
        p = np.asarray(jax.nn.softmax(scaled.astype(jnp.bfloat16), axis=-1), np.float64)
        return int(np.sum(p[:, 0] == 1.0))

    return [
        claim_row(
            claim=f"T = {t:g} keeps the teacher's scaled margins m/T below c16, so its soft "
            "targets do not round to one-hot (bf16)",
            source=f"{paper.FIX}, Sec. 7",
            paper="T = 4 keeps the scaled margin m/T below c16 so p does not round to one-hot",
            ours=lambda: (
                f"teacher's training margins: max {margins.max():.2f}, max m/T "
                f"{margins.max() / t:.2f} (c16 = {cliff:.2f}); rows whose bf16 target "
                f"probability is exactly 1: {targets_one_hot()} of {margins.size}"
            ),
            tolerance="every m/T < c16 (the paper's own test of it)",
            # One criterion: in bf16 the softmax's sum 1 + e^(-m/T) rounds to 1 exactly from
            # c16 on, so 'no one-hot target' is 'm/T below c16' (the count is printed above).
            ok=None if margins is None else lambda: bool(np.all(margins / t < cliff)),
            why=ev.why("fig7") if not runs else "the teacher's parameters are not in the store",
        )
    ]


def _start_rows(ev: Evidence) -> list[Row]:
    runs, why = ev.runs("fig7"), ev.why("fig7")
    rows = []
    for precision, name in PRECISIONS:
        std = select(runs, precision=precision, loss="standard", **_SOFT_TARGET)
        fixed = select(runs, precision=precision, loss="fixed", **_SOFT_TARGET)
        number = paper.RESIDUAL[precision]
        typical = typical_residual(std[0], ev.store) if std else None
        rows.append(
            claim_row(
                claim=f"standard soft-target CE's residual gradient at z_S = z_T ({name})",
                source=f"{number.where}, Fig. 7",
                paper=number.stated,
                ours=lambda std=std, typical=typical: (
                    f"typical row (median of max_k |g_k|): "
                    f"{typical:.2g}; largest entry "
                    + (
                        f"{std[0].summary['residual_gradient']:.2g}"
                        if std[0].summary.get("residual_gradient") is not None
                        else "not stored"
                    )
                ),
                tolerance=number.tolerance,
                ok=None if typical is None else number.holds(typical),
                why=why if not std else "the teacher's parameters are not in the store",
            )
        )
        s = measured(fixed[0].summary, *_STAYS_KEYS) if fixed else None
        rows.append(
            claim_row(
                claim=f"fixed soft-target CE: zero gradient, KL 0, student never moves ({name})",
                source=f"{paper.FIX}, Sec. 7, Fig. 7",
                paper=paper.FIG7_FIXED,
                ours=lambda s=s: (
                    f"residual {s['residual_gradient']:g}, max KL {s['kl_max']:g}, "
                    f"max distance {s['max_param_distance']:g}, test "
                    f"{100 * s['min_test_accuracy']:.1f}-{100 * s['test_accuracy']:.1f} % "
                    f"(teacher {100 * s['teacher_test_accuracy']:.1f} %)"
                ),
                tolerance="all exactly 0; test accuracy = the teacher's at every step",
                ok=None if s is None else lambda s=s: _stays(s),
                why=why if not fixed else "the fixed run's summary lacks a measurement",
                scale=ev.decided_at("fig7", fixed),  # 'never moves': over the steps run
            )
        )
    return rows


def _full_rows(ev: Evidence) -> list[Row]:
    runs, why = ev.runs("fig7", full=True), ev.why("fig7", full=True)
    by = {p: select(runs, precision=p, loss="standard", **_SOFT_TARGET) for p, _ in PRECISIONS}
    s64 = (
        measured(by["fp64"][0].summary, "kl_max", "kl_final", "max_param_distance")
        if by["fp64"]
        else None
    )
    r32 = by["fp32"][0] if by["fp32"] else None
    if r32 is not None and ("kl" not in r32.metrics or measured(r32.summary, "kl_max") is None):
        r32 = None  # not measured: not tested
    floor = float(np.median(r32.metrics["kl"][-500:])) if r32 is not None else None
    s16 = (
        measured(
            by["fp32/bf16"][0].summary,
            "max_param_distance",
            "min_test_accuracy",
            "test_accuracy",
            "teacher_test_accuracy",
        )
        if by["fp32/bf16"]
        else None
    )
    where = f"{paper.FIX}, Sec. 7, Fig. 7"
    n = paper.KL_FLOOR_FP32
    return [
        claim_row(
            claim="fp64 standard: the residual (below eps) leaves the student near KL 0",
            source=where,
            paper="stays near KL = 0",
            ours=lambda: (
                f"max KL {s64['kl_max']:.2g}, final {s64['kl_final']:.2g}, "
                f"max distance {s64['max_param_distance']:.2g}"
            ),
            tolerance="max KL below the power of ten of fp32's floor (< 10^-6.5)",
            ok=None if s64 is None else s64["kl_max"] < 10**-6.5,
            why=why,
        ),
        claim_row(
            claim="fp32 standard: an initial KL spike, then a floor ~1e-6",
            source=where,
            paper=n.stated,
            ours=lambda: (
                f"spike {r32.summary['kl_max']:.2g}, floor (median of the last 500 "
                f"steps) {floor:.2g}"
            ),
            tolerance=f"floor: {n.tolerance}; spike above the floor",
            ok=None
            if r32 is None
            else {
                "floor within tolerance": n.holds(floor),
                "a spike above the floor": r32.summary["kl_max"] > floor,
            },
            why=why,
        ),
        claim_row(
            claim="bf16 standard: the student drifts away and test accuracy degrades",
            source=where,
            paper="drives the student away; degrades test accuracy",
            ours=lambda: (
                f"max distance {s16['max_param_distance']:.3g}, test accuracy min "
                f"{100 * s16['min_test_accuracy']:.1f} %, final {100 * s16['test_accuracy']:.1f} % "
                f"(teacher {100 * s16['teacher_test_accuracy']:.1f} %)"
            ),
            tolerance="moved (distance > 0) and min test accuracy below the teacher's",
            ok=None
            if s16 is None
            else {
                "moved": s16["max_param_distance"] > 0,
                "accuracy below the teacher's": s16["min_test_accuracy"]
                < s16["teacher_test_accuracy"],
            },
            why=why,
        ),
    ]


STILL, TEACHERS = "residual, KL and distance exactly 0", "the teacher's test accuracy throughout"
_STAYS_KEYS = (
    "residual_gradient",
    "kl_max",
    "max_param_distance",
    "min_test_accuracy",
    "teacher_test_accuracy",
    "test_accuracy",
)


def _stays(*summaries: dict) -> dict[str, bool]:
    """Fixed students that never moved, two criteria over all of `summaries`: zero residual,
    KL and distance; the teacher's test accuracy at every step."""
    return {
        STILL: all(
            (s["residual_gradient"], s["kl_max"], s["max_param_distance"]) == (0.0, 0.0, 0.0)
            for s in summaries
        ),
        TEACHERS: all(
            s["min_test_accuracy"] == s["teacher_test_accuracy"] == s["test_accuracy"]
            for s in summaries
        ),
    }


def _kl_rows(ev: Evidence) -> list[Row]:
    """Whether Fig. 7's claims carry over to KL(p || q) as the loss (the paper trains only
    soft-target CE): the fixed KL student, and standard (optax's) KL's residual."""
    runs, why = ev.runs("fig7"), ev.why("fig7")
    fixed = {
        p: select(runs, precision=p, loss="fixed", distill_objective="kl") for p, _ in PRECISIONS
    }
    have = all(fixed.values()) and all(
        measured(fixed[p][0].summary, *_STAYS_KEYS) is not None for p in fixed
    )
    std = {p: select(runs, precision=p, loss="standard", **_SOFT_TARGET) for p, _ in PRECISIONS}
    typical = {
        p: typical_residual(std[p][0], ev.store, "kl") if std[p] else None for p, _ in PRECISIONS
    }
    where = f"{paper.FIX}, Sec. 7, Fig. 7 (trained there with soft-target CE)"
    return [
        claim_row(
            claim="KL(p || q) as the loss, fixed: zero gradient, KL 0, student never moves "
            "(bf16, fp32, fp64)",
            source=where,
            paper=paper.FIG7_FIXED,
            ours=lambda: "; ".join(
                f"{name}: residual {fixed[p][0].summary['residual_gradient']:g}, max KL "
                f"{fixed[p][0].summary['kl_max']:g}, max distance "
                f"{fixed[p][0].summary['max_param_distance']:g}"
                for p, name in PRECISIONS
            ),
            tolerance="all exactly 0; test accuracy = the teacher's at every step",
            ok=None if not have else lambda: _stays(*(fixed[p][0].summary for p in fixed)),
            why=why,
            scale=ev.decided_at("fig7", [r for p in fixed for r in fixed[p]]),
        ),
        claim_row(
            claim="KL(p || q) as the loss, standard (optax's kl_divergence): the residual "
            "gradient at z_S = z_T (bf16, fp32, fp64)",
            source=where,
            paper=", ".join(paper.RESIDUAL[p].stated for p, _ in PRECISIONS),
            ours=lambda: (
                "typical rows (median of max_k |g_k|): "
                + ", ".join(f"{name} {typical[p]:.2g}" for p, name in PRECISIONS)
            ),
            tolerance="each the same power of ten as the paper's, 10^(k +- 1/2) ('~': an order "
            "of magnitude)",
            ok=None
            if None in typical.values()
            else lambda: all(paper.RESIDUAL[p].holds(typical[p]) for p, _ in PRECISIONS),
            why=why if not all(std.values()) else "the teacher's parameters are not in the store",
        ),
    ]


def claims(evidence: Evidence) -> list[Row]:
    """Sec. 7: the residual per precision, the fixed student, the standard students' paths,
    and whether they carry over to KL as the loss."""
    return (
        _start_rows(evidence)
        + _full_rows(evidence)
        + _kl_rows(evidence)
        + _mechanism_rows(evidence)
    )


FIGURE = Figure(
    name="fig7",
    order=7,
    builds={"fig7": draw},
    title="Fig. 7: distillation",
    images=("fig7.png",),
    claims=claims,
    recipes=("fig7",),
)
