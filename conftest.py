"""Strict JAX for every test and doctest (docs/style.md 12).

Two host devices so sharding paths run on a laptop; dtype promotion strict and
rank promotion raising, so an accidental upcast or broadcast is a test failure,
not a silent change of precision. Warnings are errors (pyproject.toml).
"""

import atexit
import os
import shutil
import tempfile

# Must be set before jax initialises its backends.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

# One persistent compilation cache per test session, made by the first process (pytest, or
# xdist's controller) and inherited by its workers, the CLI subprocesses and the Ray workers
# (`grokbench.executors`): a program another process (or another test's closure) already
# compiled is loaded, not compiled again. A cached program is the compiled one, bit for bit.
# Every program, however small: eager tests compile one tiny program per operation, shape and
# dtype, and the second worker then loads them (one suite run each: 5 min 36 s against 5 min
# 58 s with a 0.1 s threshold).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="grokbench-jax-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)

import jax

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
