"""Every claim of the reproduction report tested both ways: on fabricated data it must hold,
on fabricated data it must fail, and without data it is `not tested`.

`CASES` holds, per claims function, a fabricated must-hold evidence, one or more must-fail
ones, and the empty evidence (None for the analytic claims, which compute their own data; their
measurements are replaced through the modules' seams instead). `test_every_row_can_hold_and_fail`
enumerates every row the report can emit (`report.evaluate` on empty evidence) and fails when a
row has no case in which it holds, no case in which it fails, or (reading stored data) no case
without data: a new row cannot be added without both fabricated cases.
"""

import dataclasses
import json
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import numerics
from figures import build, registry, report
from figures._common import Context, Run
from figures.report import (
    fig1,
    fig2,
    fig3,
    fig4,
    fig6,
    fig7,
    paper,
    progress,
    quant,
    table1,
)
from figures.report.claims import (
    FAILS,
    HOLDS,
    NOT_TESTED,
    TOLERANCE,
    Evidence,
    Row,
    grok_rate,
    spikes_row,
)
from grokbench import metrics, recipes, runtime
from grokbench.config import RunConfig
from grokbench.store import Store, load_metrics

# --- fabricated runs ---------------------------------------------------------------------------


def _run(recipe="fig2-top", metrics=None, **fields):
    """A Run with the recipe's config (fields that are config keys replace it) and summary."""
    keys = {f.name for f in dataclasses.fields(RunConfig)}
    base = recipes.RECIPES[recipe].base
    cfg = dataclasses.replace(base, **{k: v for k, v in fields.items() if k in keys})
    summary = {k: v for k, v in fields.items() if k not in keys}
    run = Run(cfg, summary, None)
    run.__dict__["metrics"] = metrics or {}
    return run


def _spiky(n=400, spike_at=200, margin=16.6, acc_before=0.61, acc_after=0.23):
    """Metrics of one spike at `spike_at` from `margin`; test accuracy around it."""
    step = np.arange(n)
    ce = np.geomspace(1.0, 1e-7, n)
    ce[spike_at : spike_at + 3] = 1e-1
    cols = {name: np.full(n, 0.5) for name in metrics.STEP_METRICS}
    # The mean margin steps up by 0.1 at the spike: from 16.6 it reaches c32 = 16.64 there.
    cols |= {
        "train_ce": ce,
        "train_loss": ce,
        "margin_mean": np.where(step < spike_at, margin, margin + 0.1),
    }
    cols["margin_median"] = cols["margin_mean"]
    cols["train_acc"] = np.where(step >= 10, 1.0, 0.5)
    test_step = np.arange(0, n, 10)
    return {
        "step": step,
        **cols,
        "test_step": test_step,
        "test_acc": np.where(test_step <= spike_at - 10, acc_before, acc_after),
    }


def _fig2(good: bool):
    """Fig. 2 as the paper has it (good), or with every measured value off (bad)."""

    def top(loss, seed):
        fixed = loss == "fixed"
        return _run(
            loss=loss,
            seed=seed,
            spikes=(0 if fixed else 3) if good else (2 if fixed else 0),
            grok_step=(1000 if fixed else 3000) if good else (3000 if fixed else 1000),
            test_accuracy=(1.0 if fixed else 0.943) if good else 0.5,
            final_margin=(17.9 if fixed else 13.0) if good else (10.0 if fixed else 25.0),
            metrics=_spiky(margin=16.6 if good else 10.0),
        )

    def bottom(loss, seed, recipe="fig2-bottom", before=0.61, after=0.23):
        spiky = (
            _spiky(n=2000, spike_at=1250, acc_before=before, acc_after=after)
            if good
            else _spiky(n=2000, spike_at=1600, margin=10.0, acc_before=0.2, acc_after=0.9)
        )
        return _run(
            recipe,
            loss=loss,
            seed=seed,
            spikes=1,
            test_accuracy=0.85 if good else 0.3,
            metrics=spiky,
        )

    return {
        "fig2-top": [top(loss, s) for loss in ("fixed", "standard") for s in range(5)],
        "fig2-top-seeds": [
            _run(
                "fig2-top-seeds",
                loss="fixed",
                seed=s,
                test_accuracy=1.0,
                grok_step=4000 if good or s != 7 else None,
            )
            for s in range(paper.GROK_RATE_SEEDS)
        ],
        "fig2-bottom": [bottom(loss, s) for loss in ("fixed", "standard") for s in range(3)],
        "fig2-bottom-cube": [
            bottom(loss, s, "fig2-bottom-cube", 0.60, 0.21)
            for loss in ("fixed", "standard")
            for s in range(3)
        ],
        "eps-settle": [
            _run("eps-settle", eps=eps, seed=s, spikes=0 if good or s else 2)
            for eps in (1e-7, 1e-6)
            for s in range(5)
        ],
    }


def _table1(good: bool):
    runs = []
    for (precision, loss), cells in paper.TABLE1.items():
        for eps, (acc, _, margin) in cells.items():
            for s in range(3):
                if good:
                    value = acc / 100
                elif loss == "fixed":
                    value = 0.0
                else:  # a cell both ways: 30 points away from the paper's, inside [0, 1]
                    value = acc / 100 + (0.3 if acc < 60 else -0.3)
                runs.append(
                    _run(
                        "table1",
                        precision=precision,
                        loss=loss,
                        eps=eps,
                        seed=s,
                        test_accuracy=value,
                        final_margin=margin if good else margin * 30 + 5,
                        spikes=(3 if good else 1) if loss == "standard" else 1 - good,
                    )
                )
    return {"table1": runs}


def _fig4(good: bool):
    """fig4's runs: every eps climbs at one rate along the eps = 0 path and levels off at
    log(1/eps) (good); levels off 10 nats low and climbs at half the rate (bad)."""
    runs = []
    n = 3000
    rate = 2 * 81.2 / n  # eps = 0 reaches 81.2 half way
    for wd in (1.0, 0.0):
        for eps in (*fig4.EPS, 0.0):
            top = 81.2 if eps == 0 else numerics.equilibrium_margin(eps) + (3.0 if not wd else 0)
            slope = rate if good or eps == 0 else rate / 2
            top = top if good else top - 10
            margin = np.minimum(slope * np.arange(n), top)
            m = {"step": np.arange(n), "margin_mean": margin}
            m |= {k: np.full(n, 0.1) for k in metrics.STEP_METRICS if k not in m}
            base = recipes.RECIPES["fig4"].base
            cfg = dataclasses.replace(base, eps=eps, weight_decay=wd, steps=n)
            runs.append(
                _run(
                    "fig4",
                    eps=eps,
                    weight_decay=wd,
                    steps=n,
                    metrics=m,
                    config=dataclasses.asdict(cfg),
                )
            )
    return {"fig4": runs}


def _fig4_run(eps: float, wd: float, margin: np.ndarray, seed: int = 0):
    """One fig4 run whose mean margin is `margin` at every step."""
    n = margin.size
    m = {"step": np.arange(n), "margin_mean": margin}
    m |= {k: np.full(n, 0.1) for k in metrics.STEP_METRICS if k not in m}
    cfg = dataclasses.replace(recipes.RECIPES["fig4"].base, eps=eps, weight_decay=wd, steps=n)
    return _run(
        "fig4",
        eps=eps,
        weight_decay=wd,
        steps=n,
        seed=seed,
        metrics=m,
        config=dataclasses.asdict(cfg),
    )


def _fig4_plateau(criterion: str) -> Callable:
    """fig4 with lambda 1 broken on one criterion for every eps: a second seed still climbing
    (the other at log(1/eps)), or the one run levelling off 10 nats low."""

    def case(mp):
        runs = _fig4(True)["fig4"]
        n, rate = 3000, 2 * 81.2 / 3000
        if criterion == fig4.PLATEAUED:
            runs += [_fig4_run(eps, 1.0, rate * np.arange(n), seed=1) for eps in fig4.EPS]
        else:
            runs = [
                _fig4_run(
                    r.config.eps,
                    1.0,
                    np.minimum(rate * np.arange(n), numerics.equilibrium_margin(r.config.eps) - 10),
                )
                if r.config.eps > 0 and r.config.weight_decay == 1.0
                else r
                for r in runs
            ]
        return Evidence("full", {"fig4": runs})

    return case


def _fig6(good: bool):
    out = {}
    for recipe in fig6.RECIPES:
        out[recipe] = [
            _run(
                recipe,
                precision=p,
                loss=loss,
                spikes=int(good) if (p, loss) == ("fp32", "standard") else 0,
                test_accuracy=1.0 if good or p == "fp64" else 0.9,
                metrics={"step": np.array([0, 1]), "margin_mean": np.array([10.0, 17.0])},
            )
            for p, loss, *_ in fig6.VARIANTS
        ]
    return out


def _fig7_runs(good: bool):
    runs = []
    for precision, _ in fig7.PRECISIONS:
        for loss, objective in (
            ("fixed", "soft_target"),
            ("standard", "soft_target"),
            ("fixed", "kl"),
        ):
            moved = 0.0 if loss == "fixed" and good else 1.0
            kl = np.full(2000, 1e-6 if precision == "fp32" else 1e-9)
            kl[5] = 1e-3
            runs.append(
                _run(
                    "fig7",
                    precision=precision,
                    loss=loss,
                    distill_objective=objective,
                    residual_gradient=moved,
                    kl_max=(0.0 if loss == "fixed" else 1e-9 if precision == "fp64" else 1e-3)
                    if good
                    else 1e-3,
                    kl_final=1e-9,
                    max_param_distance=moved,
                    min_test_accuracy=0.5
                    if precision == "fp32/bf16" and good and loss == "standard"
                    else 1.0,
                    test_accuracy=1.0,
                    teacher_test_accuracy=1.0,
                    metrics={"kl": kl if good else kl * 1e3},
                )
            )
    return {"fig7": runs}


def _orthograd(good: bool):
    """The orthograd recipe: every standard-CE ⊥Grad seed at lambda 0 reaches 99 % test, before
    the same seed without ⊥Grad, which never does (good); or one ⊥Grad seed never does either,
    though it ends at 100 % (bad: generalization is reaching 99 % at some evaluation)."""
    grid = recipes.RECIPES["orthograd"].grids[0]
    runs = []
    for loss in grid["loss"]:
        for flag in grid["orthograd"]:
            for wd in grid["weight_decay"]:
                for s in range(3):
                    tested = loss == "standard" and flag and wd == 0
                    plain = loss == "standard" and not flag and wd == 0
                    reached = not plain and (good or not tested or s)
                    runs.append(
                        _run(
                            "orthograd",
                            loss=loss,
                            orthograd=flag,
                            weight_decay=wd,
                            seed=s,
                            test_accuracy=1.0,
                            grok_step=2000 if reached else None,
                        )
                    )
    return {"orthograd": runs}


# --- fabricated quant tables -------------------------------------------------------------------


def _quant(good: bool = True, vanilla: bool = True) -> dict:
    """The quant table: as the paper has it (good), with every fix off (not good), or with a
    vanilla that has no outliers, loses nothing at any width and parks no attention on
    delimiters (not vanilla)."""
    rows = []
    families = {
        **paper.QUANT_TABLE2,
        "encoder": {**paper.QUANT_TABLE2["encoder"], **{v: None for v in paper.TABLE5_GATES}},
    }
    for family, variants in families.items():
        for variant in [*variants, *(["clipped"] if family == "decoder" else [])]:
            is_vanilla = variant == "vanilla"
            bad_fix = not good and not is_vanilla
            fp = 10.0
            loss = (2.0 if vanilla else 1.0) if is_vanilla else 1.01
            ppl = {b: fp * loss for b in ("w8a8", "w6a8", "w4a8", "w6a6")}
            if family == "decoder" and variant == "clipped":
                ppl = {b: 40.0 if good else 12.0 for b in ppl}
            inf = (500.0 if vanilla else 5.0) if is_vanilla or bad_fix else 10.0
            kurt = 1000.0 if is_vanilla or bad_fix else 10.0
            if family == "decoder" and variant == "clipped":
                kurt = 5000.0 if good else 10.0
            rows.append(
                {
                    "family": family,
                    "variant": variant,
                    "label": variant,
                    "max_inf_norm": inf,
                    "avg_kurtosis": kurt,
                    "fp_perplexity": fp if not bad_fix else 2 * fp,
                    **{f"{b}_perplexity": (v if not bad_fix else 100.0) for b, v in ppl.items()},
                    "outlier_share_on_delimiters": [0.99, None, 0.98] if vanilla else [0.99, 0.4],
                    "delimiter_share_of_tokens": 0.1,
                    "max_head_delimiter_attention": 0.95 if vanilla else 0.3,
                    "parking_head": [2, 1],
                    "parking_head_value_ratio": 0.1 if vanilla else 0.9,
                    "delimiter_value_ratio_by_layer": [0.8, 0.6, 0.1],
                }
            )
    return {"quick": True, "rows": rows, "configs": []}


def _ablations(good: bool = True, vanilla_inf: float = 500.0) -> dict:
    """The full build's sweeps: each point as the paper has it (good) or the opposite."""
    seq_len = 64

    def row(family, variant, axis, value, inf, fp=10.0, w8a8=10.5, gamma=-2.0 / seq_len):
        return {
            "family": family,
            "variant": variant,
            "sweep": {axis: value},
            "gamma": gamma,
            "fp_perplexity": fp,
            "w8a8_perplexity": w8a8,
            "max_inf_norm": inf,
        }

    def table(*rows, family="encoder"):
        return {"rows": list(rows), "configs": [{"family": family, "seq_len": seq_len}]}

    g = good
    alphas = {0.5: (200.0 if g else 10.0, 10.0), 2.0: (10.0 if g else 400.0, 10.0)}
    alphas[8.0] = (1.0, 11.0 if g else 10.0)  # alpha 8: FP hurt (good) or level (bad)
    pis = {0.12: (10.0, 11.0 if g else 10.0, 10.5)}
    pis |= {p: (10.0 if g else 400.0, 10.0, 10.5 if g else 20.0) for p in (0.25, 0.5, 0.9)}
    vanilla = [row(f, "vanilla", "-", 0, vanilla_inf, w8a8=20.0) for f in ("encoder", "decoder")]
    return {
        "vanilla": table(*vanilla),
        "gamma": table(  # T 64 (the recipe's) and 32 with its own vanilla: Fig. 6's transfer
            *(
                {
                    **row("encoder", "clipped", "gamma", -a / t, inf, fp, gamma=-a / t),
                    "sweep": {"gamma": -a / t, "seq_len": t},
                }
                for t in (seq_len, seq_len // 2)
                for a, (inf, fp) in alphas.items()
            ),
            {
                **row("encoder", "vanilla", "gamma", None, vanilla_inf, w8a8=20.0, gamma=0.0),
                "sweep": {"gamma": None, "seq_len": seq_len // 2},
            },
        ),
        "pi_init": table(
            *(
                row("encoder", "gated", "pi_init", p, inf, fp, w8)
                for p, (inf, fp, w8) in pis.items()
            )
        ),
        "zeta": table(
            row("encoder", "clipped", "zeta", 1.0, 10.0),
            row("encoder", "clipped", "zeta", 1.03, 11.0 if g else 20.0),
            row("encoder", "clipped", "zeta", 1.03, 520.0 if g else 100.0, gamma=0.0),
        ),
        "ln_weight_decay": table(
            row("decoder", "vanilla", "ln_weight_decay", True, 100.0 if g else 400.0),
            row("decoder", "vanilla", "ln_weight_decay", False, 500.0),
            family="decoder",
        ),
    }


# --- fabricated analytic measurements (the seams of figures.fig1 and figures.fig3) -------------


def _measure_at(fixed_zero: float):
    """fig1._measure with the fixed gradient's first zero replaced (the cliff measured)."""
    real = fig1._measure

    def measure(name):
        return dataclasses.replace(real(name), fixed_grad_zero_from=fixed_zero)

    return measure


def _square_zero_from(first: float):
    """fig1.squared_gradient's stand-in: (g/n)^2 is 0 from `first` on."""
    return lambda n: lambda m: np.asarray([0.0 if m[0] >= first else 1e-30])


def _floor_errors(good: bool):
    """fig1.soft_target_errors' stand-in: the standard floor positive and the fixed error
    relative to the truth (good), or a floor of 0 and a fixed error of 50 % (bad)."""

    def errors(dtype, distances, rows=8, k=10, seed=0):
        d = np.asarray(distances, float)
        truth = d.copy()
        eps = float(ml_dtypes.finfo(dtype).eps)
        return {
            "distance": d,
            "truth": truth,
            "standard": np.full(d.shape, 1e-3 if good else 0.0),
            "fixed": truth * (eps * 1e-3 if good else 0.5),  # 0.5: > 16 eps even in bf16
        }

    return errors


def _worked(good: bool):
    """fig1._worked_examples' stand-in: the paper's printed values (good) or 1 % off (bad)."""

    def examples(*args):
        scale = 1.0 if good else 1.01
        ours = {key: np.asarray(v) * scale for key, v in paper.SEC2_EXAMPLE.items()}
        soft = {loss: np.asarray(v) * scale for loss, v in paper.SEC3_EXAMPLE.items()}
        return ours, soft

    return examples


def _perturbed(fn: Callable, key: str, how: Callable) -> Callable:
    """`fn` with its result's entry `key` replaced by how(result)."""

    def wrapped(*args, **kwargs):
        out = dict(fn(*args, **kwargs))
        out[key] = how(out)
        return out

    return wrapped


def _loss_like_gradient(mp) -> None:
    """The standard loss's cliff seams replaced by the target gradient's (which holds): its
    first zero the gradient's, its values the gradient's, so the loss rows hold."""
    measure, gradients = fig1._measure, fig1.target_gradients
    mp.setattr(
        fig1,
        "_measure",
        lambda name: dataclasses.replace(
            measure(name), standard_loss_zero_from=measure(name).standard_grad_zero_from
        ),
    )
    mp.setattr(
        fig1, "_standard_loss_at", lambda dtype, m: gradients(dtype, m, truth=False)["standard"]
    )


def _fig1_good(mp) -> Evidence:
    mp.setattr(fig1, "_measure", _measure_at(88.0))
    _loss_like_gradient(mp)
    mp.setattr(fig1, "_nontarget_zero_from", lambda dtype: 88.0)
    mp.setattr(fig1, "squared_gradient", _square_zero_from(38.0))
    mp.setattr(fig1, "soft_target_errors", _floor_errors(True))
    mp.setattr(fig1, "_worked_examples", _worked(True))
    return Evidence("quick", bench=_bench(1.0))


def _fig1_bad(mp) -> Evidence:
    real = fig1._measure
    mp.setattr(
        fig1,
        "_measure",
        lambda name: dataclasses.replace(
            real(name), standard_grad_zero_from=9.0, fixed_grad_zero_from=60.0
        ),
    )
    mp.setattr(fig1, "_nontarget_zero_from", lambda dtype: 60.0)
    mp.setattr(fig1, "squared_gradient", _square_zero_from(30.0))
    mp.setattr(fig1, "soft_target_errors", _floor_errors(False))
    mp.setattr(fig1, "_worked_examples", _worked(False))
    off = _perturbed(fig1.target_gradients, "fixed", lambda g: g["fixed"] * 1.5)  # > 16 eps
    mp.setattr(fig1, "target_gradients", off)
    mp.setattr(
        fig1,
        "gradient_sums",
        _perturbed(fig1.gradient_sums, "standard", lambda s: -s["truth"]),
    )
    mp.setattr(fig1, "gradient_sums", _perturbed(fig1.gradient_sums, "fixed", lambda s: s["truth"]))
    return Evidence("quick", bench=_bench(1.5))


def _bench(ratio):
    names = ("optax CE", "fixed CE", "standard soft CE", "fixed soft CE")
    times = dict(zip(names, (1.0, ratio, 1.0, ratio), strict=True))
    times |= {f"{name} (grad)": t for name, t in times.items()}
    return {"device": "a fabricated CPU", "float32": times, "bfloat16": times}


def _fig3_shifted(mp) -> Evidence:
    def shifted(dtype, margins, eps=fig3.EPS, truth=False):
        m = np.asarray(margins, np.float64)
        return {"m": m, "fixed": np.where(m < 10, 1.0, 0.0), "standard": np.where(m < 3, 1.0, 0.0)}

    mp.setattr(fig3, "normalized_steps", shifted)
    return Evidence("quick")


# --- the cases ---------------------------------------------------------------------------------


def _fixed(evidence: Evidence) -> Callable:
    return lambda mp: evidence


def _full(make: Callable, **kw) -> Callable:
    return lambda mp: Evidence("full", make(**kw))


def _fig7_case(good: bool) -> Callable:
    def case(mp):
        values = {"fp32/bf16": 1e-3, "fp32": 1e-8, "fp64": 1e-17}
        mp.setattr(fig7, "teacher_margins", lambda run, store: np.full(64, 17.0 if good else 30.0))
        mp.setattr(
            fig7,
            "typical_residual",
            lambda run, store, objective="soft_target": (
                values[run.config.precision] if good else 1.6e-2
            ),
        )
        return Evidence("full", _fig7_runs(good))

    return case


def _quant_case(good: bool = True, vanilla: bool = True) -> Callable:
    return lambda mp: Evidence(
        "full",
        quant={
            **_quant(good, vanilla),
            "ablations": _ablations(good),
            "constant_lr": _quant(good, vanilla),
        },
    )


def _fig1_cliffs(criterion: str) -> Callable:
    """Fig. 1's cliff rows (target gradient and loss) broken on one criterion: the function
    nonzero at the measured first zero, or zero below it too, or both zeros at m = 9."""

    def case(mp):
        ev = _fig1_good(mp)
        measure = fig1._measure
        if criterion == fig1.IN_TOLERANCE:
            mp.setattr(
                fig1,
                "_measure",
                lambda name: dataclasses.replace(
                    measure(name), standard_grad_zero_from=9.0, standard_loss_zero_from=9.0
                ),
            )

            def value(m):
                return np.where(np.asarray(m) >= 9.0, 0.0, 1.0)
        else:
            level = 1.0 if criterion == fig1.ZERO_AT_FIRST else 0.0

            def value(m):
                return np.full(np.shape(m), level)

        step = _perturbed(fig1.target_gradients, "standard", lambda g: value(g["m"]))
        mp.setattr(fig1, "target_gradients", step)
        mp.setattr(fig1, "_standard_loss_at", lambda dtype, m: value(m))
        return ev

    return case


def _fig1_floor(criterion: str) -> Callable:
    """Fig. 1b's fixed row broken on one criterion: an error at z_S = z_T, an error where the
    input rounds to z_T (true gradient 0), or a 50 % error elsewhere."""

    def case(mp):
        ev = _fig1_good(mp)
        good = _floor_errors(True)

        def errors(dtype, distances, rows=8, k=10, seed=0):
            e = {key: np.array(v, float) for key, v in good(dtype, distances).items()}
            if criterion.startswith("0 at"):
                e["fixed"][0] = 1e-3
            elif criterion.startswith("0 where"):
                e["truth"][1], e["fixed"][1] = 0.0, 1e-3
            else:
                e["fixed"] = e["truth"] * 0.5
            return e

        mp.setattr(fig1, "soft_target_errors", errors)
        return ev

    return case


def _fig3_cliffs(criterion: str) -> Callable:
    """Fig. 3's cliff rows with the first zero at the dtype's first value past c_d (inside the
    tolerance) and the standard step nonzero everywhere (0 at the first zero fails) or zero
    everywhere (not 0 below it fails)."""

    def case(mp):
        level = 1.0 if criterion == fig1.ZERO_AT_FIRST else 0.0
        steps = _perturbed(
            fig3.normalized_steps, "standard", lambda s: np.full(s["m"].shape, level)
        )
        mp.setattr(fig3, "normalized_steps", steps)

        def past_the_cliff(step, coarse, dtype):
            cliff = numerics.precision_cliff(dtype)
            value = np.asarray(cliff, dtype)
            return float(
                value if float(value) >= cliff else np.nextafter(value, np.asarray(np.inf, dtype))
            )

        mp.setattr(fig3, "_first_zero", past_the_cliff)
        return Evidence("quick")

    return case


def _adam_steps(above: float, below: float) -> Callable:
    """fig3's Adam seam: step / lr `above` for residuals above eps, `below` under it."""

    def case(mp):
        mp.setattr(
            fig3,
            "adam_step_sizes",
            lambda r, lr, eps, steps=50: np.where(np.asarray(r) > eps, above, below),
        )
        return Evidence("quick")

    return case


def _perturb(make: Callable, recipe: str, where: dict, metrics=None, **summary) -> Callable:
    """`make`'s evidence with the `recipe` runs whose config matches `where` given `summary`
    values (and `metrics(columns)` merged into their metrics)."""

    def case(mp):
        ev = make(mp)
        for run in ev.recipes[recipe]:
            if all(getattr(run.config, k) == v for k, v in where.items()):
                run.summary.update(summary)
                if metrics is not None:
                    run.__dict__["metrics"] = {**run.metrics, **metrics(run.metrics)}
        return ev

    return case


def _quant_edit(family: str, variant: str, **fields) -> Callable:
    """The good quant table with one row's fields replaced."""

    def case(mp):
        ev = _quant_case()(mp)
        for row in ev.quant["rows"]:
            if (row["family"], row["variant"]) == (family, variant):
                row.update(fields)
        return ev

    return case


@dataclasses.dataclass(frozen=True)
class Bad:
    """A must-fail evidence (a function of a monkeypatch that may replace a measurement) and
    the one criterion it breaks. It speaks for the rows that have that criterion (and, with
    `only`, whose claim contains one of those strings): each such row that fails must fail
    on exactly `target`. A row with one test has the one criterion TOLERANCE."""

    make: Callable
    target: str = TOLERANCE
    only: tuple[str, ...] = ()

    def speaks_for(self, row: Row) -> bool:
        return self.target in row.criteria and (
            not self.only or any(s in row.claim for s in self.only)
        )


@dataclasses.dataclass(frozen=True)
class Case:
    """A claims function with a must-hold evidence and must-fail ones (`Bad`), and its
    evidence without data (None: the rows compute their own data, as the analytic ones do)."""

    claims: Callable[[Evidence], list[Row]]
    good: Callable
    bad: tuple[Bad, ...]
    empty: Evidence | None


_FIG2 = _full(_fig2, good=True)
_TABLE1 = _full(_table1, good=True)
_FIG7 = _fig7_case(True)
_SETTLE = "eps-settle"
_SOFT = {"distill_objective": "soft_target"}

CASES: dict[str, Case] = {
    "fig1": Case(
        fig1.claims,
        _fig1_good,
        (
            Bad(_fig1_bad),
            *(
                Bad(_fig1_cliffs(c), c)
                for c in (fig1.ZERO_AT_FIRST, fig1.NONZERO_BELOW, fig1.IN_TOLERANCE)
            ),
            *(
                Bad(_fig1_floor(c), c)
                for c in ("0 at z_S = z_T", "0 where z_S rounds to z_T", "<= 16 eps elsewhere")
            ),
        ),
        None,
    ),
    "fig2": Case(
        fig2.claims,
        _FIG2,
        (
            Bad(_full(_fig2, good=False)),
            Bad(
                _perturb(_FIG2, _SETTLE, {"eps": 1e-7, "seed": 0}, spikes=2),
                "eps 1e-07: 0 on every seed",
            ),
            Bad(
                _perturb(_FIG2, _SETTLE, {"eps": 1e-6, "seed": 0}, spikes=2),
                "eps 1e-06: 0 on every seed",
            ),
        ),
        Evidence("full"),
    ),
    "fig3": Case(
        fig3.claims,
        _fixed(Evidence("quick")),
        (
            Bad(_fig3_shifted),
            Bad(_fig3_shifted, fig1.IN_TOLERANCE),
            Bad(_fig3_cliffs(fig1.ZERO_AT_FIRST), fig1.ZERO_AT_FIRST),
            Bad(_fig3_cliffs(fig1.NONZERO_BELOW), fig1.NONZERO_BELOW),
            Bad(_adam_steps(0.5, 1e-9), "steps ~ lr above eps"),
            Bad(_adam_steps(1.0, 0.5), "steps << lr below eps"),
        ),
        None,
    ),
    "fig4": Case(
        fig4.claims,
        _full(_fig4, good=True),
        (
            Bad(_full(_fig4, good=False)),
            Bad(_fig4_plateau(fig4.PLATEAUED), fig4.PLATEAUED),
            Bad(_fig4_plateau(fig4.AT_THE_PREDICTION), fig4.AT_THE_PREDICTION),
        ),
        Evidence("full"),
    ),
    "table1": Case(
        table1.claims,
        _TABLE1,
        (
            Bad(_full(_table1, good=False)),
            *(
                Bad(_perturb(_TABLE1, "table1", where, **change), target)
                for where, change, target in (
                    (
                        {"precision": "fp64", "loss": "standard", "eps": 1e-16, "seed": 0},
                        {"spikes": 0},
                        "standard: >= 1 on every seed",
                    ),
                    (
                        {"precision": "fp64", "loss": "fixed", "eps": 1e-16, "seed": 0},
                        {"spikes": 1},
                        "fixed: 0 on every seed",
                    ),
                    (
                        {"precision": "fp32/bf16", "loss": "fixed", "eps": 1e-8, "seed": 0},
                        {"final_margin": 3.0},
                        "every seed above c16",
                    ),
                    (
                        {"precision": "fp32", "loss": "fixed", "eps": 1e-8, "seed": 0},
                        {"final_margin": 3.0},
                        "every seed above c32",
                    ),
                    (
                        {"loss": "fixed", "eps": 1e-8, "seed": 0},
                        {"spikes": 1},
                        "no spike on any seed",
                    ),
                )
            ),
        ),
        Evidence("full"),
    ),
    "fig6": Case(
        fig6.claims, _full(_fig6, good=True), (Bad(_full(_fig6, good=False)),), Evidence("full")
    ),
    "fig7": Case(
        fig7.claims,
        _FIG7,
        (
            Bad(_fig7_case(False)),
            Bad(_perturb(_FIG7, "fig7", {"loss": "fixed"}, kl_max=1e-9), fig7.STILL),
            Bad(_perturb(_FIG7, "fig7", {"loss": "fixed"}, min_test_accuracy=0.9), fig7.TEACHERS),
            Bad(
                _perturb(
                    _FIG7,
                    "fig7",
                    {"precision": "fp32", "loss": "standard", **_SOFT},
                    metrics=lambda m: {"kl": m["kl"] * 100},
                ),
                "floor within tolerance",
            ),
            Bad(
                _perturb(
                    _FIG7, "fig7", {"precision": "fp32", "loss": "standard", **_SOFT}, kl_max=1e-7
                ),
                "a spike above the floor",
            ),
            Bad(
                _perturb(
                    _FIG7,
                    "fig7",
                    {"precision": "fp32/bf16", "loss": "standard", **_SOFT},
                    max_param_distance=0.0,
                ),
                "moved",
            ),
            Bad(
                _perturb(
                    _FIG7,
                    "fig7",
                    {"precision": "fp32/bf16", "loss": "standard", **_SOFT},
                    min_test_accuracy=1.0,
                ),
                "accuracy below the teacher's",
            ),
        ),
        Evidence("full"),
    ),
    "progress": Case(
        progress.claims,
        _full(_orthograd, good=True),
        (Bad(_full(_orthograd, good=False)),),
        Evidence("full"),
    ),
    "quant": Case(
        quant.claims,
        _quant_case(),
        (
            Bad(_quant_case(good=False)),
            Bad(_quant_case(vanilla=False)),
            Bad(_quant_edit("decoder", "clipped", avg_kurtosis=10.0), "kurtosis higher"),
            Bad(_quant_edit("decoder", "clipped", w8a8_perplexity=12.0), "W8A8 perplexity higher"),
            # Vanilla with outliers and a parking head, but the outliers off the delimiters in
            # one layer, and the parking head's delimiter values as large as the others'.
            Bad(_quant_edit("encoder", "vanilla", outlier_share_on_delimiters=[0.99, 0.4])),
            Bad(_quant_edit("encoder", "vanilla", parking_head_value_ratio=0.51)),
        ),
        Evidence("full"),
    ),
}
"""Every claims function of the report, in the report's order."""


def _rows(make: Callable, claims: Callable) -> list[Row]:
    with pytest.MonkeyPatch.context() as mp:
        return claims(make(mp))


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict]:
    """Each case's rows: good, each bad (with the `Bad` that made them), empty."""
    out = {}
    for name, case in CASES.items():
        out[name] = {
            "good": _rows(case.good, case.claims),
            "bad": [(bad, _rows(bad.make, case.claims)) for bad in case.bad],
            "empty": case.claims(case.empty) if case.empty is not None else [],
        }
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_claims_hold_on_fabricated_good_data(verdicts, name):
    good = verdicts[name]["good"]
    assert good and all(r.status == HOLDS for r in good), [
        (r.claim, r.status, r.ours, r.note) for r in good if r.status != HOLDS
    ]
    assert all(r.criteria and not r.failed for r in good)


@pytest.mark.parametrize("name", list(CASES))
def test_must_fail_cases_fail_on_the_criterion_they_target(verdicts, name):
    """A must-fail case names the one criterion it breaks: every row it speaks for that fails
    must fail on that criterion alone, so a row cannot pass this test by failing for another
    reason (all values wrong at once, a missing value read as a miss)."""
    wrong = [
        (bad.target, r.claim, r.failed)
        for bad, rows in verdicts[name]["bad"]
        for r in rows
        if bad.speaks_for(r) and r.status == FAILS and r.failed != (bad.target,)
    ]
    assert not wrong, wrong


@pytest.mark.parametrize("name", list(CASES))
def test_claims_fail_on_fabricated_bad_data(verdicts, name):
    failed = {
        r.claim
        for bad, rows in verdicts[name]["bad"]
        for r in rows
        if r.status == FAILS and r.failed == (bad.target,)
    }
    missing = [r.claim for r in verdicts[name]["good"] if r.claim not in failed]
    assert not missing, missing


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.empty is not None])
def test_claims_without_data_are_not_tested(verdicts, name):
    empty, good = verdicts[name]["empty"], verdicts[name]["good"]
    assert [r.claim for r in empty] == [r.claim for r in good]  # the same rows, never dropped
    assert {r.status for r in empty} == {NOT_TESTED} and all(r.note for r in empty)


def _without(make: Callable, kind: str, key: str) -> Callable:
    """`make`'s evidence with `key` gone from every run's summary (kind 'summary') or stored
    metrics (kind 'metrics')."""

    def case(mp):
        ev = make(mp)
        for runs in ev.recipes.values():
            for run in runs or []:
                if kind == "summary":
                    run.summary.pop(key, None)
                else:
                    run.__dict__["metrics"] = {k: v for k, v in run.metrics.items() if k != key}
        return ev

    return case


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.empty is not None])
def test_a_missing_measurement_is_not_tested_never_failed(name):
    """Every summary value and every metric column, taken away from every run in turn: the rows
    that read it become `not tested` (with a reason), the others keep their verdict; no row
    fails and none raises."""
    case = CASES[name]
    with pytest.MonkeyPatch.context() as mp:
        ev = case.good(mp)
        keys = {
            (kind, key)
            for runs in ev.recipes.values()
            for run in runs or []
            for kind, names in (("summary", run.summary), ("metrics", run.metrics))
            for key in names
        }
    good = {r.claim: r.status for r in _rows(case.good, case.claims)}
    for kind, key in sorted(keys):
        rows = _rows(_without(case.good, kind, key), case.claims)
        moved = [
            (r.claim, r.status)
            for r in rows
            if r.status != good[r.claim] and not (r.status == NOT_TESTED and r.note)
        ]
        assert not moved, (kind, key, moved)


@pytest.fixture(scope="module")
def emitted() -> list[Row]:
    """Every row the report emits without runs (the analytic ones measured on this machine)."""
    return [r for _, _, rows in report.evaluate(Evidence("quick")) for r in rows]


def test_every_row_can_hold_and_fail(verdicts, emitted):
    """Enumerate every row the report can emit (its sections on empty evidence); each must
    hold in some case, fail in some case on each of its criteria alone, and, unless analytic,
    be `not tested` without data. A row (or a criterion) added without fabricated cases
    fails here."""
    emitted = {r.claim for r in emitted}
    held = {r.claim for v in verdicts.values() for r in v["good"] if r.status == HOLDS}
    criteria = {(r.claim, c) for v in verdicts.values() for r in v["good"] for c in r.criteria}
    failed_alone = {
        (r.claim, bad.target)
        for v in verdicts.values()
        for bad, rows in v["bad"]
        for r in rows
        if bad.speaks_for(r) and r.status == FAILS and r.failed == (bad.target,)
    }
    untested = {r.claim for v in verdicts.values() for r in v["empty"] if r.status == NOT_TESTED}
    analytic = {r.claim for n, c in CASES.items() if c.empty is None for r in verdicts[n]["good"]}
    problems = {
        "no must-hold case": sorted(emitted - held),
        "a criterion without a must-fail case of its own": sorted(criteria - failed_alone),
        "no no-data case": sorted(emitted - untested - analytic),
        "in no report section": sorted(held - emitted),
    }
    assert not any(problems.values()), {k: v for k, v in problems.items() if v}
    assert len(emitted) == sum(len(v["good"]) for v in verdicts.values())  # names are unique


# --- the real measurements behind the analytic rows ---------------------------------------------

# The rows whose verdict needs XLA to target fused multiply-add (`runtime.has_fma`): without
# it (measured at --xla_cpu_max_isa=SSE4_2 and AVX) the standard soft-target CE's two
# softmaxes round alike, and these two rows fail; each then says so in its note.
NEEDS_FMA = {
    "standard soft-target CE's error plateaus at a non-zero floor (fp64)",
    "Sec. 3 worked example, standard (grad, fp32)",
}

# Measured, and failing by the paper's rounding: the fp32 fixed target gradient and standard
# CE's non-target gradients are 0 from m = 87.33655 (e^-m leaves fp32's normal range; XLA's
# CPU flushes subnormals), which rounds to 87, not the paper's 88; the squared batch-mean
# gradient is 0 from m = 37.49 (63 ln 2 - ln 480), which rounds to 37, not 38.
FAILS_BY_ROUNDING = {
    "fp32: fixed CE's target gradient underflows only at m ~ 88": "87.33655",
    "fp32: standard CE's non-target gradients stay positive to m ~ 88": "87.33655",
    "fp32: squared gradients underflow near m ~ 38 (why LaProp tracks sqrt(v))": "37.494488",
}


# Measured, and failing as the paper states it (issue 43: 'test the claim as stated'): the
# standard loss (log-sum-exp minus the target logit) is exactly 0 from well below c_d (bf16
# 4.0, fp32 14.44, fp64 33.24 natively), so its first zero misses the cliff's tolerance.
FAILS_AS_STATED = {
    f"standard CE's loss rounds to 0 at the cliff ({name})" for name in ("bf16", "fp32", "fp64")
}


def test_analytic_claims_on_this_machine(verdicts, emitted):
    """Without runs the report measures only the analytic claims (Figs. 1 and 3, Sec. 5's
    squared gradient; not the speed rows, which read the benchmark's output): their real
    verdicts on this machine."""
    tested = [r for r in emitted if r.status != NOT_TESTED]
    analytic = {r.claim for n, c in CASES.items() if c.empty is None for r in verdicts[n]["good"]}
    speed = {r.claim for r in fig1._slowdown_rows(None)}
    assert {r.claim for r in tested} == analytic - speed
    if not runtime.has_fma():
        assert all("without fused multiply-add" in r.note for r in tested if r.claim in NEEDS_FMA)
        tested = [r for r in tested if r.claim not in NEEDS_FMA]
    for r in tested:
        if r.claim in FAILS_AS_STATED:
            assert r.status == FAILS and r.failed == (fig1.IN_TOLERANCE,), (r.claim, r.ours)
        elif r.claim in FAILS_BY_ROUNDING:
            assert r.status == FAILS and FAILS_BY_ROUNDING[r.claim] in r.ours, (r.claim, r.ours)
        else:
            assert r.status == HOLDS, (r.claim, r.ours)


def test_cliff_row_evaluates_both_sides_of_the_cliff():
    cliff = paper.CLIFFS["fp32"]
    first = float(np.float32(16.635532))

    def step(m):  # 0 from c32 on, as standard CE's target gradient in fp32
        return np.where(np.asarray(m) >= first, 0.0, 1.0)

    assert fig1.cliff_row("c", cliff, np.float32, first, "g", step).status == HOLDS
    # Where the function is 0 below the claimed first zero too, the interval is not the
    # cliff's, whatever the number says.
    assert fig1.cliff_row("c", cliff, np.float32, 16.64, "g", step).status == FAILS
    assert fig1.cliff_row("c", cliff, np.float32, 9.0, "g", lambda m: 0 * m).status == FAILS


def test_slowdown_rows_read_both_modes():
    bench = _bench(1.0)
    # docs/studies/cross-entropy-speed.md's gradient-only ratio:
    bench["float32"]["fixed soft CE (grad)"] = 1.205
    rows = {r.claim: r.status for r in fig1._slowdown_rows(bench)}
    soft = "fixed soft CE runs without meaningful slowdown against standard soft CE"
    assert rows[f"{soft} (float32, grad)"] == FAILS
    assert rows[f"{soft} (float32, value_and_grad)"] == HOLDS
    assert {r.status for r in fig1._slowdown_rows(None)} == {NOT_TESTED}


def test_paper_number_rules():
    order = paper.RESIDUAL["fp32"]  # ~1e-8: the nearest power of ten is 10^-8
    assert order.holds(3e-8) and order.holds(4e-9) and not order.holds(2.3e-9)
    assert not order.holds(3.3e-7)
    quoted = paper.CLIFFS["fp32"]  # 16.6: ours must round to it
    assert quoted.holds(16.64) and not quoted.holds(16.66)
    digits = paper.Number(value=-4.596e-8, stated="", where="", rule="digits", tol=4)
    assert digits.holds(-4.5961e-8) and not digits.holds(-4.597e-8)
    above = paper.DELIMITER_SHARE  # '>97 %': a bound, not a value
    assert above.holds(0.971) and not above.holds(0.97) and not above.holds(0.5)
    small = paper.DELIMITER_VALUES  # 'small' read as at most 0.5
    assert small.holds(0.5) and small.holds(0.02) and not small.holds(0.501)
    assert small.tolerance.startswith("at most 0.5")


# --- the rows' pieces --------------------------------------------------------------------------


def test_spikes_row_bounds_every_seed():
    runs = [_run(spikes=n, seed=s) for s, n in enumerate((0, 2, 5))]
    row = spikes_row(claim="c", source="s", paper="p", groups={"": (runs, 0, 5)}, why="w")
    assert row.status == HOLDS and "[0, 2, 5]" in row.ours
    for least, most in ((1, None), (0, 4), (0, 0)):
        groups = {"": (runs, least, most)}
        assert spikes_row(claim="c", source="s", paper="p", groups=groups, why="w").status == FAILS
    two = {"a": (runs, 0, None), "b": ([], 0, 0)}
    assert spikes_row(claim="c", source="s", paper="p", groups=two, why="w").status == NOT_TESTED


def test_grok_rate_interval_is_the_exact_binomial_one():
    low, high = grok_rate(5, 5, 0.95)  # 0.025 ** (1/5): the paper's own 5 of 5
    assert high == 1.0 and abs(low - 0.025 ** (1 / 5)) < 1e-9
    low, high = grok_rate(19, 20, 0.95)  # one miss in 20 puts a rate of 1 outside
    assert high < 1.0 and abs(high - 0.975 ** (1 / 20)) < 1e-9


def test_grok_rate_needs_every_seed_stored():
    runs = _fig2(True)
    runs["fig2-top-seeds"] = runs["fig2-top-seeds"][:19]
    row = fig2._grok_rate_row(Evidence("full", runs))
    assert row.status == NOT_TESTED and "19 runs" in row.note


def test_fig6_spikes_only_once_c32_is_reached():
    runs = _fig6(True)
    for group in runs.values():
        for r in group:
            r.__dict__["metrics"] = {"step": np.arange(2), "margin_mean": np.full(2, 16.0)}
    rows = [r for r in fig6.claims(Evidence("quick", runs)) if "spikes" in r.claim]
    assert len(rows) == 4 and all("premise not met" in r.note for r in rows)
    assert all("added after" in r.note for r in rows)  # a premise kept, and why


def test_quant_missing_variant_is_a_not_tested_row():
    good = quant.claims(Evidence("quick", quant=_quant()))
    table = _quant()
    table["rows"] = [r for r in table["rows"] if r["variant"] != "gated_mlp"]
    rows = quant.claims(Evidence("quick", quant=table))
    assert [r.claim for r in rows] == [r.claim for r in good]
    assert all(r.status == NOT_TESTED for r in rows if "(MLP)" in r.claim)
    assert all("full build" in r.note for r in good if r.status == NOT_TESTED)  # the sweeps


def _recipe_rows(rows):
    """The rows read on the recipe's table (not the full build's constant-lr table)."""
    return [r for r in rows if not r.claim.endswith(quant.CONSTANT_LR_SUFFIX)]


def test_quant_premises():
    # Where vanilla does not lose at W8A8, "close to FP" is not tested; the OPT clipped row
    # is the paper's claim and has no premise.
    table = _quant()
    for r in table["rows"]:
        r["w8a8_perplexity"] = r["fp_perplexity"]
    rows = _recipe_rows(quant.claims(Evidence("quick", quant=table)))
    close = [r for r in rows if "close to FP" in r.claim]
    assert close and all(r.status == NOT_TESTED and "premise" in r.note for r in close)
    opt = next(r for r in rows if r.claim.startswith("decoder: clipped softmax fails"))
    assert opt.status == FAILS  # kurtosis up but W8A8 not worse: the paper's row fails
    # Where vanilla has no outliers, "cuts the outliers" is not tested, and says the premise
    # came after the result.
    for r in table["rows"]:
        r["max_inf_norm"] = 3.0
    rows = _recipe_rows(quant.claims(Evidence("quick", quant=table)))
    cuts = [r for r in rows if " cuts the " in r.claim]
    assert cuts and all(r.status == NOT_TESTED and "premise" in r.note for r in cuts)
    assert all("added after" in r.note for r in cuts)
    # A head that does not park leaves its values' size untested.
    for r in table["rows"]:
        r["max_head_delimiter_attention"] = 0.5
    rows = _recipe_rows(quant.claims(Evidence("quick", quant=table)))
    small = next(r for r in rows if "carry small values" in r.claim)
    assert small.status == NOT_TESTED and "no vanilla head parks" in small.note
    for r in table["rows"]:
        del r["parking_head_value_ratio"]
    rows = _recipe_rows(quant.claims(Evidence("quick", quant=table)))
    small = next(r for r in rows if "carry small values" in r.claim)
    assert small.status == NOT_TESTED and "QUANT_EVAL_VERSION 2" in small.note


def test_quant_ablations_need_outliers_except_the_fp_rows():
    ablations = _ablations(vanilla_inf=5.0)  # no outliers at the sweep's scale
    rows = quant.claims(Evidence("full", quant={**_quant(), "ablations": ablations}))
    by = {r.claim: r for r in rows[-len(quant.ABLATION_CLAIMS) :]}
    for a in quant.ABLATION_CLAIMS:
        row = by[a.claim]
        if a.outliers:
            assert row.status == NOT_TESTED and "premise not met" in row.note, a.claim
        else:
            assert row.status == HOLDS, a.claim


def test_quant_ablation_without_its_point_is_not_tested():
    ablations = _ablations()
    ablations["pi_init"]["rows"] = [
        r for r in ablations["pi_init"]["rows"] if r["sweep"]["pi_init"] != 0.12
    ]
    rows = quant.claims(Evidence("full", quant={**_quant(), "ablations": ablations}))
    low = next(r for r in rows if "pi_init 0.12" in r.claim)
    assert low.status == NOT_TESTED and "lacks a pi_init = 0.12 point" in low.note


def test_full_build_report_reads_the_ablation_sweeps(tmp_path):
    (tmp_path / "quant_table.json").write_text(json.dumps({**_quant(), "quick": False}))
    (tmp_path / quant.ABLATIONS_FILE).write_text(json.dumps(_ablations()))
    full = Context(quick=False, out=tmp_path, store=Store(tmp_path / "store"), progress=False)
    n = len(quant.ABLATION_CLAIMS)
    rows = quant.claims(report.evidence(full))[-n:]
    assert [r.status for r in rows] == [HOLDS] * n
    quick = Context(quick=True, out=tmp_path, store=Store(tmp_path / "store"), progress=False)
    assert report.evidence(quick).quant is None  # a full table is not the quick build's


def test_full_build_report_reads_the_constant_lr_table(tmp_path):
    """Table 2's encoder rows again on quant_constant_lr.json, named as such; without the
    file they are not tested and say the full build makes it; a vanilla without outliers
    there is its own premise, not the recipe table's."""
    (tmp_path / "quant_table.json").write_text(json.dumps({**_quant(), "quick": False}))
    full = Context(quick=False, out=tmp_path, store=Store(tmp_path / "store"), progress=False)

    def constant_rows():
        return [
            r
            for r in quant.claims(report.evidence(full))
            if r.claim.endswith(quant.CONSTANT_LR_SUFFIX)
        ]

    missing = constant_rows()
    assert len(missing) == 10  # 2 vanilla rows + 2 fixes x 4, the encoder's only
    assert all(r.claim.startswith("encoder: ") for r in missing)
    assert all(r.status == NOT_TESTED and "full build runs it" in r.note for r in missing)
    (tmp_path / quant.CONSTANT_LR_FILE).write_text(json.dumps({**_quant(), "quick": False}))
    assert [r.status for r in constant_rows()] == [HOLDS] * 10
    weak = _quant()
    for r in weak["rows"]:
        r["max_inf_norm"] = 3.0
    (tmp_path / quant.CONSTANT_LR_FILE).write_text(json.dumps({**weak, "quick": False}))
    rows = {r.claim: r for r in constant_rows()}
    assert (
        rows[
            "encoder: vanilla attention develops activation outliers" + quant.CONSTANT_LR_SUFFIX
        ].status
        == FAILS
    )
    recipe = {r.claim: r for r in quant.claims(report.evidence(full))}
    assert recipe["encoder: vanilla attention develops activation outliers"].status == HOLDS


# --- the claims on real (shrunken) runs ----------------------------------------------------------


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_fig7_typical_residual_on_a_real_shrunken_distillation(tmp_path):
    # The distillation path (teacher, then students) shrunk; bf16 compute only.
    overrides = {
        "p": (7,),
        "d_model": (8,),
        "n_heads": (2,),
        "steps": (10,),
        "teacher_steps": (50,),
        "precision": ("fp32/bf16",),
    }
    ctx = Context(
        quick=True,
        out=tmp_path,
        store=Store(tmp_path / "store"),
        progress=False,
        overrides=overrides,
    )
    build.train(ctx, ["fig7"])  # the build trains; the figure only draws
    assert all(p.stat().st_size > 1000 for p in registry.builds()["fig7"](ctx))
    runs = ctx.stored("fig7")
    rows = fig7.claims(Evidence("quick", {"fig7": runs}, store=ctx.store))
    fixed = next(
        r for r in rows if r.claim.startswith("fixed soft-target CE") and "bf16" in r.claim
    )
    assert fixed.status == HOLDS  # bf16: the fixed student stays bit-identical, KL 0
    # The residual row reads the stored teacher: its verdict is the paper's rule on the value
    # measured here, which is a finite, non-negative number printed in the row.
    std = next(r for r in runs if r.config.loss == "standard")
    typical = fig7.typical_residual(std, ctx.store)
    assert typical is not None and np.isfinite(typical) and typical >= 0
    residual = next(r for r in rows if "residual gradient" in r.claim and "bf16" in r.claim)
    want = HOLDS if paper.RESIDUAL["fp32/bf16"].holds(typical) else FAILS
    assert residual.status == want and f"{typical:.2g}" in residual.ours
    # KL as the loss: the fixed KL student trained here stays exactly too.
    kl_fixed = next(r for r in rows if r.claim.startswith("KL(p || q) as the loss, fixed"))
    assert kl_fixed.status == NOT_TESTED  # only the bf16 column was trained here
    kl_runs = [r for r in runs if r.config.distill_objective == "kl"]
    assert len(kl_runs) == 1 and all(fig7._stays(kl_runs[0].summary).values())
    assert any(r.status == NOT_TESTED and "full-scale" in r.note for r in rows)
    # The stored per-step columns of both fixed students: never a nonzero KL, distance,
    # logit gradient or Adam step (tests/grokbench/test_distill.py, -m slow, runs the same
    # recipe through `grokbench run fig7` and checks its table and reload too).
    for run in runs:
        if run.config.loss == "fixed":
            m = load_metrics(ctx.store.run_dir(run.config))
            for name in ("kl", "test_kl", "logit_grad_max", "param_distance", "adam_step"):
                assert not np.any(m[name]), (run.config.distill_objective, name)


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_quant_claims_on_a_tiny_lab(tmp_path, monkeypatch):
    from grokbench.quant import table as quant_lab
    from grokbench.quant.recipes import QUANT

    tiny = {
        "n_layers": 1,
        "d_model": 16,
        "n_heads": 2,
        "seq_len": 16,
        "batch_size": 8,
        "steps": 3,
        "eval_batches": 1,
        "calib_batches": 2,
        "calib_subsets": 2,
        "bits": "W8A8",  # the quick recipe's width; the claims of the others say "no column"
    }
    real, recipe = quant_lab.quant_configs, dataclasses.replace(QUANT, quick=tiny)
    # The encoder only, at tests/grokbench/test_quant.py's TINY sizes: the two tests then
    # share their compiled programs; the decoder's training path is test_quant.py's.
    picked = {"families": ("encoder",), "variants": ("vanilla", "clipped")}
    monkeypatch.setattr(quant_lab, "quant_configs", lambda quick, *_: real(quick, picked, recipe))
    ctx = Context(quick=True, out=tmp_path, store=Store(tmp_path / "store"), progress=False)
    build.train(ctx, ["quant"])  # the build runs the lab; the figure only draws
    files = registry.builds()["quant"](ctx)
    assert {"quant_table.json", "quant_table.md"} <= {p.name for p in files}
    assert all(p.name.startswith("quant") and p.stat().st_size > 100 for p in files)
    ev = report.evidence(ctx)
    rows = quant.claims(ev)
    van = next(r for r in ev.quant["rows"] if r["variant"] == "vanilla")
    loses = van["w8a8_perplexity"] / van["fp_perplexity"] - 1 >= paper.VANILLA_LOSS
    vanilla = next(
        r for r in rows if r.claim == "encoder: vanilla W8A8 loses against floating point"
    )
    assert vanilla.status == (HOLDS if loses else FAILS)  # the rule on the measured table
    head = next(r for r in rows if "parks its attention" in r.claim)
    parks = paper.DELIMITER_HEAD.holds(van["max_head_delimiter_attention"])
    assert head.status == (HOLDS if parks else FAILS)
    missing = [r for r in rows if "(MLP)" in r.claim or r.claim.startswith("decoder")]
    assert missing and all(r.status == NOT_TESTED for r in missing)  # listed, not dropped


def test_quick_scale_decides_event_rows_and_labels_them():
    """Rows about an event a short run shows whole are decided from quick runs, with the
    scale in their note; the rows about where a run ends stay full-scale only."""
    quick = Evidence("quick", _fig2(True))
    rows = {r.claim: r for r in fig2.claims(quick)}
    bottom = "(a^2+b^2 mod 97, MLP, Adam, lambda 0, eps 1e-16)"
    for claim in (
        f"standard CE spikes once it hits c32 {bottom}",
        f"standard CE's mean train margin hits c32 {bottom}",
        f"standard CE test accuracy just before the spike {bottom}",
        "a^3+b mod 97, lambda 0: standard CE test accuracy, 60 % before the spike",
        "fixed CE: no loss spike after memorization (a+b mod 31, fp32, eps 1e-8)",
    ):
        assert rows[claim].status != NOT_TESTED, claim
        assert rows[claim].note.startswith("decided at quick scale"), claim
    for claim in (
        f"standard CE test accuracy after it (lowest) {bottom}",
        f"fixed CE goes on generalizing {bottom}",
        "a^3+b mod 97, lambda 0: standard CE test accuracy, drops to 21 %",
    ):
        assert rows[claim].status == NOT_TESTED and "full" in rows[claim].note, claim
    # The same rows at full scale carry no scale note.
    full = {r.claim: r for r in fig2.claims(Evidence("full", _fig2(True)))}
    assert not full[f"standard CE spikes once it hits c32 {bottom}"].note


def test_a_quick_run_not_there_yet_is_not_tested_never_failed():
    """fig2-bottom's crossing of c32 and fig4's overshoot, in a quick run that has not got
    there yet: not tested at quick scale (the full run may get there), failed at full."""
    for scale, status in (("quick", NOT_TESTED), ("full", FAILS)):
        runs = _fig2(True)
        for r in runs["fig2-bottom"]:
            n = r.metrics["step"].size
            r.__dict__["metrics"] = {**r.metrics, "margin_mean": np.full(n, 10.0)}
        hits = "mean train margin hits c32 (a^2"
        (row,) = [r for r in fig2.claims(Evidence(scale, runs)) if hits in r.claim]
        assert row.status == status, (scale, row)
        runs = {"fig4": [_fig4_run(1e-8, 0.0, np.linspace(0.0, 15.0, 300))]}
        (row,) = [
            r
            for r in fig4.claims(Evidence(scale, runs))
            if "overshoots" in r.claim and "1e-08" in r.claim
        ]
        assert row.status == status, (scale, row)
        if scale == "quick":
            assert "not past log(1/eps) yet" in row.note


def test_quick_scale_decides_crossings_and_reaching_100_percent():
    """Table 1's 'fixed CE crosses cN smoothly' and fig6's 'fp32 fixed CE reaches 100 %' are
    events a quick run shows whole: decided from quick runs once they happened (holds, or
    fails on a spike), not tested while a run without a spike is still below the cliff or
    below 100 %, and never from quick runs at full scale."""

    def crossing(scale, margin, spikes):
        runs = _table1(True)
        for r in runs["table1"]:
            r.summary.update(final_margin=margin, spikes=spikes)
        rows = table1.claims(Evidence(scale, runs))
        return {r.claim: r for r in rows if "crosses" in r.claim}

    bf16, fp32 = (
        f"eps 1e-8: fixed CE crosses {c} smoothly ({p})"
        for c, p in (("c16", "bf16"), ("c32", "fp32"))
    )
    rows = crossing("quick", 16.27, 0)  # past c16 = 5.55, not yet at c32 = 16.64
    assert rows[bf16].status == HOLDS and rows[bf16].note.startswith("decided at quick scale")
    assert rows[fp32].status == NOT_TESTED and "not past c32 yet" in rows[fp32].note
    rows = crossing("quick", 16.27, 1)  # a spike is an event too: it fails, at quick scale
    assert rows[bf16].status == rows[fp32].status == FAILS
    assert rows[fp32].note.startswith("decided at quick scale")
    rows = crossing("full", 16.27, 0)  # full scale: below the cliff fails, with no scale note
    assert rows[fp32].status == FAILS and not rows[fp32].note.startswith("decided")

    for accuracy, status in ((1.0, HOLDS), (0.45, NOT_TESTED)):
        runs = _fig6(True)
        for group in runs.values():
            for r in group:
                r.summary["test_accuracy"] = accuracy
        rows = [r for r in fig6.claims(Evidence("quick", runs)) if "reaches 100 %" in r.claim]
        assert len(rows) == 4 and all(r.status == status for r in rows), rows
        note = "decided at quick scale" if status == HOLDS else "not at 100 % yet at quick scale"
        assert all(r.note.startswith(note) for r in rows), rows
