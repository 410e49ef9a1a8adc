"""grokbench.runtime: the machine fingerprint and the instruction-set level XLA targets."""

import platform

import pytest

from grokbench import runtime

X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_fingerprint_names_what_decides_the_bits():
    fingerprint = runtime.machine_fingerprint()
    for key in ("backend", "jax", "jaxlib", "machine", "cpu", "isa", "cores", "caches"):
        assert fingerprint[key], key
    assert runtime.fingerprint_id(fingerprint) == runtime.fingerprint_id()
    for key in fingerprint:  # every field is part of the id
        assert runtime.fingerprint_id({**fingerprint, key: "other"}) != runtime.fingerprint_id()


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
