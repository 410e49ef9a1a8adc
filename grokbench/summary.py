"""A run's `summary.json`: assembled here from its metrics, and rebuilt here when stale.

A summary holds a run's headline numbers (the CLI contract: final accuracies, final mean
margin, the largest training loss after memorization, the spike count, steps, seconds) and
extras for analysis. The numbers come from the analyzers, which measure and never assemble
a summary themselves:

- `grokbench.slingshot`: the spike rule, the memorization and grok steps;
- `grokbench.fourier`: the progress measures at the final evaluation (`final_measures`);
- `grokbench.balance`: the update balance's D and S at the final parameters, added only when
  a run is trained (its parameters are not stored);
- a distillation run (teacher_steps > 0, `grokbench.distill`) has its own fields instead:
  KL, parameter drift and the residual gradient, read from its per-step metrics.

Each summary records the version of its rule (`summary_version`: `versions.SUMMARY_VERSION`,
or `versions.DISTILL_SUMMARY_VERSION` for a distillation run). `load` returns a finished
run's summary, current: one written under another version is rebuilt from the stored
metrics and written back, and the run is not retrained (the balance terms, which need the
final parameters, are then left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import numerics
from grokbench import balance, fourier, slingshot
from grokbench.config import RunConfig
from grokbench.precision import get_precision
from grokbench.store import Store, atomic_write_json, load_metrics
from grokbench.tables import finite_or_none
from grokbench.versions import DISTILL_SUMMARY_VERSION, SUMMARY_VERSION

__all__ = []  # package-internal: only other harness modules use these names


def _summary_version(cfg: RunConfig) -> int:
    """The version a current summary of `cfg` carries (module docstring)."""
    return DISTILL_SUMMARY_VERSION if cfg.teacher_steps else SUMMARY_VERSION


def _is_current(summary: Mapping[str, Any], cfg: RunConfig) -> bool:
    """Whether `summary` was written by the rule this version of the code applies to `cfg`."""
    return summary.get("summary_version") == _summary_version(cfg)


def summarize(
    cfg: RunConfig,
    metrics: Mapping[str, np.ndarray],
    seconds: float,
    backend: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict:
    """The run's `summary.json` (fractions in [0, 1], margins in nats).

    `backend` is where the run trained (`engine.RunOutput.backend`; None when not known);
    `params`, its final parameters when known, adds the update balance terms
    (`balance.balance_terms`, where they exist).
    """
    if cfg.teacher_steps:
        return _distill_summary(cfg, metrics, seconds, backend)
    summary = _run_summary(cfg, metrics, seconds, backend)
    if params is not None:  # the plateau's update balance (grokbench.balance)
        summary |= balance.balance_terms(cfg, params) or {}
    return summary


def load(store: Store, cfg: RunConfig) -> dict | None:
    """A finished run's current summary (module docstring); None for a run not finished.

    A run is finished when its summary.json and its whole metrics.npz read back, with every
    progress column its config records (`fourier.columns`): a damaged run, or one stored
    before the progress measures existed, is trained again.
    """
    summary = store.load_summary(cfg)
    if summary is not None and not store.metrics_ok(cfg, fourier.columns(cfg)):
        summary = None
    if summary is not None and not _is_current(summary, cfg):
        metrics = load_metrics(store.run_dir(cfg))
        summary = summarize(cfg, metrics, summary["seconds"], summary.get("backend"))
        atomic_write_json(store.run_dir(cfg) / "summary.json", summary)
    return summary


def _run_summary(
    cfg: RunConfig, metrics: Mapping[str, np.ndarray], seconds: float, backend: str | None
) -> dict:
    """An ordinary run's summary; `matmul_precision` is the one the engine pinned for its
    precision (`Precision.matmul_precision`)."""
    acc, ce = metrics["train_acc"], metrics["train_ce"]
    mem = slingshot.memorization_step(acc)
    after = ce[mem + 1 :] if mem is not None else ce[:0]
    spikes = slingshot.spike_steps(ce, acc)
    compute = get_precision(cfg.precision).compute_dtype
    return {
        "config": cfg.to_dict(),
        "test_accuracy": finite_or_none(metrics["test_acc"][-1]),
        "train_accuracy": finite_or_none(acc[-1]),
        "final_margin": finite_or_none(metrics["margin_mean"][-1]),
        "max_train_loss_after_memorization": finite_or_none(after.max()) if after.size else None,
        "spikes": len(spikes),
        "steps": int(cfg.steps),
        "seconds": float(seconds),
        # Extras for analysis; the fields above are the CLI contract.
        "spike_steps": spikes,
        "memorization_step": mem,
        "grok_step": slingshot.grok_step(metrics["test_step"], metrics["test_acc"]),
        "final_train_loss": finite_or_none(metrics["train_loss"][-1]),
        "final_train_ce": finite_or_none(ce[-1]),
        "final_test_loss": finite_or_none(metrics["test_loss"][-1]),
        "final_min_margin": finite_or_none(metrics["margin_min"][-1]),
        "final_frac_past_cliff": finite_or_none(metrics["frac_past_cliff"][-1]),
        "precision_cliff": numerics.precision_cliff(compute),
        "equilibrium_margin": finite_or_none(numerics.equilibrium_margin(cfg.eps)),
        "backend": backend,
        "matmul_precision": get_precision(cfg.precision).matmul_precision,
        **fourier.final_measures(metrics),
        "summary_version": SUMMARY_VERSION,
    }


def _distill_summary(
    cfg: RunConfig, metrics: Mapping[str, np.ndarray], seconds: float, backend: str | None
) -> dict:
    """A distillation run's summary: the usual keys plus the KL and drift numbers.

    `max_train_loss_after_memorization` and `spikes` are None: the student starts memorized
    and the slingshot rule does not apply. `residual_gradient` is `logit_grad_max` at step 0
    (z_S = z_T exactly); `teacher_test_accuracy` the test accuracy at step 0, in the run's
    precision (the metrics: `grokbench.distill`'s docstring).
    """
    kl, dist, test_acc = metrics["kl"], metrics["param_distance"], metrics["test_acc"]
    return {
        "config": cfg.to_dict(),
        "test_accuracy": finite_or_none(test_acc[-1]),
        "train_accuracy": finite_or_none(metrics["train_acc"][-1]),
        "final_margin": finite_or_none(metrics["margin_mean"][-1]),
        "max_train_loss_after_memorization": None,
        "spikes": None,
        "steps": int(cfg.steps),
        "seconds": float(seconds),
        "kl_final": finite_or_none(kl[-1]),
        "kl_max": finite_or_none(np.max(kl)),
        "max_param_distance": finite_or_none(np.max(dist)),
        "residual_gradient": finite_or_none(metrics["logit_grad_max"][0]),
        # Extras for analysis; the fields above are the CLI contract.
        "final_param_distance": finite_or_none(dist[-1]),
        "final_test_kl": finite_or_none(metrics["test_kl"][-1]),
        "min_test_accuracy": finite_or_none(np.min(test_acc)),
        "teacher_test_accuracy": finite_or_none(test_acc[0]),
        "adam_step_initial": finite_or_none(metrics["adam_step"][0]),
        "backend": backend,
        "matmul_precision": get_precision(cfg.precision).matmul_precision,
        "summary_version": DISTILL_SUMMARY_VERSION,
    }
