"""The examples under examples/ run, at a tiny size, and show what their docstrings say."""

import functools
import importlib.util
import io
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A smoke test (fractions past a cliff, exact zeros, a tenfold gap): conftest.py, _fast_compile.
@pytest.mark.fast_compile
def test_collapse_monitor_shows_collapse_with_optax_and_none_with_numerics():
    monitor = _load("collapse_monitor")
    out = io.StringIO()
    tiny = ["--steps", "60", "--examples", "32", "--width", "32", "--lr", "1e-2"]
    # optax.adam's bias correction mixes int32 and float: run as users do, with JAX's
    # standard promotion rather than the suite's strict one.
    with jax.numpy_dtype_promotion("standard"):
        stats = monitor.main([*tiny, "--log-every", "30"], out=out)
    optax_stats, fixed = stats["optax"], stats["numerics"]
    # Both losses drive the margins past bf16's cliff ...
    assert optax_stats["frac_past_cliff"] > 0.5 and fixed["frac_past_cliff"] > 0.5
    # ... where optax's target gradients are exactly 0 and the fixed ones never are.
    assert optax_stats["frac_zero_target_grad"] > 0.5
    assert fixed["frac_zero_target_grad"] == 0.0
    # Collapsed rows keep their other gradients: the row sums are e^-m-sized, not rounding.
    assert fixed["grad_sum_max"] < optax_stats["grad_sum_max"] / 10
    assert "zero target grad" in out.getvalue()


def test_collapse_monitor_rejects_bad_sizes(capsys):
    monitor = _load("collapse_monitor")
    with pytest.raises(SystemExit) as exit_info:
        monitor.main(["--classes", "1"])
    assert exit_info.value.code == 2
    assert "--classes >= 2" in capsys.readouterr().err


# The student as wide as the teacher: its initialization and held-out loss are the teacher's
# programs, compiled once (a smaller student is the slow test_char_lm_defaults').
TINY_LM = [
    *("--steps 16 --student-steps 8 --batch 4 --context 16 --width 16 --layers 1").split(),
    *("--student-width 16 --student-layers 1 --heads 2 --topk 4 --chars 20000").split(),
    *("--distill-windows 64 --log-every 8 --lr 1e-2").split(),
]


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
def test_char_lm_trains_sharded_and_standard_and_distills(tmp_path):
    lm = _load("char_lm")
    out = io.StringIO()
    # optax's schedules and Adam mix int32 and float: JAX's standard promotion, as users run.
    with jax.numpy_dtype_promotion("standard"):
        result = lm.main([*TINY_LM, "--png", str(tmp_path / "lm.png")], out=out)
    curves = result["curves"]
    for name, curve in curves.items():
        assert np.all(np.isfinite(curve)), name
        # Decreasing-ish: the last steps' mean is below the first step's loss.
        assert np.mean(curve[-4:]) < curve[0] * 0.9, (name, curve)
    for key in ("ours_eval", "standard_eval", "student_eval"):
        assert np.isfinite(result[key]) and 0 < result[key] < np.log(lm.VOCAB), key
    # The monitor logged readings for both teachers, at steps 1, 8 and 16.
    assert [r["step"] for r in result["readings"]["ours"]] == [1, 8, 16]
    assert "past cliff" in out.getvalue() and "summary" in out.getvalue()
    assert (tmp_path / "lm.png").stat().st_size > 10_000


@functools.cache
def _sharding_case():
    """The example module, its arrays and head count, and a batch: shared by both meshes."""
    lm = _load("char_lm")
    params = lm.init(jax.random.key(3), width=16, layers=1, context=16, heads=2)
    batch = jnp.asarray(lm.windows(lm.encode(lm.corpus()[:5000]), 16)[:8])
    return lm, *lm._static(params), batch


@functools.cache
def _loss_and_grad(shape):
    """One jitted program of the loss and its gradient: over a mesh of `shape`, or on one
    device (shape None, compiled once for both meshes)."""
    lm, _, heads, _ = _sharding_case()
    mesh = None if shape is None else lm.make_mesh(shape)

    def loss(arrays, batch):
        params = {**arrays, "heads": heads}
        return (
            lm.unsharded_loss(params, batch) if mesh is None else lm.ours_loss(params, batch, mesh)
        )

    return jax.jit(jax.value_and_grad(loss))


# Both meshes are the slow tier's (8.7 s for the default 1x2 mesh's two programs here). Their
# fast siblings: test_char_lm_trains_sharded_and_standard_and_distills (the example's loss over
# its default 1x2 mesh, trained, the same code) and
# tests/numerics/test_vocab_parallel.py::test_batch_and_vocab_together[linear] (the library's
# sharded linear cross-entropy over a data x vocab mesh against one device, the equality
# checked here).
@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, 2), (2, 1)], ids=["vocab2", "data2"])
def test_char_lm_sharded_loss_equals_unsharded(shape):
    """The example's loss over the mesh (batch and vocabulary sharded at once) equals the
    one-device `linear_cross_entropy` on the same batch and parameters.

    Tolerance: 1 bf16 ulp of the value. Both compute the per-token losses and their mean
    in float32 from the same bf16 hidden states and head; they differ only in how the
    log-sum-exp's sums are grouped (per device and then psum'd, or in one chunk) and in the
    order of the mean's additions, a few float32 ulps (2^-24 relative each), far below the
    final rounding to bf16 (2^-9 relative). The two float32 values therefore round to the
    same bf16 number or, when they straddle a rounding boundary, to neighbours: 1 ulp.

    Each path's value and gradient come from one program (`_loss_and_grad`), and the
    one-device program is compiled once for both meshes."""
    _, arrays, _, batch = _sharding_case()
    sharded, g_sharded = _loss_and_grad(shape)(arrays, batch)
    single, g_single = _loss_and_grad(None)(arrays, batch)
    assert sharded.dtype == single.dtype == jnp.bfloat16
    a, b = float(sharded), float(single)
    ulp = 2.0 ** (np.floor(np.log2(abs(b))) - 7)  # bf16: 8 significant bits
    assert abs(a - b) <= ulp, (a, b)
    # The gradients the two paths hand the optimizer agree too (head and embedding).
    for key in ("head", "embed"):
        np.testing.assert_allclose(
            g_sharded[key],
            g_single[key],
            rtol=0,
            atol=2**-7 * float(jnp.max(jnp.abs(g_single[key]))),
        )


def test_char_lm_rejects_bad_options(capsys):
    lm = _load("char_lm")
    for argv, message in [
        (["--mesh", "3"], "--mesh must be DATAxVOCAB"),
        (["--mesh", "2x2"], "2 devices"),
        (["--width", "30", "--heads", "4"], "multiples of --heads"),
        (["--topk", "0"], "--topk in [1, 128]"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            lm.main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err, argv


@pytest.mark.slow  # the whole example at its defaults: about a minute on a 2-core CPU
def test_char_lm_defaults():
    lm = _load("char_lm")
    with jax.numpy_dtype_promotion("standard"):
        result = lm.main([], out=io.StringIO())
    # Same objective, same start, same batches: the fused sharded loss trains as optax's.
    assert abs(result["ours_eval"] - result["standard_eval"]) < 0.05
    assert result["ours_eval"] < 3.0 and result["student_eval"] < 3.2
    assert result["teacher_params"] > 200_000 > result["student_params"]
