"""Where this process computes: the facts that decide the last bits of every number it prints.

The same program, with the same jax and jaxlib, gives the same bits run after run on one
machine. On another CPU it may not: XLA's CPU backend compiles for the instruction set it
finds (4, 8 or 16 float32 lanes, with or without fused multiply-add), which reorders the
partial sums of a reduction and rounds a product and a sum once or twice, and its matmul
kernels block their loops for the core count and cache sizes. `machine_fingerprint` names
those facts, so a result can say where it was computed and a test can hold numbers to the
bit only where they were recorded (docs/architecture.md, "Reproducibility").
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import platform
import re

import jax
import jax.numpy as jnp
import jaxlib

__all__ = [
    "FLOAT16_UNSUPPORTED",
    "fingerprint_id",
    "float16_compiles",
    "has_fma",
    "is_float16_link_error",
    "isa_level",
    "machine_fingerprint",
]

FLOAT16_UNSUPPORTED = (
    "XLA's CPU backend cannot compile float16 here: at --xla_cpu_max_isa=SSE4_2 (a CPU "
    "without F16C) jaxlib links no half-precision conversions; use bf16, fp32 or fp64, or "
    "a higher instruction-set level"
)
"""The one-line error the CLI prints where float16 cannot be compiled (`float16_compiles`)."""

# XLA CPU's `--xla_cpu_max_isa` levels, lowest first, with the /proc/cpuinfo flags each
# needs (x86-64, then arm64). A level is the host's when it and every level below it are.
_LEVELS = {
    "x86_64": (
        ("SSE4_2", ("sse4_2",)),
        ("AVX", ("avx",)),
        ("AVX2", ("avx2", "fma")),
        ("AVX512", ("avx512f",)),
        ("AVX512_VNNI", ("avx512_vnni",)),
        ("AVX512_BF16", ("avx512_bf16",)),
        ("AMX", ("amx_bf16", "amx_int8")),
        ("AMX_FP16", ("amx_fp16",)),
    ),
    "aarch64": (("NEON", ("asimd",)), ("SVE", ("sve",)), ("SVE2", ("sve2",))),
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


@functools.cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
    """(model name, feature flags) from /proc/cpuinfo; ("", {}) where there is none."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "", frozenset()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    model = (
        fields.get("model name")
        or " ".join(
            fields.get(k, "") for k in ("cpu implementer", "cpu variant", "cpu part")
        ).strip()
    )
    flags = fields.get("flags") or fields.get("features") or ""
    return model, frozenset(flags.split())


def _caches() -> str:
    """The first core's cache sizes, as "L1d 64K L1i 64K L2 1024K L3 32768K" (Linux)."""
    root = pathlib.Path("/sys/devices/system/cpu/cpu0/cache")
    parts = []
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        parts.append(f"L{level}{suffix} {size}")
    return " ".join(parts)


def _cores() -> int:
    """The cores this process may run on (XLA sizes its thread pool by them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def isa_level(xla_flags: str | None = None) -> str:
    """The instruction-set level XLA's CPU backend compiles for here: the host's highest
    `--xla_cpu_max_isa` level, capped by that flag in `xla_flags` (default: $XLA_FLAGS).

    "unknown" where the host's flags cannot be read (no /proc/cpuinfo).
    """
    arch = platform.machine().lower()
    levels = _LEVELS.get(_ALIASES.get(arch, arch), ())
    _, flags = _cpuinfo()
    host = ""
    for name, needs in levels:
        if not all(f in flags for f in needs):
            break
        host = name
    if not host:
        return "unknown"
    flags_text = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    caps = re.findall(r"--xla_cpu_max_isa=(\w+)", flags_text)
    names = [name for name, _ in levels]
    if caps and caps[-1].upper() in names:  # XLA reads the last occurrence of a flag
        return names[min(names.index(caps[-1].upper()), names.index(host))]
    return host


def machine_fingerprint() -> dict[str, str]:
    """What decides the bits of a computation here: backend, jax and jaxlib versions, OS,
    architecture, CPU model, the instruction-set level XLA targets, cores and caches.

    Two processes with the same fingerprint run the same compiled programs, so they agree to
    the bit; with different ones they agree to rounding (the golden tests measure how far).
    """
    model, _ = _cpuinfo()
    backend = jax.default_backend()
    fingerprint = {
        "backend": backend,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu": model or platform.processor() or "unknown",
        "isa": isa_level(),
        "cores": str(_cores()),
        "caches": _caches() or "unknown",
    }
    if backend != "cpu":  # the accelerator's own kernels decide the bits there
        fingerprint["device"] = jax.devices()[0].device_kind
    return fingerprint


def fingerprint_id(fingerprint: dict[str, str] | None = None) -> str:
    """A short stable name of `fingerprint` (default: this machine's), for file and dict keys."""
    fingerprint = machine_fingerprint() if fingerprint is None else fingerprint
    text = json.dumps(fingerprint, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def has_fma() -> bool:
    """Whether XLA targets fused multiply-add here (x86-64 from AVX2, every arm64 CPU).

    With it a product and a sum round once, so two formulas for the same softmax round
    apart; without it (SSE4_2, AVX) they often agree to the bit, and the standard
    soft-target CE's residual at student == teacher (fix paper Sec. 3) mostly vanishes.
    """
    level = isa_level()
    names = [name for name, _ in _LEVELS["x86_64"]]
    if level in names:
        return names.index(level) >= names.index("AVX2")
    return level != "unknown"


def is_float16_link_error(err: BaseException) -> bool:
    """Whether `err` is XLA failing to link a float16 program (see `float16_compiles`)."""
    return "Failed to materialize symbols" in str(err) and not float16_compiles()


def float16_compiles() -> bool:
    """Whether this XLA CPU target runs a float16 program: jaxlib 0.10.2 at
    --xla_cpu_max_isa=SSE4_2 fails to link the half-precision conversions (INTERNAL:
    Failed to materialize symbols ... __extendhfsf2, __truncsfhf2). Probed once."""
    return _float16_compiles()


@functools.cache
def _float16_compiles() -> bool:
    try:
        jax.block_until_ready(jax.jit(jnp.exp)(jnp.ones(2, jnp.float16)))
    except Exception as err:  # XlaRuntimeError, whose class has moved between jax versions
        if "Failed to materialize symbols" in str(err):
            return False
        raise
    return True
