"""The report's claims of Fig. 2 (the slingshot, top and bottom), Sec. 4's a^3+b mod 97 and
Sec. 5's eps >= 1e-7: read from the stored runs of fig2's recipes, eps-settle and
fig2-top-seeds.
"""

from __future__ import annotations

import math

import numpy as np

import numerics
from figures._common import select
from figures.registry import Claims
from figures.report import paper
from figures.report.claims import (
    Evidence,
    Row,
    claim_row,
    crossing,
    finite,
    grok_rate,
    mean_std,
    per_seed,
    pm,
    seeds,
    spikes_row,
)

__all__ = ["CLAIMS", "claims"]


_SPIKE_COLUMNS = ("train_ce", "train_acc", "margin_mean", "margin_median", "frac_past_cliff")


def _spikes(run):
    """The run's spikes (`grokbench.slingshot`); None when its metrics lack a column they
    need (not measured, so the rows reading them are not tested)."""
    from grokbench import slingshot

    if any(k not in run.metrics for k in _SPIKE_COLUMNS):
        return None
    return slingshot.describe_spikes(run.metrics)


def _top_rows(ev: Evidence) -> list[Row]:
    top, full = ev.runs("fig2-top"), ev.runs("fig2-top", full=True)
    fixed, std = select(top, loss="fixed"), select(top, loss="standard")
    f_full, s_full = select(full, loss="fixed"), select(full, loss="standard")
    where = f"{paper.FIX}, Fig. 2 top"
    return [
        spikes_row(
            claim="fixed CE: no loss spike after memorization (a+b mod 31, fp32, eps 1e-8)",
            source=where,
            paper="spikes disappear",
            groups={"": (fixed, 0, 0)},
            why=ev.why("fig2-top"),
            scale=ev.decided_at("fig2-top", fixed),
        ),
        spikes_row(
            claim="standard CE spikes after memorization (same runs)",
            source=where,
            paper="hits c32 and spikes",
            groups={"": (std, 1, None)},
            why=ev.why("fig2-top"),
            scale=ev.decided_at("fig2-top", std),
        ),
        *_top_full_rows(ev, f_full, s_full),
        _grok_rate_row(ev),
    ]


def _grok_rate_row(ev: Evidence) -> Row:
    """Fig. 2 top's 'groks on all 5 seeds' as a rate over `paper.GROK_RATE_SEEDS` seeds."""
    runs = select(ev.runs("fig2-top-seeds", full=True), loss="fixed")
    number, n = paper.GROK_RATE, paper.GROK_RATE_SEEDS
    # A stored grok_step of None is a measurement (never reached 99 % test); a summary without
    # the key has none, and the row is then not tested.
    measured = per_seed(runs, "test_accuracy") and all("grok_step" in r.summary for r in runs)
    grokked = [r.summary.get("grok_step") is not None for r in runs]
    k = sum(grokked)

    def ours() -> str:
        low, high = grok_rate(k, len(runs), paper.GROK_RATE_CONFIDENCE)
        p_low, p_high = grok_rate(paper.FIG2_TOP_SEEDS, paper.FIG2_TOP_SEEDS, 0.95)
        late = [r.config.seed for r, g in zip(runs, grokked, strict=True) if not g]
        return (
            f"{k} of {len(runs)} seeds reach >= 99 % test within {runs[0].config.steps} steps "
            f"(rate {k / len(runs):.2f}, {paper.GROK_RATE_CONFIDENCE:.0%} interval "
            f"[{low:.2f}, {high:.2f}]; the paper's 5 of 5: [{p_low:.2f}, {p_high:.2f}])"
            + (f"; not grokked: seeds {late}" if late else "")
        )

    return claim_row(
        claim=f"every seed groks: fixed CE on {n} seeds (a+b mod 31, fp32, eps 1e-8)",
        source=number.where,
        paper=number.stated,
        ours=ours,
        tolerance=number.tolerance,
        ok=None if not measured or len(runs) != n else number.holds(k / n),
        why=ev.why("fig2-top-seeds", full=True)
        if len(runs) in (0, n)
        else f"{len(runs)} runs in the store, not {n}"
        if len(runs) != n
        else "a run's summary has no test accuracy or grok step",
    )


def _grok_order(fixed, std) -> list[tuple[float, float]] | None:
    """(fixed, standard) grok steps per seed; a run that never grokked (a stored grok_step of
    None) counts as infinity. None when a seed lacks a run or a summary lacks the key."""
    if (
        not fixed
        or len(fixed) != len(std)
        or any("grok_step" not in r.summary for r in fixed + std)
    ):
        return None
    steps = {}
    for r in [*fixed, *std]:
        g = r.summary.get("grok_step")
        steps[(r.config.loss, r.config.seed)] = math.inf if g is None else float(g)
    return [(steps[("fixed", r.config.seed)], steps[("standard", r.config.seed)]) for r in fixed]


def _top_full_rows(ev: Evidence, fixed, std) -> list[Row]:
    why = ev.why("fig2-top", full=True)
    where = f"{paper.FIX}, Fig. 2 top"
    order = _grok_order(fixed, std)
    f_acc = mean_std(r.summary.get("test_accuracy") for r in fixed)
    s_acc = mean_std(r.summary.get("test_accuracy") for r in std)
    f_m = mean_std(r.summary.get("final_margin") for r in fixed)
    s_m = mean_std(r.summary.get("final_margin") for r in std)
    cliff = numerics.precision_cliff(np.float32)
    spiked = [_spikes(r) for r in std]
    launch = (
        [s.margin_before for spikes in spiked for s in spikes if finite(s.margin_before)]
        if std and None not in spiked
        else []
    )
    table = paper.TABLE1
    f_paper, s_paper = table[("fp32", "fixed")][1e-8], table[("fp32", "standard")][1e-8]
    f_tol = paper.accuracy_tolerance(f_paper[1], len(fixed))
    s_tol = paper.accuracy_tolerance(s_paper[1], len(std))
    return [
        spikes_row(
            claim="standard CE spikes repeatedly",
            source=where,
            paper="repeatedly drops and rebounds",
            groups={"": (std, paper.REPEATED_SPIKES, None)},
            why=why,
        ),
        claim_row(
            claim=f"fixed CE groks faster than standard CE on all {paper.FIG2_TOP_SEEDS} seeds",
            source=where,
            paper="groks faster on all 5 seeds",
            ours=lambda: (
                "grok step (first >= 99 % test) fixed vs standard per seed: "
                + ", ".join(f"{a:g} vs {b:g}" for a, b in order)
            ),
            tolerance=f"fixed earlier on every seed, {paper.FIG2_TOP_SEEDS} seeds",
            ok=None
            if order is None or len(order) != paper.FIG2_TOP_SEEDS
            else lambda: all(a < b for a, b in order),
            why=why
            if order is None
            else f"{len(order)} seeds in the store, the claim is about {paper.FIG2_TOP_SEEDS}",
        ),
        *(
            claim_row(
                claim=f"{loss} CE test accuracy (fp32, eps 1e-8)",
                source=f"{where}, Table 1",
                paper=f"{cell[0]:.1f} +- {cell[1]:.1f} %",
                ours=lambda acc=acc, group=group: f"{pm(acc, 100)} % ({seeds(group)})",
                tolerance=f"+-{tol:.2f} points (2 std errors of the difference)",
                ok=None if acc is None else abs(100 * acc[0] - cell[0]) <= tol,
                why=why,
            )
            for loss, cell, acc, group, tol in (
                ("fixed", f_paper, f_acc, fixed, f_tol),
                ("standard", s_paper, s_acc, std, s_tol),
            )
        ),
        claim_row(
            claim="fixed CE saturates near log(1/eps) (final margin, fp32, eps 1e-8)",
            source=paper.FIG2_FIXED_MARGIN.where,
            paper=paper.FIG2_FIXED_MARGIN.stated,
            ours=lambda: pm(f_m, digits=2),
            tolerance=paper.FIG2_FIXED_MARGIN.tolerance,
            ok=None if f_m is None else paper.FIG2_FIXED_MARGIN.holds(f_m[0]),
            why=why,
        ),
        claim_row(
            claim="standard CE ends below the cliff (fp32, eps 1e-8)",
            source=f"{where}, Table 1",
            paper=f"final margin {s_paper[2]} (< c32)",
            ours=lambda: pm(s_m, digits=2),
            # Strictly below: c32 + MARGIN_TOL (17.1) admitted fixed CE's plateau (17.1).
            tolerance=f"mean < c32 = {cliff:.2f} (a run that crossed the cliff fails)",
            ok=None if s_m is None else s_m[0] < cliff,
            why=why,
        ),
        claim_row(
            claim="standard CE's spikes launch from margins at c32",
            source=paper.FIG2_LAUNCH.where,
            paper=paper.FIG2_LAUNCH.stated,
            ours=lambda: (
                f"median margin before a spike {float(np.median(launch)):.2f} "
                f"({len(launch)} spikes)"
            ),
            tolerance=paper.FIG2_LAUNCH.tolerance,
            ok=None if not launch else paper.FIG2_LAUNCH.holds(float(np.median(launch))),
            why=why
            if not std
            else "a run without the stored metrics spikes are read from"
            if None in spiked
            else "no spikes to measure",
        ),
    ]


def _collapse(run) -> dict | None:
    """The first spike of a fig2-bottom run: its launch margin, test accuracy at the last
    evaluation before it and the lowest after it."""
    if any(k not in run.metrics for k in ("test_acc", "test_step")):
        return None  # not measured: the row is not tested, never failed
    spikes = _spikes(run)
    if not spikes:
        return None
    first = spikes[0]
    m = run.metrics
    before = m["test_acc"][m["test_step"] <= first.launch_step]
    after = m["test_acc"][m["test_step"] > first.step]
    if not before.size or not after.size:
        return None
    return {
        "margin": first.margin_before,
        "before": 100 * float(before[-1]),
        "after": 100 * float(after.min()),
    }


def _mean(drops: list[dict], key: str) -> float:
    """The mean of `key` over `_collapse`'s records."""
    return float(np.mean([d[key] for d in drops]))


def _bottom_rows(ev: Evidence) -> list[Row]:
    runs = ev.runs("fig2-bottom", full=True)
    why = ev.why("fig2-bottom", full=True)
    std, fixed = select(runs, loss="standard"), select(runs, loss="fixed")
    drops = [_collapse(r) for r in std]
    seen = std and all(d is not None for d in drops)
    # The first spike's launch and the first crossing of c32 are events a quick run (the
    # first 1,500 of the full run's 2,000 steps, one seed) shows whole: decided at any scale.
    early = select(ev.runs("fig2-bottom"), loss="standard")
    early_why, scale = ev.why("fig2-bottom"), ev.decided_at("fig2-bottom", early)
    launches = [_collapse(r) for r in early]
    launched = early and all(d is not None for d in launches)
    nospike = "a standard run without a spike (or without stored metrics or evaluations around it)"
    f_acc = mean_std(r.summary.get("test_accuracy") for r in fixed)

    setting = "(a^2+b^2 mod 97, MLP, Adam, lambda 0, eps 1e-16)"
    rows = [
        claim_row(
            claim=f"standard CE spikes once it hits c32 {setting}",
            source=paper.FIG2_LAUNCH.where.replace("top, Sec. 4", "bottom"),
            paper=paper.FIG2_LAUNCH.stated,
            ours=lambda: (
                f"first spike launches at mean margin {_mean(launches, 'margin'):.2f} "
                f"({seeds(early)})"
            ),
            tolerance=paper.FIG2_LAUNCH.tolerance,
            ok=None if not launched else paper.FIG2_LAUNCH.holds(_mean(launches, "margin")),
            why=early_why if not early else nospike,
            scale=scale,
        )
    ]
    # The paper's step is where m hits c32 ("hitting c32 around step 1250"), not the spike:
    # the first step at which the mean training margin reaches c32, per standard run.
    cliff = numerics.precision_cliff(np.float32)
    hits = [crossing(r, cliff) for r in early]
    rows.append(
        claim_row(
            claim=f"standard CE's mean train margin hits c32 {setting}",
            source=paper.FIG2_BOTTOM_STEP.where,
            paper=paper.FIG2_BOTTOM_STEP.stated,
            ours=lambda: (
                f"first step with mean margin >= c32 = {cliff:.2f}: mean "
                f"{float(np.mean(hits)):.1f} (per seed {[f'{h:g}' for h in hits]}; "
                f"{seeds(early)})"
            ),
            tolerance=paper.FIG2_BOTTOM_STEP.tolerance,
            # A quick run that has not crossed yet says nothing of the full run's step.
            ok=None
            if not early or None in hits or (scale and math.inf in hits)
            else paper.FIG2_BOTTOM_STEP.holds(float(np.mean(hits))),
            why=early_why
            if not early
            else "a standard run without a stored mean margin"
            if None in hits
            else f"a quick run that has not reached c32 yet ({seeds(early)}); "
            "`grokbench figures fig2 --full` runs the paper's scale",
            scale=scale,
        )
    )
    # The accuracy just before the first spike is read at that event (decided at any scale);
    # the lowest after it depends on where the run ends (the full recipe's).
    for number, key, what, (group, found, ok_seen, no_why, note) in (
        (
            paper.FIG2_BOTTOM_BEFORE,
            "before",
            "standard CE test accuracy just before the spike",
            (early, launches, launched, early_why, scale),
        ),
        (
            paper.FIG2_BOTTOM_AFTER,
            "after",
            "standard CE test accuracy after it (lowest)",
            (std, drops, seen, why, ""),
        ),
    ):
        rows.append(
            claim_row(
                claim=f"{what} {setting}",
                source=number.where,
                paper=number.stated,
                ours=lambda key=key, found=found, group=group: (
                    f"{_mean(found, key):.1f} (mean of {len(found)} seeds; {seeds(group)})"
                ),
                tolerance=number.tolerance,
                ok=None if not ok_seen else number.holds(_mean(found, key)),
                why=no_why if not group else nospike,
                scale=note,
            )
        )
    rows.append(
        claim_row(
            claim=f"fixed CE goes on generalizing {setting}",
            source=paper.FIG2_BOTTOM_FIXED.where,
            paper=paper.FIG2_BOTTOM_FIXED.stated,
            ours=lambda: f"final test {pm(f_acc, 100)} % ({seeds(fixed)})",
            tolerance=paper.FIG2_BOTTOM_FIXED.tolerance,
            ok=None if f_acc is None else paper.FIG2_BOTTOM_FIXED.holds(100 * f_acc[0]),
            why=why,
        )
    )
    for number, key, full in (
        (paper.CUBE_BEFORE, "before", False),
        (paper.CUBE_AFTER, "after", True),
    ):
        cube = select(ev.runs("fig2-bottom-cube", full=full), loss="standard")
        cube_drops = [_collapse(r) for r in cube]
        cube_seen = cube and all(d is not None for d in cube_drops)
        rows.append(
            claim_row(
                claim=f"a^3+b mod 97, lambda 0: standard CE test accuracy, {number.stated}",
                source=number.where,
                paper=number.stated,
                ours=lambda key=key, cube=cube, cube_drops=cube_drops: (
                    f"{_mean(cube_drops, key):.1f} (mean of {len(cube_drops)} seeds; {seeds(cube)})"
                ),
                tolerance=number.tolerance,
                ok=None if not cube_seen else number.holds(_mean(cube_drops, key)),
                why=ev.why("fig2-bottom-cube", full=full) if not cube else nospike,
                scale="" if full else ev.decided_at("fig2-bottom-cube", cube),
            )
        )
    return rows


def _settles_row(ev: Evidence) -> Row:
    """Sec. 5: for eps >= 1e-7 the equilibrium log(1/eps) <= 16.1 sits below c32, so standard
    CE never reaches the cliff and never spikes (the eps-settle recipe, full scale)."""
    runs = ev.runs("eps-settle", full=True)
    eps_values = sorted({r.config.eps for r in runs}) or [1e-7, 1e-6]
    return spikes_row(
        claim="eps >= 1e-7: log(1/eps) <= 16.1 < c32, so standard CE settles without spiking",
        source=f"{paper.FIX}, Sec. 5",
        paper="standard CE settles without spiking",
        groups={f"eps {eps:g}": (select(runs, eps=eps), 0, 0) for eps in eps_values},
        why=ev.why("eps-settle", full=True),
    )


def claims(evidence: Evidence) -> list[Row]:
    """Fig. 2 top and bottom, and Sec. 5's eps >= 1e-7 claim."""
    return _top_rows(evidence) + _bottom_rows(evidence) + [_settles_row(evidence)]


CLAIMS = Claims(figure="fig2", claims=claims, reads=("eps-settle", "fig2-top-seeds"))
