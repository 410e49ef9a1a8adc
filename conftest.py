"""Strict JAX for every test and doctest (docs/style.md 12).

Two host devices so sharding paths run on a laptop; dtype promotion strict and
rank promotion raising, so an accidental upcast or broadcast is a test failure,
not a silent change of precision. Warnings are errors (pyproject.toml).
"""

import atexit
import contextlib
import os
import pathlib
import shutil
import tempfile
import time

# Must be set before jax initialises its backends.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

# One persistent compilation cache for the test session, shared by its workers, the CLI
# subprocesses and the Ray workers (`grokbench.executors`): the per-user cache of
# `grokbench.runtime.compilation_cache`, so a second run on this machine compiles nothing the
# first compiled (GROKBENCH_COMPILATION_CACHE: another directory, or off for one temporary
# cache per session). A cached program is the compiled one, bit for bit. Every program is
# kept, however small: eager tests compile one tiny program per operation, shape and dtype,
# and the second worker then loads them.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    from grokbench import runtime

    choice = os.environ.get(runtime.CACHE_ENV, "").strip()
    if choice.lower() in ("0", "off", "false", "no"):
        cache_dir = tempfile.mkdtemp(prefix="grokbench-jax-cache-")
        atexit.register(shutil.rmtree, cache_dir, ignore_errors=True)
    else:
        cache_dir = str(pathlib.Path(choice) if choice else runtime.default_cache_dir())
        pathlib.Path(cache_dir).mkdir(parents=True, exist_ok=True)
        runtime.prune_cache(pathlib.Path(cache_dir))
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax

# Read again: the fingerprint above may have imported jax before the variables were set.
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
    "jax_persistent_cache_min_compile_time_secs",
    float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


import pytest  # noqa: E402  (after the environment above, which must precede jax's backends)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that failed only because XLA cannot link float16 on this CPU target (jaxlib at
    --xla_cpu_max_isa=SSE4_2: no F16C) is reported skipped, with that reason, not failed."""
    report = yield
    # The error, or the CLI's line for it in the captured output.
    text = str(report.longrepr) + "".join(c for _, c in report.sections) if report.failed else ""
    if "Failed to materialize symbols" in text or "cannot compile float16" in text:
        from grokbench.runtime import FLOAT16_UNSUPPORTED, float16_compiles

        if not float16_compiles():
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1], f"Skipped: {FLOAT16_UNSUPPORTED}")
    return report


@pytest.fixture(autouse=True)
def _fast_compile(request):
    """`@pytest.mark.fast_compile`: the test's programs are compiled with most of XLA's
    optimizations off (`jax_disable_most_optimizations`: backend optimization level 0, no
    expensive LLVM passes) and XLA CPU's older fusion emitters (`FAST_COMPILE_OPTIONS`): about a
    third less compile time for the programs the library builds inside (the engine's, the
    quantization lab's, an example's) from the level, and about half of what is left from the
    emitters. The traced programs, the library's code paths, are the ones training runs; only
    the machine code differs, so it is for smoke tests (finite values, a loss that moves, fields
    and shapes, two paths that must agree with each other) and structural properties (exact
    zeros), never for a test whose bound is a rounding-error model or that holds numbers to the
    bit (tests/tasks/_compile.py's FAST_COMPILE is the same for one program)."""
    if request.node.get_closest_marker("fast_compile") is None:
        yield
        return
    with fast_compile():
        yield


# The optimization flag is not part of jax's in-memory cache keys; this user context is
# (`jax.make_user_context`: its value keys jax's tracing, lowering and compilation caches),
# so a program compiled under the flag is never served outside it, and the programs every
# other test compiled stay cached across a fast_compile test. The persistent cache keys on
# the compile options, which the flag changes, and keeps them apart too.
_FAST_COMPILE_KEY = jax.make_user_context(default_value=False)

# XLA options added to every program a fast_compile test compiles: XLA CPU's older fusion
# emitters compile these programs (already at optimization level 0) in 0.46 of the time
# (0.44-0.49, 145 such programs of seven fast-tier files, `benchmarks/compile_options.py`;
# outputs moved in 15 of them, as level 0 moves them: other machine code than users run).
# jax has no public default for compile options, so `fast_compile` adds them in jax's private
# `compiler.get_compile_options` (jax is pinned); a program's own options win.
FAST_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@contextlib.contextmanager
def fast_compile():
    """Most of XLA's optimizations off inside, and `FAST_COMPILE_OPTIONS` added to every
    program's compile options, with a cache key of its own (above); on
    leaving, the library's registered caches are emptied (`tasks.clear_compiled_caches`:
    its program builders and the values measured with them, such as figures' analytic
    measurements, which were computed by programs compiled under the flag)."""
    from jax._src import compiler

    from tasks import clear_compiled_caches

    get_compile_options = compiler.get_compile_options

    def with_fast_compile_options(*args, env_options_overrides=None, **kwargs):
        options = {**FAST_COMPILE_OPTIONS, **(env_options_overrides or {})}
        return get_compile_options(*args, env_options_overrides=options, **kwargs)

    with _FAST_COMPILE_KEY(True):
        jax.config.update("jax_disable_most_optimizations", True)
        compiler.get_compile_options = with_fast_compile_options
        try:
            yield
        finally:
            compiler.get_compile_options = get_compile_options
            jax.config.update("jax_disable_most_optimizations", False)
            clear_compiled_caches()


def pytest_collection_modifyitems(items):
    """Tests marked `first` run first: with `pytest -n 2` a test of minutes started last would
    leave one worker idle while the other finishes it. Within its file a `fast_compile` test
    runs after the rest (the sort is stable, and `--dist loadfile` keeps a file's tests in
    collection order on one worker): its teardown empties the library's registered caches
    (`fast_compile`), which the file's other tests would otherwise build again."""
    items.sort(key=lambda item: item.get_closest_marker("first") is None)
    position = {item.path: i for i, item in reversed(list(enumerate(items)))}
    items.sort(
        key=lambda item: (position[item.path], item.get_closest_marker("fast_compile") is not None)
    )


# GROKBENCH_COMPILE_REPORT=FILE: one JSON line per test (its file, wall, CPU and compile
# seconds, programs compiled and loaded, its worker and end time), appended by every worker;
# benchmarks/suite_times.py sums them per file and per worker (docs/benchmarks.md, "The build
# and the test suite").
_COMPILE_REPORT = os.environ.get("GROKBENCH_COMPILE_REPORT")

# GROKBENCH_PROGRAM_LOG=FILE: which tests use each compiled program. jax's in-memory caches are
# emptied before every test, so each program a test uses goes through the persistent cache: a
# line per lookup (its test, the program's cache key, hit or not) and per compile (its
# seconds, the cache write included; programs that CLI subprocesses compile are not logged).
# `benchmarks/suite_times.py --programs FILE` then says how much compile each file
# or test alone needs: what moving it to the slow tier would save (docs/studies/
# build-and-suite-timing.md, the thirteenth pass). The hooks are jax's private
# `_cache_read` and `_compile_and_write_cache` (jax is pinned); a logged run compiles what a
# plain one does, but its times are not the suite's (every test reloads its programs).
_PROGRAM_LOG = os.environ.get("GROKBENCH_PROGRAM_LOG")
_CURRENT_TEST = [None]


def _log_programs(path: str) -> None:
    import json

    from jax._src import compiler

    read, compile_and_write = compiler._cache_read, compiler._compile_and_write_cache

    def log(**fields) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": _CURRENT_TEST[0], **fields}) + "\n")

    def logged_read(module_name, cache_key, *args, **kwargs):
        out = read(module_name, cache_key, *args, **kwargs)
        log(event="read", program=module_name, key=cache_key, hit=out[0] is not None)
        return out

    def logged_compile(*args):
        start = time.perf_counter()
        out = compile_and_write(*args)
        log(event="compile", program=args[-2], key=args[-1], seconds=time.perf_counter() - start)
        return out

    compiler._cache_read, compiler._compile_and_write_cache = logged_read, logged_compile


if _PROGRAM_LOG:
    _log_programs(_PROGRAM_LOG)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _PROGRAM_LOG:
        _CURRENT_TEST[0] = item.nodeid
        jax.clear_caches()
    if not _COMPILE_REPORT:
        return (yield)
    import json

    from grokbench.runtime import CompileMeter

    meter = CompileMeter()
    result = yield
    record = {"file": item.location[0], "test": item.nodeid, **meter.read()}
    # Which worker ran it and when it ended: how long each worker was busy and idle.
    record |= {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "end": time.time()}
    with open(_COMPILE_REPORT, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return result
