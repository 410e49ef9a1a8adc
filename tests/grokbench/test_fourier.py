"""Progress measures (grokbench.fourier) on logit tables whose answer is known, the phase
rules (grokbench.progress), ⊥Grad (optimizers.orthograd) against Prieto et al.'s formula, and
`grokbench progress`'s table and bad input."""

import functools

import jax
import numpy as np
import pytest

import numerics
from grokbench import cli, fourier, optimizers, progress
from grokbench.config import RunConfig
from grokbench.store import Store

P = 11


def _circuit(task: str, k: int, scale: float = 6.0) -> np.ndarray:
    """Logits scale * cos(2 pi k (a +- b - c) / p) over the (a, b) grid: a pure circuit."""
    a, b, c = np.meshgrid(np.arange(P), np.arange(P), np.arange(P), indexing="ij")
    s = fourier.FOURIER_TASKS[task]
    return (
        (scale * np.cos(2 * np.pi * k * (a + s * b - c) / P)).reshape(P * P, P).astype(np.float32)
    )


@functools.cache
def _measurer(task: str):
    """The measures of `task` at p = 11 on a given logit table (one compilation per task)."""
    cfg = RunConfig(task=task, p=P, d_model=8, n_heads=2, progress_measures=True)

    def measure(params, table, x_train):
        return fourier.measures_fn(cfg, lambda params, tokens: table)(params, x_train)

    return jax.jit(measure)


def _measure(task: str, table: np.ndarray) -> dict:
    rng = np.random.default_rng(0)
    params = {"embed": rng.normal(size=(P + 1, 8)), "w_u": rng.normal(size=(8, P))}
    x_train = np.stack([np.arange(P), np.arange(P)[::-1], np.full(P, P)], axis=1)
    params = {k: v.astype(np.float32) for k, v in params.items()}
    out = _measurer(task)(params, table, x_train)
    return {k: np.asarray(v) for k, v in out.items()}


_cross_entropy = jax.jit(numerics.cross_entropy)


@pytest.mark.parametrize("task", ["a+b", "a-b"])
def test_a_pure_circuit_is_one_key_frequency(task):
    table = _circuit(task, k=3)
    m = _measure(task, table)
    assert fourier._key_frequencies(m["logit_freq_share"]) == [3]
    np.testing.assert_allclose(m["logit_freq_share"][2], 1.0, rtol=1e-5)
    labels = np.asarray(
        [(a + fourier.FOURIER_TASKS[task] * b) % P for a in range(P) for b in range(P)]
    )
    # One program (shared by both tasks: the same shapes), not one per eager operation.
    full = float(np.mean(_cross_entropy(table, labels)))
    np.testing.assert_allclose(m["restricted_loss"], full, rtol=1e-5)  # nothing is removed
    np.testing.assert_allclose(m["excluded_loss"], np.log(P), rtol=1e-5)  # nothing is left


def test_the_other_sign_and_noise_have_no_key_frequency():
    m = _measure("a+b", _circuit("a-b", k=2))  # a - b's circuit seen as a + b's
    assert fourier._key_frequencies(m["logit_freq_share"]) == []
    noise = np.random.default_rng(1).normal(size=(P * P, P)).astype(np.float32)
    m = _measure("a+b", noise)
    assert fourier._key_frequencies(m["logit_freq_share"]) == []
    assert m["logit_freq_share"].sum() < 0.5


def test_gini_and_weight_norms():
    np.testing.assert_allclose(fourier._gini(np.ones(8, np.float32)), 0.0, atol=1e-7)
    np.testing.assert_allclose(fourier._gini(np.eye(1, 8, 3, dtype=np.float32)[0]), 7 / 8)
    m = _measure("a+b", _circuit("a+b", 1))
    assert m["weight_sq"] == pytest.approx(m["weight_sq_embed"] + m["weight_sq_unembed"])
    mlp = RunConfig(task="a^2+b^2", p=97, model="mlp", progress_measures=True)
    assert fourier.columns(mlp) == (
        "weight_sq",
        "weight_sq_embed",
        "weight_sq_unembed",
    )
    assert fourier.columns(RunConfig()) == ()  # off unless a recipe or the user turns them on


def test_orthograd_is_prietos_projection():
    rng = np.random.default_rng(0)
    w = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=5)}
    g = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=5)}
    w, g = ({k: v.astype(np.float32) for k, v in t.items()} for t in (w, g))
    tx = optimizers.orthograd()
    out, _ = tx.update(g, tx.init(w), w)
    for name in w:
        wf, gf = w[name].ravel(), g[name].ravel()
        g_orth = gf - wf @ gf / (wf @ wf + 1e-30) * wf  # orthograd.py, line by line
        want = g_orth * np.linalg.norm(gf) / (np.linalg.norm(g_orth) + 1e-30)
        np.testing.assert_allclose(np.ravel(out[name]), want, rtol=1e-5)
        assert abs(np.ravel(out[name]) @ wf) < 1e-4 * np.linalg.norm(wf) * np.linalg.norm(gf)


def _metrics(restricted, test, acc, train_acc):
    n = len(restricted)
    return {
        "train_acc": np.asarray(train_acc, float),
        "test_step": 100 * np.arange(1, n + 1),
        "restricted_loss": np.asarray(restricted, float),
        "test_loss": np.asarray(test, float),
        "test_acc": np.asarray(acc, float),
        "excluded_loss": np.linspace(0.1, 3.0, n),
        "gini": np.linspace(0.1, 0.6, n),
        "logit_freq_share": np.tile([0.0, 0.6, 0.0, 0.3], (n, 1)),
    }


def test_phase_rules():
    train_acc = np.r_[np.zeros(150), np.ones(450)]  # memorised at step 150
    m = _metrics(
        restricted=[3.4, 3.0, 0.9, 0.5, 0.1, 0.01],  # below 1 nat at 300
        test=[3.4, 5.0, 6.0, 3.0, 0.15, 0.015],  # below 1 nat at 500, after the circuit
        acc=[0.0, 0.1, 0.2, 0.5, 0.995, 1.0],
        train_acc=train_acc,
    )
    ph = progress.phases(m)
    assert (ph["memorization_step"], ph["circuit_step"], ph["cleanup_step"]) == (150, 300, 500)
    assert ph["grok_step"] == 500 and ph["key_frequencies"] == [2, 4]
    assert progress.phases({**m, "train_acc": np.zeros(600)})["circuit_step"] is None


def _store_runs(tmp_path, cfg, metrics):
    store = Store(tmp_path / "store")
    n = cfg.steps
    cols = {"step": np.arange(n), "train_acc": np.ones(n), "train_ce": np.full(n, 1e-3)}
    summary = {"config": cfg.to_dict(), "spike_steps": [], "seconds": 0.0}
    store.save(cfg, {**cols, **metrics}, summary)
    return tmp_path / "store"


def test_progress_command_table_and_bad_input(tmp_path, capsys):
    cfg = RunConfig(p=7, steps=600, progress_measures=True)
    m = _metrics([3.0, 0.5, 0.4, 0.3, 0.2, 0.1], [4, 3, 2, 1, 0.3, 0.15], [0.5] * 5 + [1], [1])
    m.pop("train_acc")
    root = _store_runs(tmp_path / "ok", cfg, m)
    assert cli.main(["progress", str(root)]) == 0
    out = capsys.readouterr().out
    assert "circuit" in out and "2,4" in out
    mlp = RunConfig(task="a^2+b^2", p=7, model="mlp", steps=600, progress_measures=True)
    plain = {"test_step": 100 * np.arange(1, 7), "test_loss": np.ones(6), "test_acc": np.ones(6)}
    root = _store_runs(tmp_path / "mlp", mlp, plain)
    assert cli.main(["progress", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no run in" in err and "Fourier" in err and len(err.splitlines()) == 1
    assert cli.main(["progress", str(tmp_path / "nothing")]) == 2


def test_recipes_that_read_the_measures_record_them():
    from grokbench import recipes

    for name in ("fig2-top", "setup-study", "orthograd"):
        assert all(c.progress_measures for c in recipes.expand(recipes.RECIPES[name])), name
    assert not any(c.progress_measures for c in recipes.expand(recipes.RECIPES["fig4"]))
