"""The suite's own machinery (conftest.py, tests/conftest.py): the fast_compile marker and
the fast_dtypes tiers."""

import json
import os
import pathlib
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import conftest
from grokbench.runtime import CompileMeter
from tests.tiers import BF16_AND_F32
from tests.tolerances import DTYPES, F16, F64


@jax.jit
def _double(x):
    return x * 2.0


def _overrides() -> list:
    from jax._src import compiler

    return compiler.get_compile_options(1, 1).env_option_overrides


@pytest.mark.fast_compile
def test_fast_compile_turns_most_optimizations_off_for_the_test():
    assert jax.config.values["jax_disable_most_optimizations"]
    assert ("xla_cpu_use_fusion_emitters", False) in _overrides()  # conftest.FAST_COMPILE_OPTIONS
    assert float(_double(jnp.ones(3, jnp.float32))[0]) == 2.0  # compiled under the flag


def test_a_program_compiled_under_fast_compile_is_not_served_after_it():
    with conftest.fast_compile():  # what the fixture does around a fast_compile test
        assert jax.config.values["jax_disable_most_optimizations"]
        _double(jnp.ones(5, jnp.float32)).block_until_ready()
    assert not jax.config.values["jax_disable_most_optimizations"] and not _overrides()
    meter = CompileMeter()
    _double(jnp.ones(5, jnp.float32)).block_until_ready()
    reading = meter.read()
    assert reading["programs"] + reading["cached"] >= 1  # compiled (or loaded) again


class _Item:
    """What conftest.pytest_collection_modifyitems reads of a collected test."""

    def __init__(self, name: str, path: str, *marks: str):
        self.name, self.path, self.marks = name, path, marks

    def get_closest_marker(self, mark: str):
        return mark if mark in self.marks else None


def test_fast_compile_tests_run_last_in_their_file(request):
    # conftest.pytest_collection_modifyitems: their teardown empties the registered caches.
    items = [
        _Item("a1", "a.py", "fast_compile"),
        _Item("a2", "a.py"),
        _Item("a3", "a.py", "fast_compile"),
        _Item("a4", "a.py"),
        _Item("b1", "b.py"),
        _Item("b2", "b.py", "first"),
        _Item("c1", "c.py"),
    ]
    conftest.pytest_collection_modifyitems(items)
    # b.py holds a `first` test, so its file goes first; each file's fast_compile tests last.
    assert [item.name for item in items] == ["b2", "b1", "a2", "a4", "a1", "a3", "c1"]
    # And this session's order (every file's, when the whole suite is collected).
    by_file: dict = {}
    for item in request.session.items:
        by_file.setdefault(item.path, []).append(
            item.get_closest_marker("fast_compile") is not None
        )
    assert all(flags == sorted(flags) for flags in by_file.values())


@BF16_AND_F32
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fast_dtypes_marks_the_other_dtypes_slow(request, dtype):
    slow = request.node.get_closest_marker("slow") is not None
    assert slow == (np.dtype(dtype) in (np.dtype(F16), np.dtype(F64)))


def test_sole_users_charges_a_program_to_its_one_user_only():
    from benchmarks import suite_times

    lines = [
        {"test": "a.py::t1", "event": "read", "key": "k1", "hit": False},
        {"test": "a.py::t1", "event": "compile", "key": "k1", "seconds": 2.0},
        {"test": "b.py::t2", "event": "read", "key": "k1", "hit": True},
        {"test": "a.py::t3", "event": "read", "key": "k2", "hit": False},
        {"test": "a.py::t3", "event": "compile", "key": "k2", "seconds": 0.5},
        {"test": "a.py::t1", "event": "read", "key": "k3", "hit": False},
        {"test": "a.py::t1", "event": "compile", "key": "k3", "seconds": 1.0},
        {"test": "a.py::t3", "event": "read", "key": "k3", "hit": True},
    ]
    by_test, totals = suite_times.sole_users(lines)
    assert by_test == {"a.py::t3": 0.5} and totals == {"compile": 3.5, "shared": 3.0}
    by_file, _ = suite_times.sole_users(lines, key=lambda t: t.split("::")[0])
    assert by_file == {"a.py": 1.5}  # k2 and k3; k1 is b.py's too


# slow: a pytest subprocess (about 6 s); fast sibling: the test above (the attribution on
# fabricated log lines).
@pytest.mark.slow
def test_the_program_log_says_which_tests_alone_need_a_program(tmp_path):
    """GROKBENCH_PROGRAM_LOG (the root conftest, loaded as a plugin) in a pytest run of three
    tests on an empty cache: two share a program, one has its own; benchmarks/suite_times.py
    --programs charges the shared one to neither of its tests and the other to its test."""
    from benchmarks import suite_times

    (tmp_path / "test_three.py").write_text(
        "import jax, jax.numpy as jnp\n"
        "double = jax.jit(lambda x: 2 * x)\n"
        "def test_shared_a():\n    assert double(jnp.ones(3))[0] == 2\n"
        "def test_shared_b():\n    assert double(jnp.ones(3))[1] == 2\n"
        "def test_own():\n    assert jax.jit(lambda x: x + 7)(jnp.ones(5))[0] == 8\n"
    )
    log = tmp_path / "programs.jsonl"
    root = pathlib.Path(conftest.__file__).resolve().parent
    env = {
        **os.environ,
        "GROKBENCH_PROGRAM_LOG": str(log),
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),  # empty: each program compiles
        "PYTHONPATH": str(root),
    }
    env.pop("GROKBENCH_COMPILE_REPORT", None)
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest"]
    subprocess.run(
        [*run, "-n", "0", "-c", str(root / "pyproject.toml"), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    used = {(r["test"].split("::")[-1], r["program"]) for r in lines if r["event"] == "read"}
    assert {("test_shared_a", "jit__lambda"), ("test_shared_b", "jit__lambda")} <= used
    by_test, totals = suite_times.sole_users(lines, key=lambda t: t.split("::")[-1])
    assert "test_own" in by_test and "test_shared_a" not in by_test
    assert 0 < by_test["test_own"] <= totals["compile"] and totals["shared"] > 0


# --- benchmarks/compile_options.py: XLA options replayed on the suite's programs ----------------


def _saved_programs(out: pathlib.Path, monkeypatch) -> list[pathlib.Path]:
    """Two programs compiled inside `saving`; every persistent-cache lookup misses, so both
    reach XLA even where an earlier run cached them."""
    from jax._src import compiler

    from benchmarks import compile_options

    monkeypatch.setattr(compiler, "_cache_read", lambda *args, **kwargs: (None, None))
    x = np.linspace(-3.0, 3.0, 64, dtype=np.float32)
    rows, labels = np.ones((4, 7), jnp.bfloat16), np.arange(4, dtype=np.int32)
    with compile_options.saving(out):
        jax.jit(lambda x: jnp.maximum(jnp.log(x), 0.0)).lower(x).compile()
        # with options of its own, as the engine's programs have (grokbench.config.xla_options)
        take = jax.jit(
            lambda z, i: jnp.take_along_axis(z, i[:, None], 1) * 2,
            compiler_options={"xla_cpu_enable_fast_min_max": True},
        )
        take.lower(rows, labels).compile()
    return sorted(out.glob("*.pkl"))


def test_compile_options_replays_saved_programs_and_finds_moved_bits(tmp_path, monkeypatch):
    from benchmarks import compile_options

    paths = _saved_programs(tmp_path, monkeypatch)
    assert len(paths) == 2
    # Fast math that need not honour NaNs: the log of the negative half feeds a maximum
    # whose NaNs XLA may then drop, so the first program's outputs move (measured on AMD
    # EPYC natively and at --xla_cpu_max_isa AVX2 and SSE4_2). The control and the stripped
    # locations compile the same programs, bit for bit.
    no_nans = "xla_cpu_enable_fast_math=true,xla_cpu_fast_math_honor_nans=false"
    result = compile_options.replay(paths, [compile_options.STRIP, no_nans], seed=1, progress=False)
    assert {v: len(r["seconds"]) for v, r in result.items()} == dict.fromkeys(result, 2)
    for variant in (compile_options.CONTROL, compile_options.STRIP, no_nans):
        assert result[variant]["run"] == 2
    assert result[compile_options.CONTROL]["differ"] == 0
    assert result[compile_options.STRIP]["differ"] == 0
    assert result[no_nans]["differ"] == 1 and result[no_nans]["names"] == ["jit__lambda"]
    # A variant adds its options to a program's own: it does not replace them.
    own = [compile_options._build(pickle.loads(p.read_bytes()), no_nans)[2] for p in paths]
    fewer, more = sorted((options.env_option_overrides for options in own), key=len)
    assert len(fewer) == 2 and more[0] == ("xla_cpu_enable_fast_min_max", True) and len(more) == 3
    table = compile_options.markdown(result)
    assert table.count("\n| ") == 5 and "| default |" in table  # header, rule, 4 variants
    assert f"{no_nans}: outputs differ in jit__lambda" in table


def test_same_bits_tells_one_ulp_and_any_nan_from_a_number():
    from benchmarks.compile_options import same_bits

    x = np.array([1.0, -0.0, np.nan], np.float32)
    assert same_bits(x, x.copy())
    assert not same_bits(x, np.array([np.nextafter(np.float32(1), np.float32(2)), -0.0, np.nan]))
    assert not same_bits(x, np.array([1.0, 0.0, np.nan], np.float32))  # the sign of zero
    quiet = np.array([0x7FC00001], np.uint32).view(np.float32)[0]  # another NaN payload
    assert same_bits(x, np.array([1.0, -0.0, quiet], np.float32))
    assert not same_bits(x, np.array([1.0, -0.0, 5.0], np.float32))
    b = np.array(1.0, jnp.bfloat16)  # 0-d, bfloat16
    assert same_bits(b, b.copy()) and not same_bits(b, np.array(1.0078125, jnp.bfloat16))
    assert not same_bits(x, x.astype(np.float64)) and not same_bits(x, x[:2])
    assert same_bits(np.arange(3), np.arange(3)) and not same_bits(np.arange(3), np.arange(1, 4))


def test_compile_options_refuses_a_variant_that_is_not_key_value(tmp_path, capsys):
    from benchmarks import compile_options

    for bad in ("xla_cpu_enable_fast_math", "=1", "a=1,b"):
        with pytest.raises(SystemExit):
            compile_options.main(["replay", str(tmp_path), bad])
        assert "KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compile_options.main(["replay", str(tmp_path)])
    assert "no captured programs" in capsys.readouterr().err
