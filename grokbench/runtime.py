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

import contextlib
import functools
import hashlib
import json
import os
import pathlib
import platform
import re
import sys
import tempfile
from collections.abc import Iterator

# jax is imported inside the functions: `use_all_cores` must run before anything imports it.

__all__ = [
    "CACHE_ENV",
    "FLOAT16_UNSUPPORTED",
    "CompileMeter",
    "compilation_cache",
    "default_cache_dir",
    "float16_compiles",
    "has_fma",
    "is_float16_link_error",
    "isa_level",
    "machine_fingerprint",
    "prune_cache",
    "use_all_cores",
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
    import jax
    import jaxlib

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


def _fingerprint_id(fingerprint: dict[str, str] | None = None) -> str:
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
    import jax
    import jax.numpy as jnp

    try:
        jax.block_until_ready(jax.jit(jnp.exp)(jnp.ones(2, jnp.float16)))
    except Exception as err:  # XlaRuntimeError, whose class has moved between jax versions
        if "Failed to materialize symbols" in str(err):
            return False
        raise
    return True


def use_all_cores() -> None:
    """Split the CPU into one JAX host device per core, unless XLA_FLAGS already chooses.

    Must run before jax is imported. The engine shards a batch of runs over the devices, so
    each core trains its share of the seeds (grokbench.engine.shard_runs).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" in sys.modules or "xla_force_host_platform_device_count" in flags:
        return
    count = f"--xla_force_host_platform_device_count={os.cpu_count() or 1}"
    os.environ["XLA_FLAGS"] = f"{flags} {count}".strip()


CACHE_ENV = "GROKBENCH_COMPILATION_CACHE"
"""Unset: the per-user cache (`default_cache_dir`); a path: that directory; 0, off, false or
no: no persistent cache (each command compiles what it needs, into a temporary cache)."""

_CACHE_MAX_BYTES = 4 << 30
"""The persistent cache's size bound: `prune_cache` removes the oldest programs past it."""


def prune_cache(path: pathlib.Path, max_bytes: int = _CACHE_MAX_BYTES) -> int:
    """Remove the oldest-written files of the cache in `path` until it holds at most
    `max_bytes`; returns the bytes removed.

    Why not jax's own bound (`jax_compilation_cache_max_size`): its eviction reads an
    access-time file beside every entry, which only writers with the bound set write. The
    test session, the CLI's subprocesses and Ray workers write with jax's defaults, and one
    entry without that file makes every later bounded write fail with a FileNotFoundError
    warning (jax 0.10), so nothing new is cached. Pruning here, by write time, at the start
    of a command, works whoever wrote the entries, and a file another process removes
    first is skipped.
    """
    entries = []
    for f in path.iterdir() if path.is_dir() else ():
        try:
            st = f.stat()
        except OSError:
            continue
        if f.is_file() and not f.name.startswith("."):
            entries.append((st.st_mtime_ns, st.st_size, f))
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, f in sorted(entries):
        if total - removed <= max_bytes:
            break
        try:
            f.unlink()
        except OSError:
            continue
        removed += size
    return removed


def default_cache_dir() -> pathlib.Path:
    """$XDG_CACHE_HOME/grokbench/jax/FINGERPRINT (~/.cache/... without XDG_CACHE_HOME): one
    directory per machine fingerprint, so a home directory shared between machines never
    serves a program compiled for another CPU or instruction-set level."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "grokbench" / "jax" / _fingerprint_id()


@contextlib.contextmanager
def compilation_cache() -> Iterator[pathlib.Path | None]:
    """The persistent compilation cache a command compiles into; yields its directory.

    Unless JAX_COMPILATION_CACHE_DIR (or jax's config) already names one, every program
    (however quick to compile) goes to the per-user cache, so a second `grokbench figures
    --quick` on this machine compiles nothing the first compiled. `GROKBENCH_COMPILATION_CACHE`
    names another directory, or turns the persistent cache off: the command then still
    shares programs that differ in data only (fig2-bottom and its a^3+b twin, fig6-sq and
    fig6-cube) through a temporary cache. A loaded program is the compiled one, bit for bit.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cache

    if jax.config.jax_compilation_cache_dir:
        yield pathlib.Path(jax.config.jax_compilation_cache_dir)
        return
    choice = os.environ.get(CACHE_ENV, "").strip()
    off = choice.lower() in ("0", "off", "false", "no")
    min_seconds = jax.config.jax_persistent_cache_min_compile_time_secs
    with contextlib.ExitStack() as stack:
        if off:
            path = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jax-")))
        else:
            path = pathlib.Path(choice) if choice else default_cache_dir()
            path.mkdir(parents=True, exist_ok=True)
            prune_cache(path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        cache.reset_cache()  # forget a "no cache" decided by an earlier compile
        cache.set_cache_dir(str(path))
        try:
            yield path
        finally:
            cache.set_cache_dir(None)
            cache.reset_cache()
            jax.config.update("jax_persistent_cache_min_compile_time_secs", min_seconds)


# What jax reports of each program it compiles (jax.monitoring): tracing, lowering to
# StableHLO, and XLA's compile (or, on a persistent-cache hit, the load that replaces it).
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
_BACKEND = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_retrieval_time_sec"
_totals = {"seconds": 0.0, "programs": 0, "cached": 0}


def _on_duration(event: str, seconds: float, **_: object) -> None:
    if event in _COMPILE_EVENTS:
        _totals["seconds"] += seconds
    if event == _BACKEND:
        _totals["programs"] += 1
    elif event == _CACHE_HIT:
        _totals["cached"] += 1


@functools.cache
def _listen() -> None:
    import jax

    jax.monitoring.register_event_duration_secs_listener(_on_duration)


class CompileMeter:
    """Wall, CPU and compile time of a stretch of work, and how many programs it compiled.

    `seconds` counts tracing, lowering and XLA's compile of every program jax built in the
    stretch (all threads); `programs` the programs, `cached` those a persistent compilation
    cache served instead of compiling. Meters nest and overlap freely: each reads the
    process-wide totals at `start` and `stop`.
    """

    def __init__(self) -> None:
        _listen()
        self.start()

    def start(self) -> CompileMeter:
        """Start (again) from now."""
        import time

        self._t0 = (time.perf_counter(), time.process_time(), dict(_totals))
        return self

    def read(self) -> dict[str, float]:
        """{'wall', 'cpu', 'compile', 'programs', 'cached'} since `start`."""
        import time

        wall, cpu, totals = self._t0
        return {
            "wall": time.perf_counter() - wall,
            "cpu": time.process_time() - cpu,
            "compile": _totals["seconds"] - totals["seconds"],
            "programs": _totals["programs"] - totals["programs"],
            "cached": _totals["cached"] - totals["cached"],
        }

    @staticmethod
    def format(reading: dict[str, float]) -> str:
        """'wall 12.3 s, CPU 20.1 s, compile 8.2 s, 14 programs (3 from the cache)'."""
        cached = f" ({reading['cached']} from the cache)" if reading["cached"] else ""
        return (
            f"wall {reading['wall']:.1f} s, CPU {reading['cpu']:.1f} s, compile "
            f"{reading['compile']:.1f} s, {reading['programs']} programs{cached}"
        )
