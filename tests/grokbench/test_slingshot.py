"""The slingshot spike rule on synthetic curves: each case pins a count the rule must give."""

import numpy as np
import pytest

from grokbench import slingshot, summary
from grokbench.config import RunConfig


def _curve(n=2000, mem=100, plateau=1e-7, seed=0):
    """Loss that falls to `plateau` after memorization at step `mem`, with mild noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    loss = np.maximum(3.0 * np.exp(-t / 40.0), plateau) * np.exp(0.3 * rng.standard_normal(n))
    acc = np.where(t >= mem, 1.0, 0.5)
    return loss, acc


def _spike(loss, acc, at, height, width=20):
    loss, acc = loss.copy(), acc.copy()
    bump = height * np.exp(-np.arange(width) / 4.0)
    loss[at : at + width] = np.maximum(loss[at : at + width], bump)
    acc[at : at + 5] = 0.9  # a real spike also costs training accuracy
    return loss, acc


def test_smooth_decay_has_no_spikes():
    loss, acc = _curve()
    assert slingshot._count_spikes(loss, acc) == 0


def test_counts_each_spike_once():
    loss, acc = _curve()
    for at in (600, 1000, 1500):
        loss, acc = _spike(loss, acc, at, height=0.5)
    assert slingshot.spike_steps(loss, acc) == [600, 1000, 1500]


def test_small_bumps_below_the_floor_do_not_count():
    loss, acc = _curve(plateau=1e-8)
    loss, acc = _spike(loss, acc, 800, height=1e-5)  # 1000x the minimum, but tiny
    assert slingshot._count_spikes(loss, acc) == 0


def test_loss_staying_high_is_one_spike():
    loss, acc = _curve()
    loss[700:] = 0.3
    assert slingshot._count_spikes(loss, acc) == 1


def test_jitter_around_threshold_counts_once():
    loss, acc = _curve(plateau=1e-5)
    threshold = slingshot._SPIKE_FLOOR
    loss[900:960] = threshold * np.where(np.arange(60) % 2 == 0, 1.2, 0.8)  # within hysteresis
    assert slingshot._count_spikes(loss, acc) == 1


def test_oscillating_burst_is_one_spike():
    # What a real slingshot looks like in fp32 (fig2-top, standard CE, seed 0, steps 1562-1592).
    loss, acc = _curve()
    burst = [3e-7, 3e-6, 3e-5, 1e-4, 0.48, 4e-4, 0.14, 2e-2, 5e-3, 1e-2, 1e-2, 3e-3, 1e-3, 5e-4]
    loss[800 : 800 + len(burst)] = burst
    loss[800 + len(burst) : 1100] = np.geomspace(4e-4, 1e-7, 1100 - 800 - len(burst))
    assert slingshot.spike_steps(loss, acc) == [804]


def test_slow_drift_above_the_floor_is_not_a_spike():
    # A margin shrinking under weight decay: the loss climbs 30x, but over 300 steps.
    loss, acc = _curve(plateau=1e-4)
    loss[1000:1300] = np.geomspace(1e-4, 3e-3, 300)
    loss[1300:] = 3e-3
    assert slingshot._count_spikes(loss, acc) == 0
    assert slingshot._count_spikes(loss, acc, window=400) == 1


def test_spikes_before_memorization_do_not_count():
    loss, acc = _curve(mem=1200)
    loss, acc = _spike(loss, acc, 600, height=0.5)
    assert slingshot.memorization_step(acc) == 1200
    assert slingshot._count_spikes(loss, acc) == 0


def test_never_memorized():
    loss, acc = _curve()
    acc = np.minimum(acc, 0.99)
    assert slingshot.memorization_step(acc) is None
    assert slingshot._count_spikes(loss, acc) == 0


def test_rule_parameters_matter():
    loss, acc = _curve()
    loss, acc = _spike(loss, acc, 1000, height=5e-4)
    assert slingshot._count_spikes(loss, acc) == 0  # below the default floor
    assert slingshot._count_spikes(loss, acc, floor=1e-4) == 1


def test_summary_fields():
    n = 200
    loss, acc = _curve(n=n, mem=50)
    loss, acc = _spike(loss, acc, 120, height=2.0)
    metrics = {
        "train_acc": acc,
        "train_ce": loss,
        "train_loss": loss,
        "margin_mean": np.full(n, 12.5),
        "margin_min": np.full(n, 11.0),
        "frac_past_cliff": np.zeros(n),
        "test_step": np.arange(10, n + 1, 10),
        "test_acc": np.linspace(0.1, 1.0, n // 10),
        "test_loss": np.ones(n // 10),
    }
    s = summary.summarize(RunConfig(steps=n, eval_every=10), metrics, seconds=1.5)
    assert s["spikes"] == 1 and s["spike_steps"] == [120]
    assert s["final_margin"] == pytest.approx(12.5)
    assert s["max_train_loss_after_memorization"] == pytest.approx(2.0)
    assert s["test_accuracy"] == pytest.approx(1.0) and s["grok_step"] == n
    assert s["memorization_step"] == 50 and s["steps"] == n
