"""The golden runs: shrunken real configs whose first numbers are recorded in golden.json.

Each case trains (or computes) what a stored run depends on and returns three things:

- `values`: the numbers themselves (train loss, Adam step, margins, parameter norms, KL);
- `program`: a digest of the StableHLO that jax lowers for it, before XLA compiles it for a
  CPU. It is the same text on every machine, so any change of the computation (a constant, a
  reordered sum) changes it on every machine;
- `config`: the run's config hash, which names its stored results.

golden.json keeps the programs and configs once and the values per machine fingerprint
(`grokbench.runtime`): on a recorded fingerprint the values must repeat to the bit, on any
other to the relative tolerance stated in the file, with its reason. `tests/test_golden.py`
checks all three; this module records them:

    python -m tests.grokbench.record_golden            # check this machine against golden.json
    python -m tests.grokbench.record_golden --as-unrecorded   # ... as an unrecorded machine
    python -m tests.grokbench.record_golden --record   # record this fingerprint's values
    python -m tests.grokbench.record_golden --record --isa native,AVX,SSE4_2  # several levels

A record refuses values that moved on a recorded fingerprint unless a cache version moved
too (CONTRIBUTING.md, "The golden test and CONFIG_VERSION"); after a version bump it drops
every other fingerprint's values, which are then stale, and keeps the rest of the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Callable

import jax
import numpy as np

import tasks
from grokbench import config, engine, recipes, runtime
from grokbench import versions as cache_versions
from grokbench.quant import QuantConfig
from grokbench.quant.train import _program_text as quant_program_text
from grokbench.quant.train import train as quant_train
from grokbench.store import Store
from tasks.quant import build_corpus

RECORD = pathlib.Path(__file__).with_name("golden.json")

# Every cache version a stored run's name or summary depends on (`grokbench.versions`): a
# bump needs new goldens. golden.json's key -> the constant; the two summary versions keep
# the keys of the modules that declared them before `grokbench.versions` held them all.
VERSIONS = {
    "CONFIG_VERSION": "CONFIG_VERSION",
    "DISTILL_VERSION": "DISTILL_VERSION",
    "QUANT_VERSION": "QUANT_VERSION",
    "QUANT_EVAL_VERSION": "QUANT_EVAL_VERSION",
    "slingshot.SUMMARY_VERSION": "SUMMARY_VERSION",
    "distill.SUMMARY_VERSION": "DISTILL_SUMMARY_VERSION",
}


@dataclasses.dataclass(frozen=True)
class Golden:
    """What one golden case computed: its numbers and the digests of what produced them."""

    values: dict[str, list[float]]
    program: str
    config: str


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _floats(x) -> list[float]:
    return [float(v) for v in np.atleast_1d(np.asarray(x, np.float64))]


def _engine_case(cfg: config.RunConfig, names: tuple[str, ...]) -> Golden:
    (out,) = engine.train([cfg], progress=False)
    for name in names:  # the engine's metrics are float32 columns
        assert out.metrics[name].dtype == np.float32, name
    values = {name: _floats(out.metrics[name]) for name in names}
    return Golden(values, digest(engine._program_text([cfg])), config.config_hash(cfg))


_STEP_METRICS = ("train_loss", "margin_mean", "adam_step", "param_norm")

# p = 7, width 8, 3 full-batch steps of the reference AdamW recipe in fp32 (step t: the
# parameters after t updates). At these small margins standard CE equals the fixed CE.
TINY = config.RunConfig(p=7, d_model=8, n_heads=2, steps=3, eval_every=3)
# Width 128, where `config.xla_options` compiles YNNPACK on the dots only (`individual_dot`).
WIDE = config.RunConfig(p=7, d_model=128, n_heads=2, steps=3, eval_every=3)


def _quant_case() -> Golden:
    """One encoder layer, clipped softmax, 2 steps on a fixed synthetic text: the loss before
    and after one AdamW step and the final parameters' global L2 norm (float64 sum).

    Width 32, T 48, batch 32 (1,536 tokens a step): at width 16, T 16, batch 8 the case did
    not see linear_cross_entropy's backward layout change (cdb6817, QUANT_VERSION 8), which
    moved the lab's real runs; at this size its parameter norm moves in the 10th digit."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus_path = pathlib.Path(tmp) / "corpus.txt"
        text = "\n".join(f"{a} + {b} = {(a + b) % 97}." for a in range(60) for b in range(12))
        corpus_path.write_text(text, encoding="utf-8")
        cfg = QuantConfig(
            n_layers=1,
            d_model=32,
            n_heads=2,
            seq_len=48,
            batch_size=32,
            steps=2,
            variant="clipped",
            corpus=str(corpus_path),
        )
        corpus = build_corpus(cfg.corpus, cfg.level)
        root = pathlib.Path(tmp) / "results"
        params, _ = quant_train(cfg, corpus, Store(root), progress=False)
        with np.load(root / "quant" / "train" / cfg.train_hash() / "metrics.npz") as m:
            losses = m["train_loss"]
        program = digest(quant_program_text(cfg, corpus))
        # The corpus path is a temporary file's: hash the config without it.
        config_hash = digest(json.dumps({**cfg.train_dict(), "corpus": "<synthetic>"}))
    norm = np.sqrt(sum(np.sum(np.square(np.asarray(v, np.float64))) for v in params.values()))
    values = {"train_loss": _floats(losses), "param_norm": _floats(norm)}
    return Golden(values, program, config_hash)


def _kl_case() -> Golden:
    """The distillation KL metric (float64) on fixed logits at T = 4, and fig7's hash: a change
    that moves it bumps DISTILL_VERSION, which only distillation runs hash."""
    with jax.enable_x64(True):
        student = jax.numpy.asarray(np.linspace(-3.0, 5.0, 40).reshape(4, 10))
        teacher = student + 1e-3 * jax.numpy.asarray(np.cos(np.arange(40.0)).reshape(4, 10))
        kl = tasks.kl_divergence(student, teacher, 4.0)
        text = jax.jit(tasks.kl_divergence, static_argnums=2).lower(student, teacher, 4.0)
        program = digest(text.as_text())
    return Golden({"kl": _floats(kl)}, program, config.config_hash(recipes.RECIPES["fig7"].base))


CASES: dict[str, Callable[[], Golden]] = {
    "fixed": lambda: _engine_case(TINY, _STEP_METRICS),
    "standard": lambda: _engine_case(dataclasses.replace(TINY, loss="standard"), _STEP_METRICS),
    # The reference config itself (fig2-top, Table 1: p = 31, width 64).
    "reference": lambda: _engine_case(config.RunConfig(steps=3, eval_every=3), _STEP_METRICS),
    "wide": lambda: _engine_case(WIDE, ("train_loss", "adam_step")),
    # Seed 1 draws its own split (split=per_seed).
    "seed1": lambda: _engine_case(dataclasses.replace(TINY, seed=1), ("train_loss",)),
    "kl": _kl_case,
    "quant": _quant_case,
}


def load() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


def versions() -> dict[str, int]:
    return {key: getattr(cache_versions, name) for key, name in VERSIONS.items()}


def mismatches(name: str, got: Golden, record: dict, fingerprint: str | None = None) -> list[str]:
    """What in `got` disagrees with `record` for case `name`, on `fingerprint` (default:
    this machine's): [] when it agrees. Programs and configs must match on every machine;
    values to the bit on a recorded fingerprint, else to the record's tolerance."""
    fingerprint = runtime._fingerprint_id() if fingerprint is None else fingerprint
    bump = "if intended, bump the cache version and re-record (tests/grokbench/golden.py)"
    out = []
    if got.config != record["configs"].get(name):
        out.append(f"{name}: the config hash changed ({got.config}): {bump}")
    if got.program != record["programs"].get(name):
        out.append(
            f"{name}: the program changed ({got.program}): if a recorded machine still gives "
            f"its values to the bit, re-record the digest; otherwise {bump}"
        )
    machines = record["machines"]
    if fingerprint in machines:
        want = machines[fingerprint]["values"].get(name)
        if want != got.values:
            out.append(
                f"{name}: numbers changed on this recorded machine: {bump}\n"
                f"  got  {got.values}\n  want {want}"
            )
        return out
    rtol = tolerance(name, record)
    for machine in machines.values():
        want = machine["values"].get(name, {})
        for metric, expected in want.items():
            actual = np.asarray(got.values.get(metric, []), np.float64)
            if actual.shape != np.shape(expected) or not np.allclose(
                actual, expected, rtol=rtol, atol=0
            ):
                out.append(
                    f"{name} {metric}: beyond rtol {rtol} of the values recorded on "
                    f"{machine['fingerprint']['isa']} {machine['fingerprint']['cpu']}: {bump}\n"
                    f"  got  {actual.tolist()}\n  want {expected}"
                )
    return out


# The precision each case's values carry (the quant parameter norm is a float64 sum over
# float32 parameters: float32's).
PRECISION = {"kl": np.float64}


def tolerance(name: str, record: dict) -> float:
    """The relative tolerance for case `name` on a machine whose values were not recorded:
    the record's `ulps` units of roundoff of the case's precision."""
    return record["tolerance"]["ulps"] * float(np.finfo(PRECISION.get(name, np.float32)).eps)


def spread_in_ulps(record: dict) -> dict[str, float]:
    """Per case, the largest relative difference between any two recorded machines, in units
    of roundoff of the case's precision: what the tolerance is derived from."""
    out = {}
    machines = list(record["machines"].values())
    for name in record["programs"]:
        eps = float(np.finfo(PRECISION.get(name, np.float32)).eps)
        worst = 0.0
        for a in machines:
            for b in machines:
                for metric, want in a["values"][name].items():
                    x, y = np.asarray(b["values"][name][metric]), np.asarray(want)
                    worst = max(worst, float(np.max(np.abs(x - y) / np.abs(y))) / eps)
        out[name] = worst
    return out


def _record_here(record: dict) -> dict:
    """`record` with this machine's values, refusing moved values without a version bump."""
    now = versions()
    bumped = record.get("versions") != now
    fingerprint = runtime.machine_fingerprint()
    key = runtime._fingerprint_id(fingerprint)
    if bumped:
        record["machines"] = {}
    values = {}
    for name, case in CASES.items():
        jax.clear_caches()
        got = case()
        old = record["machines"].get(key, {}).get("values", {}).get(name)
        if old is not None and old != got.values and not bumped:
            raise SystemExit(
                f"{name}: the numbers moved on this recorded machine but no cache version "
                "did: bump the version (CONTRIBUTING.md) before recording"
            )
        if record["programs"].get(name) not in (None, got.program) and not bumped:
            print(f"{name}: new program digest {got.program} (values unchanged)")
        record["programs"][name] = got.program
        record["configs"][name] = got.config
        values[name] = got.values
    record["versions"] = now
    record["machines"][key] = {"fingerprint": fingerprint, "values": values}
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write this machine's values")
    parser.add_argument(
        "--isa",
        help="comma-separated --xla_cpu_max_isa levels (or 'native') to record in subprocesses",
    )
    parser.add_argument(
        "--as-unrecorded",
        action="store_true",
        help="check as a machine golden.json does not record would: values to the tolerance",
    )
    args = parser.parse_args(argv)
    if args.isa:
        for level in args.isa.split(","):
            env = dict(os.environ)
            flags = env.get("XLA_FLAGS", "")
            if level != "native":
                flags += f" --xla_cpu_max_isa={level}"
            env["XLA_FLAGS"] = flags.strip()
            command = [sys.executable, "-m", "tests.grokbench.record_golden"]
            subprocess.run([*command, *(["--record"] if args.record else [])], env=env, check=True)
        return 0
    record = load() if RECORD.exists() else {"programs": {}, "configs": {}, "machines": {}}
    if args.record:
        record.setdefault("tolerance", {"ulps": None, "reason": "set from the measured spread"})
        RECORD.write_text(json.dumps(_record_here(record), indent=1) + "\n", encoding="utf-8")
        print(f"recorded {runtime._fingerprint_id()} ({runtime.isa_level()}) in {RECORD}")
        return 0
    fingerprint = "an-unrecorded-machine" if args.as_unrecorded else None
    failures = [
        m for name, case in CASES.items() for m in mismatches(name, case(), record, fingerprint)
    ]
    print("\n".join(failures) or f"golden: all {len(CASES)} cases agree")
    return 1 if failures else 0
