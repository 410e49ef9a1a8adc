"""The report's claim of Prieto et al. 2025: ⊥Grad leads to quick generalization, read from
the stored orthograd runs (full scale).
"""

from __future__ import annotations

import math

from figures._common import select
from figures.registry import Claims
from figures.report import paper
from figures.report.claims import Evidence, Row, claim_row, seeds

__all__ = ["CLAIMS", "claims"]


def _grokked(runs) -> str:
    """'k/n' runs that reached >= 99 % test accuracy at some evaluation (a stored grok_step)."""
    return f"{sum(r.summary.get('grok_step') is not None for r in runs)}/{len(runs)}"


def _step(run) -> float:
    """A run's grok step; infinity for one that never reached 99 % test accuracy."""
    g = run.summary["grok_step"]
    return math.inf if g is None else float(g)


def claims(evidence: Evidence) -> list[Row]:
    """Prieto et al.: ⊥Grad leads to quick generalization (the orthograd recipe, full scale):
    at weight decay 0 with standard CE, every ⊥Grad seed groks, each before the same seed
    without ⊥Grad."""
    runs = evidence.runs("orthograd", full=True)
    no_wd = [r for r in runs if r.config.weight_decay == 0]
    tested = select([r for r in no_wd if r.config.orthograd], loss="standard")
    plain = {r.config.seed: r for r in select(no_wd, loss="standard") if not r.config.orthograd}

    def ours() -> str:
        rows = []
        for flag in (True, False):
            same = [r for r in no_wd if r.config.orthograd == flag]
            counts = (f"{loss} {_grokked(select(same, loss=loss))}" for loss in paper.ORTHO_LOSSES)
            rows.append(f"{'with' if flag else 'without'} ⊥Grad: {', '.join(counts)}")
        pairs = ", ".join(f"{_step(r):g} vs {_step(plain[r.config.seed]):g}" for r in tested)
        return (
            f"reached >= 99 % test at lambda 0 ({seeds(tested)}): "
            + "; ".join(rows)
            + f"; standard CE grok step with vs without ⊥Grad per seed: {pairs}"
        )

    # A stored grok_step of None is a measurement (never reached 99 %); a missing key is not.
    measured = (
        tested
        and all(r.config.seed in plain for r in tested)
        and all("grok_step" in r.summary for r in [*tested, *plain.values()])
    )
    return [
        claim_row(
            claim="⊥Grad leads to quick generalization (a+b mod 31, standard CE, AdamW lambda 0)",
            source=paper.ORTHOGRAD.where,
            paper=paper.ORTHOGRAD.stated,
            tolerance=paper.ORTHOGRAD.tolerance,
            ours=ours,
            ok=None
            if not measured
            # 'Quick generalization': earlier than the same seed without ⊥Grad; a seed that
            # never groks is at infinity, so this also asks that every ⊥Grad seed groks.
            else lambda: all(_step(r) < _step(plain[r.config.seed]) for r in tested),
            why=evidence.why("orthograd", full=True)
            if not tested
            else "a seed without its run without ⊥Grad, or a summary without a grok step",
        )
    ]


CLAIMS = Claims(figure="progress", claims=claims, reads=("orthograd",))
