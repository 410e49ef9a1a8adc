"""What an XLA compile option would save on the test suite's own programs, and whether it
moves a bit of their outputs.

    python benchmarks/compile_options.py capture /tmp/programs -- tests/numerics/test_dropin.py
    python benchmarks/compile_options.py replay --sample 250 /tmp/programs \\
        xla_cpu_parallel_codegen_split_count=1 xla_backend_optimization_level=0

`capture` runs pytest with the given arguments in this process (one worker, an empty
compilation cache) and saves every program jax hands to XLA: its StableHLO bytecode and its
compile options. `replay` compiles a seeded sample of them with the captured options, again
with the same options (a control: the method's own noise), and with each variant given (one
or more XLA debug options, `KEY=VALUE[,KEY=VALUE...]`) added, in a fresh random order per
program, so the machine's drift falls on every variant alike. It then runs each
single-device program on the same seeded inputs and compares every output bit for bit with
the default's (the inputs are random: a program whose loop count comes from its inputs'
values could run long on them; none of the study's 400 did). The table gives each variant's
compile seconds summed over the sample, their ratio to the default's with a 95 % interval
(a bootstrap over programs), and how many programs' outputs differ.

`strip-locations` as an option compiles the module without its source locations (what
`jax_include_full_tracebacks_in_locations=False` shortens).

Why this and not two runs of the suite: the fast tier's wall moves by up to 30 % within an
hour on this project's 2-core machine, so a pair of runs cannot resolve an option worth a
few percent (docs/studies/build-and-suite-timing.md); compiling the same program under both
variants back to back can. The hook is jax's private `compiler.backend_compile_and_load`
(jax is pinned, as for the root conftest's program log).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import pickle
import random
import sys
import time
from collections.abc import Iterator, Sequence

import ml_dtypes
import numpy as np

CONTROL = "default, again"
STRIP = "strip-locations"


@contextlib.contextmanager
def saving(out_dir: pathlib.Path) -> Iterator[None]:
    """Inside, every program jax compiles is also saved to `out_dir` (programs with host
    callbacks are compiled but not saved: a replay could not run them)."""
    from jax._src import compiler

    out_dir.mkdir(parents=True, exist_ok=True)
    original = compiler.backend_compile_and_load
    count = [len(list(out_dir.glob("*.pkl")))]

    def compile_and_save(backend, module, executable_devices, options, host_callbacks):
        if not host_callbacks:
            save(
                out_dir / f"{os.getpid()}-{count[0]:05d}.pkl",
                module,
                options,
                len(executable_devices),
            )
            count[0] += 1
        return original(backend, module, executable_devices, options, host_callbacks)

    compiler.backend_compile_and_load = compile_and_save
    try:
        yield
    finally:
        compiler.backend_compile_and_load = original


def save(path: pathlib.Path, module, options, devices: int) -> None:
    """One program: the module's bytecode, the serialized compile options, its device count."""
    import io

    from jax._src.lib.mlir import ir

    bytecode = io.BytesIO()
    module.operation.write_bytecode(file=bytecode)
    name = ir.StringAttr(module.operation.attributes["sym_name"]).value
    record = {
        "name": name,
        "module": bytecode.getvalue(),
        "options": options.SerializeAsString(),
        "devices": devices,
    }
    path.write_bytes(pickle.dumps(record))


def capture(out_dir: pathlib.Path, pytest_args: Sequence[str]) -> int:
    """pytest in this process on an empty compilation cache, every program saved."""
    import pytest

    from grokbench import runtime

    os.environ[runtime.CACHE_ENV] = "off"  # the root conftest: a new, empty cache
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    with saving(out_dir):
        return pytest.main(["-n", "0", "-p", "no:cacheprovider", *pytest_args])


def _value(text: str) -> bool | int | str:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def _pairs(variant: str) -> list[tuple[str, bool | int | str]]:
    """`KEY=VALUE[,KEY=VALUE...]` as XLA option pairs; ValueError where an item is not one."""
    pairs = []
    for item in variant.split(","):
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{variant!r}: a variant is KEY=VALUE[,KEY=VALUE...] or {STRIP}")
        pairs.append((key, _value(text)))
    return pairs


def _build(record: dict, variant: str):
    """(MLIR context, module, compile options) of one program under one variant."""
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir, passmanager

    context = mlir.make_ir_context()
    with context:
        module = ir.Module.parse(record["module"])
        if variant == STRIP:
            passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)
    options = xc.CompileOptions.ParseFromString(record["options"])
    if variant not in ("default", CONTROL, STRIP):  # KEY=VALUE[,KEY=VALUE...]
        # added to a program's own compiler_options (the engine's, a test's), which stay
        options.env_option_overrides = [*options.env_option_overrides, *_pairs(variant)]
    return context, module, options


_DTYPES = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "ui8": np.uint8,
    "ui16": np.uint16,
    "ui32": np.uint32,
    "ui64": np.uint64,
    "bf16": ml_dtypes.bfloat16,
    "f8E4M3FN": ml_dtypes.float8_e4m3fn,
    "f8E5M2": ml_dtypes.float8_e5m2,
}


def inputs(module, seed: int) -> list[np.ndarray] | None:
    """Seeded arguments for the module's `main`: floats standard normal, integers in [0, 3)
    (valid as indices and labels of any axis of 3 or more), booleans fair; None where an
    argument is not a tensor of a type above (or of bfloat16 / float8)."""
    from jax._src.lib.mlir import ir

    rng = np.random.default_rng(seed)
    with module.context:
        main = next(
            op
            for op in module.body.operations
            if ir.StringAttr(op.attributes["sym_name"]).value == "main"
        )
        kind = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        out = []
        for arg in kind.inputs:
            try:
                tensor = ir.RankedTensorType(arg)
            except ValueError:  # a token or an unranked tensor
                return None
            dtype = _DTYPES.get(str(tensor.element_type))
            if dtype is None:
                return None
            shape = tuple(tensor.shape)
            if dtype == np.bool_:
                out.append(rng.random(shape) < 0.5)
            elif np.issubdtype(dtype, np.integer):
                out.append(rng.integers(0, 3, shape).astype(dtype))
            else:
                out.append(rng.standard_normal(shape).astype(dtype))
        return out


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN in the same place."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind not in "biu":  # floating, including bfloat16 and float8, and complex
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if not np.array_equal(nan_a, nan_b):
            return False
        a, b = np.where(nan_a, 0, a).astype(a.dtype), np.where(nan_b, 0, b).astype(b.dtype)
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


def _execute(executable, args: Sequence[np.ndarray], device) -> list[np.ndarray]:
    """One run on fresh copies of the arguments (a program may donate them); 64-bit
    arguments stay 64-bit."""
    import jax

    with jax.enable_x64(True):
        placed = [jax.device_put(a, device) for a in args]
    return [np.asarray(out) for out in executable.execute(placed)]


def replay(
    paths: Sequence[pathlib.Path], options: Sequence[str], seed: int = 0, progress: bool = True
) -> dict[str, dict]:
    """Per variant: compile seconds per program, and the programs run and those whose outputs
    differ from the default's."""
    from jax._src import xla_bridge
    from jax._src.lib import xla_client as xc

    backend = xla_bridge.get_backend("cpu")
    variants = ["default", CONTROL, *options]
    result = {v: {"seconds": [], "run": 0, "differ": 0, "names": []} for v in variants}
    order = random.Random(seed)
    for i, path in enumerate(paths):
        record = pickle.loads(path.read_bytes())
        if record["devices"] > len(backend.devices()):
            raise ValueError(
                f"{path.name} needs {record['devices']} devices, this process has "
                f"{len(backend.devices())} (XLA_FLAGS=--xla_force_host_platform_device_count)"
            )
        devices = backend.devices()[: record["devices"]]
        shuffled = variants[:]
        order.shuffle(shuffled)
        compiled, modules = {}, {}
        for variant in shuffled:
            context, modules[variant], compile_options = _build(record, variant)
            start = time.perf_counter()
            with context:
                compiled[variant] = backend.compile_and_load(
                    modules[variant], xc.DeviceList(tuple(devices)), compile_options
                )
            result[variant]["seconds"].append(time.perf_counter() - start)
        args = inputs(modules["default"], seed) if len(devices) == 1 else None
        if args is not None:
            want = _execute(compiled["default"], args, devices[0])
            for variant in variants[1:]:
                got = _execute(compiled[variant], args, devices[0])
                result[variant]["run"] += 1
                if not all(same_bits(w, g) for w, g in zip(want, got, strict=True)):
                    result[variant]["differ"] += 1
                    result[variant]["names"].append(record["name"])
        if progress:
            print(f"\r{i + 1}/{len(paths)} programs", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return result


def ratio_interval(
    base: Sequence[float], other: Sequence[float], seed: int = 0, draws: int = 2000
) -> tuple[float, float, float]:
    """sum(other) / sum(base), and its 95 % bootstrap interval over programs."""
    base, other = np.asarray(base), np.asarray(other)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(base), (draws, len(base)))
    ratios = other[picks].sum(axis=1) / base[picks].sum(axis=1)
    low, high = np.quantile(ratios, [0.025, 0.975])
    return float(other.sum() / base.sum()), float(low), float(high)


def markdown(result: dict[str, dict]) -> str:
    base = result["default"]["seconds"]
    lines = [
        "| variant | compile (s) | ratio to the default (95 %) | programs run | outputs differ |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| default | {sum(base):.2f} | 1 | | |",
    ]
    for variant, row in result.items():
        if variant == "default":
            continue
        ratio, low, high = ratio_interval(base, row["seconds"])
        lines.append(
            f"| {variant} | {sum(row['seconds']):.2f} | {ratio:.3f} ({low:.3f}-{high:.3f}) "
            f"| {row['run']} | {row['differ']} |"
        )
    for variant, row in result.items():
        if row["names"]:
            names = sorted(set(row["names"]))
            lines.append(
                f"\n{variant}: outputs differ in {', '.join(names[:12])}"
                + (" ..." if len(names) > 12 else "")
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    grab = commands.add_parser("capture", help="save the programs a pytest run compiles")
    grab.add_argument("out", type=pathlib.Path)
    grab.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    again = commands.add_parser("replay", help="compile and run them under each option")
    again.add_argument("programs", type=pathlib.Path)
    again.add_argument(
        "options", nargs="*", help=f"variants: KEY=VALUE[,KEY=VALUE...] XLA options, or {STRIP}"
    )
    again.add_argument("--sample", type=int, default=250, help="programs drawn (seeded)")
    again.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "capture":
        return int(capture(args.out, args.pytest_args))
    for option in args.options:
        try:
            if option != STRIP:
                _pairs(option)  # a malformed variant stops here, before any compile
        except ValueError as error:
            parser.error(str(error))
    paths = sorted(args.programs.glob("*.pkl"))
    if not paths:
        parser.error(f"no captured programs in {args.programs} (run `capture` first)")
    paths = random.Random(args.seed).sample(paths, min(args.sample, len(paths)))
    # The suite's two host devices (conftest.py), before jax starts its backend.
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
        os.environ["XLA_FLAGS"] = flags.strip()
    try:
        result = replay(paths, args.options, seed=args.seed)
    except Exception as error:  # an unknown option: XLA's message, without the traceback
        if "No such compile option" in str(error):
            parser.error(str(error).splitlines()[0])
        raise
    print(f"{len(paths)} programs from {args.programs}\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
