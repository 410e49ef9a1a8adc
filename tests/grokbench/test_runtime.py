"""grokbench.runtime: the machine fingerprint and the instruction-set level XLA targets."""

import os
import pathlib
import platform
import subprocess
import sys

import pytest

from grokbench import runtime

X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_fingerprint_names_what_decides_the_bits():
    fingerprint = runtime.machine_fingerprint()
    for key in ("backend", "jax", "jaxlib", "machine", "cpu", "isa", "cores", "caches"):
        assert fingerprint[key], key
    assert runtime._fingerprint_id(fingerprint) == runtime._fingerprint_id()
    for key in fingerprint:  # every field is part of the id
        assert runtime._fingerprint_id({**fingerprint, key: "other"}) != runtime._fingerprint_id()


@pytest.mark.skipif(not X86, reason="x86-64's --xla_cpu_max_isa levels")
def test_isa_level_is_the_host_level_capped_by_the_flag():
    host = runtime.isa_level("")
    assert host in ("SSE4_2", "AVX", "AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX")
    assert runtime.isa_level("--xla_cpu_max_isa=SSE4_2") == "SSE4_2"
    assert runtime.isa_level("--xla_cpu_max_isa=sse4_2") == "SSE4_2"
    assert runtime.isa_level("--xla_cpu_max_isa=AMX_FP16") == host  # a cap above the host
    assert runtime.isa_level("--xla_cpu_max_isa=AVX --xla_cpu_max_isa=SSE4_2") == "SSE4_2"
    assert runtime.isa_level("--xla_cpu_max_isa=bogus") == host


@pytest.mark.skipif(not X86, reason="x86-64's --xla_cpu_max_isa levels")
def test_fused_multiply_add_from_avx2(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX")
    assert not runtime.has_fma()
    if runtime.isa_level("") not in ("SSE4_2", "AVX"):
        monkeypatch.setenv("XLA_FLAGS", "")
        assert runtime.has_fma()


def test_float16_compiles_at_this_level():
    assert runtime.float16_compiles() == (runtime.isa_level() != "SSE4_2")


_COMPILE_TWICE = """
import jax, jax.numpy as jnp
from grokbench import runtime
meter = runtime.CompileMeter()
with runtime.compilation_cache() as path:
    jax.block_until_ready(jax.jit(lambda x: jnp.tanh(x) * 3.0 + 1.0)(jnp.ones(7)))
r = meter.read()
print(path, r["programs"], r["cached"])
"""


def _compile_in_a_new_process(tmp_path, cache: str) -> tuple[str, int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update({runtime.CACHE_ENV: cache, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    out = subprocess.run(
        [sys.executable, "-c", _COMPILE_TWICE], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    path, programs, cached = out.stdout.split()
    return path, int(programs), int(cached)


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    """The per-user cache (here under XDG_CACHE_HOME), one directory per machine fingerprint;
    GROKBENCH_COMPILATION_CACHE=off: nothing persists between processes."""
    path, programs, cached = _compile_in_a_new_process(tmp_path, "")
    assert pathlib.Path(path).parent == tmp_path / "xdg" / "grokbench" / "jax"
    assert pathlib.Path(path).name == runtime._fingerprint_id() and programs >= 1 and cached == 0
    assert _compile_in_a_new_process(tmp_path, "") == (path, programs, programs)
    for _ in range(2):
        path, programs, cached = _compile_in_a_new_process(tmp_path, "off")
        assert cached == 0 and not pathlib.Path(path).exists()


def test_a_cache_written_by_other_writers_still_takes_new_programs(tmp_path):
    """An entry written without jax's access-time file (the test session, CLI subprocesses
    and Ray workers write with jax's defaults) must not stop a command caching: with jax's
    own size bound every later write failed on it (`runtime.prune_cache` says why)."""
    cache = tmp_path / "shared"
    cache.mkdir()
    (cache / "jit_other-0123456789abcdef-cache").write_bytes(b"\0" * 64)
    path, programs, cached = _compile_in_a_new_process(tmp_path, str(cache))
    assert programs >= 1 and cached == 0
    assert _compile_in_a_new_process(tmp_path, str(cache)) == (path, programs, programs)


def test_prune_cache_removes_the_oldest_written_first(tmp_path):
    for i, name in enumerate(["old-cache", "mid-cache", "new-cache"]):
        f = tmp_path / name
        f.write_bytes(b"\0" * 100)
        os.utime(f, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    assert runtime.prune_cache(tmp_path, max_bytes=250) == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid-cache", "new-cache"]
    assert runtime.prune_cache(tmp_path, max_bytes=250) == 0
    assert runtime.prune_cache(tmp_path / "missing") == 0
