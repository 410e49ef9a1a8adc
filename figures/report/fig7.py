"""The report's claims of Sec. 7 and Fig. 7 (distillation from an identical teacher): read
from the stored fig7 runs and, for the residual and the teacher's margins, the stored
teacher's parameters.
"""

from __future__ import annotations

import numpy as np

from figures._common import select
from figures._panels import FIG7_PRECISIONS as PRECISIONS
from figures._panels import FIG7_SOFT_TARGET as _SOFT_TARGET
from figures.registry import Claims
from figures.report import paper
from figures.report.claims import Evidence, Row, claim_row, measured

__all__ = [
    "CLAIMS",
    "PRECISIONS",
    "STILL",
    "TEACHERS",
    "claims",
    "teacher_margins",
    "typical_residual",
]


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
    turning a residual above eps into steps of size lr, is analytic: figures/report/fig3.py."""
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


CLAIMS = Claims(figure="fig7", claims=claims)
