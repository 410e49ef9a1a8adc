"""Margin equilibria (paper section 5, Figure 4): where the training margin levels off.

With weight decay lambda > 0, Adam-family optimizers stop growing the margin where the
normalized step g / (|g| + eps) ~ e^-m / eps balances lambda theta: m*(eps) = log(1/eps)
(`numerics.equilibrium_margin`). With eps = 0 nothing balances the step until the
gradients underflow: the per-example logit gradient of the mean loss is e^-m / N, which
flushes to zero (XLA's CPU kernels flush subnormals) once m > -log(tiny) - log(N): 81.2
for fp32 at N = 480 training examples (`underflow_margin`; the paper measures 81.2).

The plateau rule (`_plateau`), on a run's per-step mean training margin (`_MARGIN_METRIC`):

1. The tail is the last _PLATEAU_TAIL of the steps (at least _PLATEAU_MIN_STEPS; the whole
   curve if it is shorter).
2. A least-squares line through the tail gives the margin's trend. The run has plateaued
   if the trend is at most _PLATEAU_DRIFT nats per 1,000 steps, up or down (on fig4 the
   margin climbs at ~10 nats per 1,000 steps before it levels off) and the tail is finite.
3. The plateau value is the mean of the tail; the plateau is reached at the first step
   from which the margin stays within _PLATEAU_BAND nats of that value to the end.

A run that has not plateaued (still climbing, or a curve that turned non-finite) is
summarized by its peak: the largest finite margin and the step it was reached
(`_Plateau.stop`, `stop_step`). Fig4's eps = 0 runs peak at the underflow. Before
CONFIG_VERSION 2 they then broke: with LaProp tracking r = sqrt(v) in fp32, a gradient entry
g in [tiny, tiny / sqrt(1 - b2)) flushes sqrt(1 - b2) |g|, and so r, to zero while g itself
is not, and g / (r + 0) was inf. LaProp now clips g / r to its exact bound
(`grokbench.optimizers._scale_by_laprop`); a run that still turns non-finite is `diverged`.

The update balance (`balance_terms`, `balance_margin`): why the plateaus sit below
log(1/eps) by an offset that shrinks as eps falls. Write the fixed CE of one example as
l_n = log(1 + e^-m_n) (exact: m_n = z_t - LSE_{j != t} z_j), so the mean loss over N
training examples has gradient g = -(1/N) sum_n sigma(-m_n) grad m_n. At a stationary
point of the decoupled update theta <- theta - lr (u + lambda theta), with Adam's (and
LaProp's) normalised step u_i = g_i / (|g_i| + eps), every parameter has u_i = -lambda
theta_i, so g_i = -eps lambda theta_i / (1 - lambda |theta_i|). Project both sides on
theta (the radial direction; the per-parameter equations cannot all be checked from the
margin alone, their sum along theta can):

    (1/N) sum_n sigma(-m_n) D_n = eps lambda S,   D_n = theta . grad m_n,
    S = sum_i theta_i^2 / (1 - lambda |theta_i|).

The 1/N of the mean loss cancels against the sum over the N examples, and D_n, the
margin's radial derivative d m_n(c theta) / dc at c = 1, is the parameter norm's share:
for a model homogeneous of degree L in theta it is L (z_t - z_bar), z_bar the
softmax-weighted non-target logit, so D grows with the margin. With sigma(-m) ~ e^-m
and every margin at the mean m (and D_n at their mean D):

    m = log(1/eps) + log(D / (lambda S)).

The paper's log(1/eps) drops the second term. On fig4 (lambda 1) D / m is 6-8 and S is
500-950 (eps 1e-4 ... 1e-24): D / (lambda S) < 1, so the plateau sits below log(1/eps), by
less as eps falls (D grows with m faster than S grows). `balance_terms`
(`grokbench.balance`) computes D (a jvp along theta over the training set) and S from a
run's final parameters; runs trained by `grokbench.experiment` store them in their
summary (`radial_margin_slope`, `balance_norm`) when lambda > 0 and eps > 0. The group
rows carry the second prediction `predicted_balance` beside log(1/eps);
docs/equilibrium.md compares the two.

Groups (`group_rows`) are the runs with equal config except the seed (in a fig4 sweep:
one per eps and weight decay). Their measured value is the mean (and sample std) of the
plateau values of the runs that plateaued, or else of every run's peak (`measured_from`
says which). A group agrees with the prediction if it plateaued within _AGREEMENT nats of
log(1/eps). eps = 0 groups have no prediction (None); they are flagged
`grows_to_underflow` and report where their runs stop (`stop_margin`, `stop_step`:
the plateau, or else the peak) and the fraction that then diverged.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import numerics
from grokbench.balance import balance_margin
from grokbench.config import RunConfig, from_stored
from grokbench.precision import get_precision
from grokbench.store import atomic_write_json, load_metrics
from grokbench.sweep import dir_runs
from grokbench.tables import align, finite_or_none, fmt, varying_keys

__all__ = [
    "OUTPUT_FILE",
    "analyze_dir",
    "format_table",
    "group_rows",
    "run_rows",
    "underflow_margin",
]

_MARGIN_METRIC = "margin_mean"
"""The curve judged: the mean logit margin over the training set, at every step."""

_PLATEAU_TAIL = 0.2
"""The fraction of the run, at its end, that the rule looks at."""

_PLATEAU_MIN_STEPS = 100
"""...but at least this many steps."""

_PLATEAU_DRIFT = 0.5
"""Largest trend over the tail (nats per 1,000 steps, up or down): 20x below the climb."""

_PLATEAU_BAND = 0.5
"""The plateau is reached once the margin stays within this many nats of its value."""

_AGREEMENT = 1.0
"""A measured equilibrium within this many nats of log(1/eps) agrees with the prediction."""

OUTPUT_FILE = "equilibrium.json"
"""The analyzer's output file (in `grokbench equilibrium --out`): one row per group."""


@dataclasses.dataclass(frozen=True)
class _Plateau:
    """The rule's verdict on one margin curve."""

    plateaued: bool
    value: float  # mean of the tail (the plateau value when plateaued)
    step: int | None  # first step from which the margin stays within _PLATEAU_BAND of value
    drift: float  # trend over the tail, nats per 1,000 steps
    final: float  # the last margin
    peak: float  # the largest finite margin of the run
    diverged: bool  # the curve turned non-finite
    stop: float  # the plateau value; else the peak
    stop_step: int | None  # the plateau step; else the step of the peak


def _plateau(
    margin: np.ndarray,
    tail: float = _PLATEAU_TAIL,
    min_steps: int = _PLATEAU_MIN_STEPS,
    drift: float = _PLATEAU_DRIFT,
    band: float = _PLATEAU_BAND,
) -> _Plateau:
    """Apply the module's plateau rule to a per-step margin curve."""
    m = np.asarray(margin, dtype=np.float64)
    if m.size == 0:
        raise ValueError("an empty margin curve")
    n_tail = min(m.size, max(min_steps, math.ceil(tail * m.size)))
    y = m[-n_tail:]
    finite = bool(np.isfinite(y).all())
    if finite and n_tail > 1:
        trend = 1000.0 * float(np.polyfit(np.arange(n_tail, dtype=np.float64), y, 1)[0])
    else:
        trend = 0.0 if finite else math.nan
    value = float(y.mean())
    ok = finite and abs(trend) <= drift
    step = None
    if ok:
        outside = np.flatnonzero(~(np.abs(m - value) <= band))  # NaN counts as outside
        step = int(outside[-1] + 1) if outside.size else 0
    finite_m = np.isfinite(m)
    peak_step = int(np.argmax(np.where(finite_m, m, -np.inf))) if finite_m.any() else None
    peak = float(m[peak_step]) if peak_step is not None else math.nan
    diverged = not bool(finite_m.all())
    stop, stop_step = (value, step) if ok else (peak, peak_step)
    return _Plateau(ok, value, step, trend, float(m[-1]), peak, diverged, stop, stop_step)


def underflow_margin(cfg: RunConfig) -> float:
    """Margin past which e^-m / N (N training examples) flushes to zero in the compute dtype."""
    dtype = get_precision(cfg.precision).compute_dtype
    tiny = float(np.finfo(dtype).tiny)
    return -math.log(tiny) - math.log(cfg.modular_task().num_train)


def run_rows(runs: Sequence[tuple[Mapping[str, Any], Mapping[str, np.ndarray]]]) -> list[dict]:
    """One row per run, from (summary or {'config': ...}, metrics): its plateau verdict."""
    rows = []
    for summary, metrics in runs:
        cfg = from_stored(summary["config"])
        verdict = _plateau(metrics[_MARGIN_METRIC])
        rows.append(
            {
                "config": cfg.to_dict(),
                "predicted": finite_or_none(numerics.equilibrium_margin(cfg.eps)),
                "predicted_balance": balance_margin(
                    cfg, summary.get("radial_margin_slope"), summary.get("balance_norm")
                ),
                "plateaued": verdict.plateaued,
                "value": finite_or_none(verdict.value),
                "plateau_step": verdict.step,
                "drift_per_1000": finite_or_none(verdict.drift),
                "final": finite_or_none(verdict.final),
                "peak": finite_or_none(verdict.peak),
                "diverged": verdict.diverged,
                "stop": finite_or_none(verdict.stop),  # the plateau value, else the peak
                "stop_step": verdict.stop_step,
                "underflow_margin": underflow_margin(cfg) if cfg.eps == 0 else None,
            }
        )
    return rows


def _std(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _mean(values: Sequence[float | int]) -> float | None:
    return float(np.mean(values)) if len(values) else None


_GROUP_FIXED = ("eps", "weight_decay", "seed")  # always keys (eps, wd) or never (seed)


def group_rows(rows: Sequence[dict]) -> list[dict]:
    """One row per group of runs equal but for the seed (first-seen order); module docstring."""
    varying = varying_keys([r["config"] for r in rows])
    keys = ["eps", "weight_decay", *(k for k in varying if k not in _GROUP_FIXED)]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(repr(row["config"][k]) for k in keys), []).append(row)
    out = []
    for members in groups.values():
        first = members[0]["config"]
        done = [r for r in members if r["plateaued"]]
        values = [r["stop"] for r in (done or members) if r["stop"] is not None]
        measured = _mean(values)
        predicted = members[0]["predicted"]
        eps_zero = first["eps"] == 0
        deviation = None if measured is None or predicted is None else measured - predicted
        balance = [r["predicted_balance"] for r in members if r["predicted_balance"] is not None]
        predicted_balance = _mean(balance) if len(balance) == len(members) else None
        out.append(
            {
                **{k: first[k] for k in keys},
                "predicted": predicted,
                "measured_mean": measured,
                "measured_std": _std(values) if values else None,
                "plateaued": len(done) / len(members),
                "n": len(members),
                "measured_from": "plateau" if done else "peak",
                "deviation": deviation,
                "predicted_balance": predicted_balance,
                "deviation_balance": None
                if measured is None or predicted_balance is None
                else measured - predicted_balance,
                "agrees": None if deviation is None or not done else abs(deviation) <= _AGREEMENT,
                "plateau_step_mean": _mean([r["plateau_step"] for r in done]),
                "final_mean": _mean([r["final"] for r in members if r["final"] is not None]),
                "grows_to_underflow": eps_zero,
                "stop_margin": _mean([r["stop"] for r in members if r["stop"] is not None])
                if eps_zero
                else None,
                "stop_step": _mean([r["stop_step"] for r in members if r["stop_step"] is not None])
                if eps_zero
                else None,
                "stop_how": ("plateau" if len(done) == len(members) else "peak")
                if eps_zero
                else None,
                "diverged": sum(r["diverged"] for r in members) / len(members),
                "underflow_margin": members[0]["underflow_margin"],
            }
        )
    return out


def analyze_dir(
    path: pathlib.Path | str, out: pathlib.Path | str | None = None
) -> tuple[list[dict], list[dict]]:
    """(group rows, run rows) of a sweep or run directory; writes OUT/equilibrium.json if `out`."""
    runs = [(summary, load_metrics(run_dir)) for summary, run_dir in dir_runs(path)]
    per_run = run_rows(runs)
    rows = group_rows(per_run)
    if out is not None:
        atomic_write_json(pathlib.Path(out) / OUTPUT_FILE, rows)
    return rows, per_run


def format_table(rows: Sequence[dict]) -> str:
    """The group rows as an aligned table, eps = 0 groups annotated."""
    if not rows:
        return "(no runs)"
    extra = [
        k
        for k in rows[0]
        if k not in ("eps", "weight_decay") and k in RunConfig.__dataclass_fields__
    ]
    header = [
        "eps",
        "wd",
        *extra,
        "log(1/eps)",
        "balance",
        "measured",
        "std",
        "dev",
        "dev_bal",
        "plateaued",
        "n",
        "at step",
        "note",
    ]
    lines = []
    for r in rows:
        if r["grows_to_underflow"]:
            stop = "stops at" if r["stop_how"] == "plateau" else "peaks at"
            note = (
                f"eps=0: grows until gradients underflow (~{r['underflow_margin']:.1f}); "
                f"{stop} {fmt(r['stop_margin'], '.2f')} (step {fmt(r['stop_step'], '.0f')})"
            )
            if r["diverged"]:
                note += f", then {r['diverged']:.0%} diverge (inf/NaN)"
        elif r["diverged"]:
            note = f"{r['diverged']:.0%} diverged: peak shown"
        elif r["agrees"] is None:
            note = "no plateau: peak shown"
        else:
            side = "overshoots" if r["deviation"] > 0 else "undershoots"
            note = f"within {_AGREEMENT:g}" if r["agrees"] else f"{side} by > {_AGREEMENT:g}"
        lines.append(
            [
                format(r["eps"], "g"),
                format(r["weight_decay"], "g"),
                *(str(r[k]) for k in extra),
                fmt(r["predicted"], ".2f"),
                fmt(r["predicted_balance"], ".2f"),
                fmt(r["measured_mean"], ".2f"),
                fmt(r["measured_std"], ".2f"),
                fmt(r["deviation"], "+.2f"),
                fmt(r["deviation_balance"], "+.2f"),
                f"{r['plateaued']:.2f}",
                str(r["n"]),
                fmt(r["plateau_step_mean"], ".0f"),
                note,
            ]
        )
    return align([header, *lines], left_last=True)  # numbers right-aligned, the note left
