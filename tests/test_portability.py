"""The bit-sensitive tests again, at another instruction-set level of XLA's CPU backend.

A number held to the bit holds only on the CPU that made it. The golden tests hold their
values to the bit on recorded machine fingerprints and to a stated tolerance elsewhere
(tests/grokbench/golden.py); the tests marked `bitwise` compare runs to each other
(sharded against unsharded, resumed against uninterrupted). Here they run once more in a
subprocess with `--xla_cpu_max_isa` set to another level, which XLA compiles as a CPU of
that level would: one CI machine then checks that none of them depends on its own bits.
"""

import os
import platform
import re
import subprocess
import sys

import jax
import pytest

from grokbench import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def other_level(current: str) -> str | None:
    """SSE4_2 (the lowest x86-64 level XLA targets), or AVX where that is the current one."""
    if current == "SSE4_2":
        return "AVX" if runtime.isa_level("--xla_cpu_max_isa=AVX") == "AVX" else None
    return "SSE4_2"


def test_other_level_is_lower_and_available():
    assert other_level("AVX2") == "SSE4_2"
    assert other_level("AVX512") == "SSE4_2"
    assert other_level("SSE4_2") in ("AVX", None)


# The slow tier (`pytest -m slow`, run by .ci/run after the fast one): 1.5 minutes of the
# fast tier's 5 on two cores. Its fast sibling is every `bitwise` test, run natively there.
@pytest.mark.slow
@pytest.mark.first  # minutes: the other worker runs the rest of the suite meanwhile
@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or jax.default_backend() != "cpu",
    reason="--xla_cpu_max_isa levels below the host's exist on x86-64's XLA CPU backend",
)
def test_bitwise_tests_pass_at_another_instruction_set_level():
    level = other_level(runtime.isa_level())
    if level is None:
        pytest.skip("this CPU has no other instruction-set level to compile for")
    flags = re.sub(r"--xla_cpu_max_isa=\S+", "", os.environ.get("XLA_FLAGS", ""))
    # conftest.py appends its own device count again in the subprocess.
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", flags)
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_cpu_max_isa={level}".strip()}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # its own cache, made by its conftest
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
    command += ["-m", "bitwise", "tests"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
    assert result.returncode == 0, f"at --xla_cpu_max_isa={level}:\n{tail}"
    assert re.search(r"\d+ passed", tail), tail
