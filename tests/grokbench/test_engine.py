"""The engine: vmapped batches equal single runs, the step equals AdamW, metrics from the logits.

Runs are shrunken (p = 7, width 8, tens of steps) so compilation dominates; runs that can
share a compiled program do (module-scoped fixtures).
"""

import dataclasses
import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import numerics
from grokbench import engine, experiment, fourier, metrics
from grokbench.config import RunConfig
from grokbench.optimizers import adamw
from grokbench.precision import precision_scope
from grokbench.store import Store
from tasks import build_model, modular_split

# The progress measures (off by default; tests/grokbench/test_fourier.py) are on in
# `_variants`, which the batching and sharding tests compare.
TINY = RunConfig(p=7, d_model=8, n_heads=2, steps=20, eval_every=10)
# The MLP at TINY's task: the fast siblings of the transformer's slow-tier cases below (the
# same engine paths; its programs compile in about a third of the transformer's time).
TINY_MLP = dataclasses.replace(TINY, model="mlp", mlp_width=16)


def _variants():
    """Three runs that differ in every vmapped field, progress measures on."""
    base = dataclasses.replace(TINY, progress_measures=True)
    return [
        dataclasses.replace(base, seed=0),
        dataclasses.replace(base, seed=1, eps=1e-12, weight_decay=0.5, lr=3e-3),
        dataclasses.replace(base, seed=2, b1=0.8, b2=0.95, weight_decay=0.0),
    ]


@pytest.fixture(scope="module")
def batched():
    return engine.train(_variants(), progress=False)


def test_columns_and_shapes(batched):
    m = batched[0].metrics
    progress = fourier.columns(batched[0].config)
    assert set(m) == {"step", "test_step", *metrics.STEP_METRICS, *metrics._TEST_METRICS, *progress}
    assert m["logit_freq_share"].shape == m["embed_freq_norm"].shape == (2, TINY.p // 2)
    assert all(np.isfinite(m[k]).all() for k in progress)
    for name in ("step", *metrics.STEP_METRICS):
        assert m[name].shape == (TINY.steps,), name
    np.testing.assert_array_equal(m["test_step"], [10, 20])
    assert m["test_acc"].shape == (2,)
    assert m["train_loss"].dtype == np.float32
    assert all(np.isfinite(m[k]).all() for k in metrics.STEP_METRICS)


def test_vmapped_batch_equals_individual_runs(batched):
    # The single runs go in two chunks of 10 steps, the batch in one of 20: this also holds
    # a chunked run to an unchunked one (the slow test_chunking_does_not_change_results does
    # so at its tighter bound). The single runs' program is the progress callback test's.
    for cfg, out in zip(_variants(), batched, strict=True):
        (single,) = engine.train([cfg], progress=False, chunk_steps=10)
        assert single.config == out.config == cfg
        for name, column in single.metrics.items():
            np.testing.assert_allclose(
                out.metrics[name], column, rtol=2e-5, atol=1e-7, err_msg=name
            )


@pytest.mark.parametrize(
    "n_runs",
    [
        # slow: two init programs of their own (a batch of 2, sharded and not); fast sibling:
        # [padded] (the same sharded and single-device layouts); even batches of 2 train
        # sharded in tests/grokbench/test_executors.py and tests/grokbench/test_sweep.py.
        pytest.param(2, marks=pytest.mark.slow, id="even"),
        pytest.param(3, id="padded"),
    ],
)
def test_sharded_batch_layout(n_runs):
    cfgs = _variants()[:n_runs]  # over the 2 host devices of tests/conftest.py
    assert jax.local_device_count() == 2
    with precision_scope(TINY.precision):
        batch = engine.prepare(cfgs)
    leaf = jax.tree.leaves(batch.state)[0]
    assert batch.n_runs == n_runs and leaf.shape[0] == (4 if n_runs == 3 else 2)
    assert len(leaf.sharding.device_set) == 2
    with precision_scope(TINY.precision):
        leaf = jax.tree.leaves(engine.prepare(cfgs, shard=False).state)[0]
    assert len(leaf.sharding.device_set) == 1


# The fast sibling: test_vmapped_batch_equals_individual_runs holds the same sharded, padded
# batch to the unsharded single runs; this one adds the unsharded batch of 3 (a program of
# its own).
@pytest.mark.slow
@pytest.mark.bitwise
def test_sharded_batch_equals_single_device(batched):
    cfgs = _variants()  # padded to 4 over the 2 host devices of tests/conftest.py
    single = engine.train(cfgs, progress=False, shard=False)
    for out, ref in zip(batched, single, strict=True):
        assert out.config == ref.config
        for name, column in ref.metrics.items():
            np.testing.assert_allclose(
                out.metrics[name], column, rtol=2e-5, atol=1e-7, err_msg=name
            )


def test_sharded_chunk_keeps_the_state_sharding(batched):
    # The chunk's output state must come back sharded as its input: otherwise the second
    # chunk recompiles the whole program (issue 15: the optimizer's step count). The batch
    # of `batched` (3 runs padded to 4), whose compiled chunk it reuses.
    with precision_scope(TINY.precision):
        batch = engine.prepare(_variants())
        state, _ = batch.run_chunk(batch.state, batch.hyper, batch.data, batch.n_blocks)
    shardings = [leaf.sharding for leaf in jax.tree.leaves(batch.state)]
    assert [leaf.sharding for leaf in jax.tree.leaves(state)] == shardings


def test_progress_callback_counts_every_step():
    # A single run in chunks of 10: the program of test_vmapped_batch_equals_individual_runs's
    # single runs, compiled once for both.
    seen = []
    engine.train(_variants()[:1], progress=False, chunk_steps=10, on_chunk=seen.append)
    assert seen == [10, 10]


def test_runs_in_a_batch_differ(batched):
    losses = [out.metrics["train_loss"][-1] for out in batched]
    assert len(set(losses)) == 3


# The batch in chunks of 10 is a program of its own; the fast siblings are
# test_vmapped_batch_equals_individual_runs (single runs in two chunks of 10 against the batch
# in one, at the vmapping's bound) and test_progress_callback_counts_every_step.
@pytest.mark.slow
def test_chunking_does_not_change_results(batched):
    cfgs = _variants()
    small = engine.train(cfgs, progress=False, chunk_steps=10)
    for a, b in zip(batched, small, strict=True):
        for name in a.metrics:
            np.testing.assert_allclose(a.metrics[name], b.metrics[name], rtol=1e-6, err_msg=name)


def test_step_zero_metrics_come_from_the_initial_logits(batched):
    cfg, m = TINY, batched[0].metrics
    data = modular_split(cfg.modular_task())
    # The plain forward pass, independent of the engine's fast one.
    model = build_model(cfg.model_config(), fast=False)
    params = model.init(jax.random.key(cfg.seed), jnp.float32)
    logits = jax.jit(model.apply)(params, jnp.asarray(data.x_train))  # one compile, not per op
    y = jnp.asarray(data.y_train)
    margin, ce = jax.jit(lambda z, y: (numerics.logit_margin(z, y), numerics.cross_entropy(z, y)))(
        logits, y
    )  # one program, not one per op
    margin = np.asarray(margin)
    np.testing.assert_allclose(m["margin_mean"][0], margin.mean(), rtol=1e-5)
    np.testing.assert_allclose(m["margin_min"][0], margin.min(), rtol=1e-5)
    np.testing.assert_allclose(m["margin_median"][0], np.median(margin), rtol=1e-5)
    loss = float(np.mean(np.asarray(ce, np.float64)))
    np.testing.assert_allclose(m["train_loss"][0], loss, rtol=1e-5)
    np.testing.assert_allclose(m["train_ce"][0], loss, rtol=1e-5)
    acc = float(np.mean(np.argmax(np.asarray(logits), -1) == data.y_train))
    assert m["train_acc"][0] == pytest.approx(acc)
    assert m["frac_past_cliff"][0] == 0.0
    assert m["logit_grad_asym"][0] < 1e-5  # fixed CE: logit gradients sum to ~0
    # First Adam step: |m_hat| / sqrt(v_hat) = 1 wherever g != 0 (dead ReLUs give 0).
    assert 0.5 < m["adam_step"][0] <= 1.0
    norm = np.sqrt(sum(np.sum(np.square(np.asarray(p, np.float64))) for p in params.values()))
    assert m["param_norm"][0] == pytest.approx(norm, rel=1e-5)


@pytest.mark.parametrize(
    "base",
    [
        # slow: the transformer's one-step program is its own; fast sibling: the [mlp] case
        # (the same engine step against the same AdamW chain, on the MLP).
        pytest.param(TINY, marks=pytest.mark.slow, id="transformer"),
        # fast_compile: two paths that must agree (conftest.py, _fast_compile).
        pytest.param(TINY_MLP, marks=pytest.mark.fast_compile, id="mlp"),
    ],
)
def test_one_step_equals_the_adamw_chain(base):
    cfg = dataclasses.replace(base, steps=1, eval_every=1, eps=1e-6, weight_decay=0.5)
    batch = engine.prepare([cfg])
    (params, _), _ = batch.run_chunk(batch.state, batch.hyper, batch.data, batch.n_blocks)
    data = modular_split(cfg.modular_task())
    model = build_model(cfg.model_config(), fast=False)
    p0 = model.init(jax.random.key(cfg.seed), jnp.float32)

    def loss_fn(p):
        logits = model.apply(p, jnp.asarray(data.x_train))
        return jnp.mean(numerics.cross_entropy(logits, jnp.asarray(data.y_train)))

    tx = adamw(cfg.lr, cfg.b1, cfg.b2, cfg.eps, cfg.weight_decay)

    @jax.jit
    def reference_step(p):
        updates, _ = tx.update(jax.grad(loss_fn)(p), tx.init(p), p)
        return optax.apply_updates(p, updates)

    expected = reference_step(p0)
    for name, value in expected.items():
        np.testing.assert_allclose(params[name][0], value, rtol=1e-5, atol=1e-7, err_msg=name)


# The MLP run of test_variants_train trains in fp64: test_fp64_run_keeps_x64_inside's run, one
# program for both (both fast_compile: conftest.py, _fast_compile).
_MLP_FP64 = dataclasses.replace(
    TINY_MLP,
    activation="quadratic",
    mlp_init="doshi",
    lr=1e-2,
    precision="fp64",
)


@pytest.mark.fast_compile  # dtypes and the x64 flag: a structural check (conftest.py)
def test_fp64_run_keeps_x64_inside():
    assert not jax.config.read("jax_enable_x64")
    (out,) = engine.train([_MLP_FP64], progress=False)
    assert not jax.config.read("jax_enable_x64")
    assert out.metrics["margin_mean"].dtype == np.float64
    assert jnp.asarray(1.0).dtype == jnp.float32


@functools.cache  # RunConfig is frozen: a run read by two tests is trained once
def _trained(cfg: RunConfig) -> engine.RunOutput:
    (out,) = engine.train([cfg], progress=False)
    return out


def _check_trains(cfg):
    m = _trained(cfg).metrics
    assert all(np.isfinite(m[k]).all() for k in metrics.STEP_METRICS), cfg
    assert m["train_loss"][-1] < m["train_loss"][0], cfg


# The LaProp run of test_variants_train also warms up, predicts `=` and chains ⊥Grad:
# test_warmup_and_eq_output's run, trained once for both (`_trained`; both fast_compile).
_LAPROP = dataclasses.replace(
    TINY,
    optimizer="laprop",
    track_sqrt_v=True,
    eps=0.0,
    loss="stablemax",
    warmup_steps=4,
    eq_output=True,
    orthograd=True,
)


# Each structurally different config is a training program of its own, so each fast case
# carries several paths at once: every loss, optimizer, precision policy and model is in
# one of them (the baseline losses ride on the LaProp and the MLP runs). Smoke tests, all at
# fast_compile (conftest.py, _fast_compile).
@pytest.mark.parametrize(
    "cfg",
    [
        # slow: bf16 on the transformer; fast sibling: [mlp-bf16-standard] (the bf16 policy and
        # the standard loss on the MLP; the transformer trains standard CE in
        # tests/grokbench/test_golden.py::test_case_is_golden[standard-here]).
        pytest.param(
            dataclasses.replace(TINY, precision="bf16", loss="standard"),
            marks=(pytest.mark.fast_compile, pytest.mark.slow),
            id="bf16-standard",
        ),
        pytest.param(
            dataclasses.replace(TINY_MLP, precision="bf16", loss="standard"),
            marks=pytest.mark.fast_compile,
            id="mlp-bf16-standard",
        ),
        pytest.param(_LAPROP, marks=pytest.mark.fast_compile, id="laprop-eps0-stablemax-warmup"),
        pytest.param(
            dataclasses.replace(TINY_MLP, optimizer="adam", weight_decay=0.0, loss="zero_sum"),
            marks=pytest.mark.fast_compile,
            id="mlp-adam-zero_sum",
        ),
        pytest.param(_MLP_FP64, marks=pytest.mark.fast_compile, id="mlp-doshi-fp64"),
    ],
)
def test_variants_train(cfg):
    _check_trains(cfg)


# Each baseline loss alone on the reference transformer; the fast siblings are
# test_variants_train[laprop-eps0-stablemax-warmup] and [mlp-adam-zero_sum].
@pytest.mark.slow
@pytest.mark.parametrize("loss", ["stablemax", "zero_sum"])
def test_baseline_losses_train(loss):
    _check_trains(dataclasses.replace(TINY, loss=loss))


# The MLP's 4-step runs of test_emulated_matmul_precisions_train_and_differ_from_highest: the
# fast cases of the summary tests below train its exact program (weight decay is a vmapped
# number, not a program's) and, at tf32, the emulated precision its fast case does not.
_MLP_SHORT = dataclasses.replace(TINY_MLP, steps=4, eval_every=2)


@pytest.mark.parametrize(
    ("model", "precision"),
    [
        # The fast tier trains the MLP at bf16 here and at tf32 in the next test (the stored,
        # summarized run); the other pairs, the transformer's two included, are the slow
        # tier's (the transformer's emulated pass: tests/tasks/test_matmul.py).
        pytest.param("transformer", "tf32", marks=pytest.mark.slow),
        pytest.param("transformer", "bf16", marks=pytest.mark.slow),
        pytest.param("mlp", "tf32", marks=pytest.mark.slow),
        ("mlp", "bf16"),
    ],
)
@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_emulated_matmul_precisions_train_and_differ_from_highest(model, precision):
    """A few steps of the tiny transformer and MLP at tf32 and bf16 (tasks._matmul) train, and
    move the numbers from the exact-product run from the first step on."""
    base = TINY if model == "transformer" else TINY_MLP
    base = dataclasses.replace(base, steps=4, eval_every=2)  # the MLP's: _MLP_SHORT
    (exact,) = engine.train([base], progress=False)
    (out,) = engine.train([dataclasses.replace(base, matmul_precision=precision)], progress=False)
    m, e = out.metrics, exact.metrics
    assert all(np.isfinite(m[k]).all() for k in metrics.STEP_METRICS), precision
    assert not np.array_equal(m["train_loss"], e["train_loss"]), precision
    np.testing.assert_allclose(m["train_loss"], e["train_loss"], rtol=0.05)


@pytest.mark.parametrize(
    ("base", "precision"),
    [
        # slow: the transformer's runs and summary programs are their own; fast sibling: the
        # [mlp-tf32] case (the same summary, reverse mode through the emulated matmuls).
        pytest.param(dataclasses.replace(TINY, split="fixed"), "tf32", marks=pytest.mark.slow),
        pytest.param(_MLP_SHORT, "tf32", marks=pytest.mark.fast_compile),  # a smoke test
    ],
    ids=["transformer-tf32", "mlp-tf32"],
)
def test_emulated_run_is_summarized_with_its_balance_terms(tmp_path, base, precision):
    """A stored emulated run gets its whole summary: the balance terms' radial slope, a jvp
    at 'highest', is taken by reverse mode through the emulated matmuls (custom_vjp)."""
    # The transformer on the fixed split: the program of
    # test_summary_records_backend_and_matmul_precision[transformer] (its run at lambda 0.1) and
    # of the per_seed test's fixed run, compiled once for the three; the MLP's exact run: the
    # program of test_emulated_matmul_precisions_train_and_differ_from_highest[mlp-bf16]'s.
    cfg = dataclasses.replace(base, weight_decay=0.1)
    (exact,) = experiment.run_configs([cfg], Store(tmp_path), progress=False)
    emulated = dataclasses.replace(cfg, matmul_precision=precision)
    (summary,) = experiment.run_configs([emulated], Store(tmp_path), progress=False)
    assert summary["config"]["matmul_precision"] == precision
    assert summary["radial_margin_slope"] != 0 and summary["balance_norm"] > 0
    assert summary["radial_margin_slope"] == pytest.approx(exact["radial_margin_slope"], rel=0.05)


def test_mixed_shapes_are_rejected():
    with pytest.raises(ValueError, match="differ only"):
        engine.train([TINY, dataclasses.replace(TINY, loss="standard")], progress=False)


def test_chunk_evals():
    assert engine.chunk_evals(100, 1000, 100) == 10
    assert engine.chunk_evals(7, 1000, 100) == 7
    assert engine.chunk_evals(7, 500, 100) == 1
    assert engine.chunk_evals(12, 1000, 100) == 6


def _chunk_jaxpr(cfg: RunConfig) -> str:
    """The jaxpr of `cfg`'s jitted chunk (one batch of one run), as text."""
    with precision_scope(cfg.precision):
        batch = engine.prepare([cfg], shard=False)
        run = batch.run_chunk
        return str(
            jax.make_jaxpr(lambda s: run(s, batch.hyper, batch.data, batch.n_blocks))(batch.state)
        )


@pytest.mark.parametrize(
    ("precision", "pinned"),
    [
        ("fp32", True),
        # slow: fp64's init programs are their own; fast siblings: the [fp32-True] case (the
        # same pin: engine.py traces under the policy's matmul_precision, 'highest' for every
        # compute dtype of 4 bytes or more), tests/grokbench/test_precision.py::
        # test_matmul_precision_is_highest_for_wide_compute[fp64-highest] (fp64's is 'highest')
        # and test_fp64_run_keeps_x64_inside (an fp64 chunk traced and run under x64).
        pytest.param("fp64", True, marks=pytest.mark.slow),
        ("fp32/bf16", False),
    ],
)
@pytest.mark.fast_compile  # the jaxpr's text: a structural check (conftest.py, _fast_compile)
def test_matmul_precision_is_pinned_in_the_jitted_chunk(precision, pinned):
    """fp32/fp64 runs: every dot of the training program (forward and backward) is HIGHEST,
    not the backend's default (TF32 on NVIDIA GPUs, bf16 passes on TPUs)."""
    text = _chunk_jaxpr(dataclasses.replace(TINY, steps=2, eval_every=2, precision=precision))
    dots = text.count("dot_general[")
    highest = text.count("precision=(Precision.HIGHEST, Precision.HIGHEST)")
    assert dots > 10
    assert highest == (dots if pinned else 0)


@pytest.mark.parametrize(
    "base",
    [
        # slow: the transformer's summary programs; fast sibling: the [mlp] case (the same
        # stored summary and balance terms, the exact program of the emulated tests' MLP).
        pytest.param(dataclasses.replace(TINY, split="fixed"), marks=pytest.mark.slow),
        pytest.param(_MLP_SHORT, marks=pytest.mark.fast_compile),  # fields: a smoke test
    ],
    ids=["transformer", "mlp"],
)
def test_summary_records_backend_and_matmul_precision(tmp_path, base):
    # The transformer's run: the program of
    # test_per_seed_split_batch_trains_each_run_on_its_own_split's fixed run.
    cfg = base
    (summary,) = experiment.run_configs([cfg], Store(tmp_path), progress=False)
    stored = json.loads((pathlib.Path(summary["run_dir"]) / "summary.json").read_text())
    assert stored["backend"] == jax.default_backend()
    assert stored["matmul_precision"] == "highest"
    # The plateau's update balance terms (grokbench.equilibrium.balance_terms) where every
    # lambda |theta_i| < 1 (here lambda 0.1; at lambda 1 TINY's init has |theta_i| > 1).
    small = dataclasses.replace(cfg, weight_decay=0.1)
    (summary,) = experiment.run_configs([small], Store(tmp_path), progress=False)
    assert summary["radial_margin_slope"] != 0 and summary["balance_norm"] > 0


_PER_SEED = [dataclasses.replace(TINY, split="per_seed", seed=s) for s in range(2)]


@pytest.fixture(scope="module")
def per_seed_batch():
    return engine.train(_PER_SEED, progress=False)


# slow: the per_seed batch of 2 is a program of its own; fast sibling:
# test_vmapped_batch_equals_individual_runs (its batch is split=per_seed, TINY's default: three
# runs, each on its own split, vmapped, each equal to its single run on that split).
@pytest.mark.slow
def test_per_seed_split_batch_trains_each_run_on_its_own_split(per_seed_batch):
    """split=per_seed: each run of a batch trains on its own split (the data is vmapped)."""
    splits = [engine.load_data(c).y_train for c in _PER_SEED]
    assert not np.array_equal(splits[0], splits[1])
    losses = [out.metrics["train_loss"] for out in per_seed_batch]
    assert not np.array_equal(losses[0], losses[1])
    # Seed 0's split is split_seed 0's: the run of split=fixed (to the batch's rounding), the
    # program of test_summary_records_backend_and_matmul_precision[transformer]'s run.
    (fixed,) = engine.train([dataclasses.replace(TINY, seed=0, split="fixed")], progress=False)
    np.testing.assert_allclose(losses[0], fixed.metrics["train_loss"], rtol=2e-5, atol=1e-7)


# The single per_seed run is a program of its own (its data unbatched); the fast sibling is
# test_vmapped_batch_equals_individual_runs (a per_seed batch against its single runs).
@pytest.mark.slow
def test_per_seed_split_batch_equals_individual_runs(per_seed_batch):
    for cfg, out in zip(_PER_SEED, per_seed_batch, strict=True):
        (single,) = engine.train([cfg], progress=False)
        np.testing.assert_allclose(
            out.metrics["train_loss"], single.metrics["train_loss"], rtol=2e-5, atol=1e-7
        )


@pytest.mark.fast_compile  # shapes and an exact no-op update: structural (conftest.py)
def test_warmup_and_eq_output():
    """warmup_steps=W: update t runs at lr * min(t / W, 1), so the first update (lr 0) moves
    nothing; eq_output: the loss sees p + 1 logits, accuracy and margin the p residues. With
    ⊥Grad chained before the optimizer (its state a tuple), the warmup still finds the step
    count. The run is test_variants_train's LaProp run (trained once for both, at
    fast_compile: the first update moving nothing is an exact equality)."""
    cfg = _LAPROP
    norm = _trained(cfg).metrics["param_norm"]
    assert norm[1] == norm[0] and norm[2] != norm[1]
    model = build_model(cfg.model_config())
    params = model.init(jax.random.key(0), jnp.float32)
    assert params["w_u"].shape == (TINY.d_model, TINY.p + 1)
    np.testing.assert_allclose(engine._warmup(jnp.float32(2.0), jnp.int32(1), 4), 0.5)
    assert engine._warmup(jnp.float32(2.0), jnp.int32(9), 4) == 2.0


@pytest.mark.fast_compile  # a draw's scale within 3 %, not a rounding bound (conftest.py)
def test_init_scales():
    """Squared parameter norm at init of the width-64 model: 870 (Nanda), 642 (fan-in), 534 (TL)
    in expectation; one draw sits within a few percent."""
    expected = {"nanda": 865.0, "fan_in": 642.0, "tl": 533.8}
    for init, value in expected.items():
        params = build_model(RunConfig(init=init).model_config()).init(jax.random.key(0), "float32")
        total = sum(np.sum(np.square(np.asarray(v, np.float64))) for v in params.values())
        assert abs(total / value - 1) < 0.03, (init, total)
