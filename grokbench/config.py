"""The typed run config, its validation, and `key=value` overrides parsed against its types.

One `RunConfig` is one training run (one seed). Sweeps are lists of them; runs that differ
only in `_VMAPPED` fields share shapes and are batched into one program by the engine.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from grokbench import overrides
from grokbench.errors import ConfigError as ConfigError
from grokbench.precision import get_precision
from grokbench.versions import CONFIG_VERSION, DISTILL_VERSION, stable_hash
from tasks import (
    ACTIVATIONS,
    DISTILL_LOSSES,
    DISTILL_OBJECTIVES,
    INITS,
    MATMUL_PRECISIONS,
    MLP_INITS,
    OPERATIONS,
    MLPConfig,
    ModularTask,
    TransformerConfig,
)

__all__ = [
    "ADDED_FIELDS",
    "ConfigError",
    "RunConfig",
    "describe",
    "did_you_mean",
    "format_keys",
    "group_key",
    "group_runs",
    "parse_overrides",
    "xla_options",
]

_LOSSES: tuple[str, ...] = ("fixed", "standard", "stablemax", "zero_sum")
"""Loss variants: numerics.cross_entropy, numerics.standard.cross_entropy, and the baselines.
A distillation run (teacher_steps > 0) takes fixed or standard: the soft-target CEs of
`tasks.DISTILL_LOSSES`."""

_MODELS: tuple[str, ...] = ("transformer", "mlp")
"""The 1-layer transformer (Nanda/Varma) and the 2-layer one-hot MLP (Doshi et al.)."""

_OPTIMIZERS: tuple[str, ...] = ("adam", "adamw", "laprop")
"""Optimizers of grokbench.optimizers (adam has no weight decay)."""

ADDED_FIELDS: tuple[str, ...] = (
    "teacher_steps",
    "temperature",
    "split",
    "init",
    "eq_output",
    "warmup_steps",
    "progress_measures",
    "orthograd",
    "mlp_init",
    "distill_objective",
    "matmul_precision",
)
"""Fields added to `RunConfig` after `CONFIG_VERSION` 1: while at their default they are left
out of `identity` and the hash, so adding a field does not orphan the runs already stored.
A new field goes here (with a default that reproduces the old behaviour), not into a bump of
`CONFIG_VERSION`. A later change of such a default comes with a bump (as `split`'s, to
per_seed, at version 3): a config stored before the field existed lacks the key and would
read back with the new default, and only the bump keeps the old run from answering for it."""

_SPLITS: tuple[str, ...] = ("fixed", "per_seed")
"""How a run's train/test split is drawn: 'fixed' from `split_seed` for every run seed, or
'per_seed' from the run's own seed (a new split per seed, as Nanda et al.'s and Prieto et
al.'s trainers draw it)."""

_VMAPPED: tuple[str, ...] = ("seed", "lr", "b1", "b2", "eps", "weight_decay")
"""Fields that only change numbers, not shapes: runs differing only in these are batched."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One training run; the defaults are the reference config (fig2-top, fixed CE)."""

    # Task.
    task: str = "a+b"  # Varma et al.'s reference task (fig2-top, Table 1)
    p: int = 31  # a+b mod 31: 961 pairs
    train_fraction: float = 0.5  # Varma et al.'s 50% split: 480 training examples at p = 31
    split_seed: int = 0  # the split's seed when split=fixed (the same split for every run seed)
    split: str = "per_seed"  # one of SPLITS: a new split per run seed (Nanda's, Prieto's trainers)
    # Model.
    model: str = "transformer"  # the 1-layer ReLU transformer of the papers
    d_model: int = 64  # Varma et al.'s width-64 model (Nanda et al.: 128)
    n_heads: int = 4  # Nanda et al.'s 4 heads
    d_mlp: int | None = None  # None -> 4 * d_model (Nanda et al.: 512 at width 128)
    layer_norm: bool = False  # Nanda/Varma models have no LayerNorm
    mlp_width: int = 500  # hidden width of the 2-layer MLP (model=mlp only)
    activation: str = "relu"  # MLP activation (tasks.ACTIVATIONS); fig2-bottom: quadratic
    mlp_init: str = "unit"  # MLP init scale (tasks.MLP_INITS); fig2-bottom: doshi
    init: str = "nanda"  # transformer init scale (tasks.INITS): Nanda et al.'s N(0, 1/d_model)
    eq_output: bool = False  # transformer: p + 1 outputs, `=` a class (Nanda et al.'s unembed)
    # Optimizer.
    optimizer: str = "adamw"  # the papers' AdamW (decoupled weight decay)
    lr: float = 1e-3  # Varma/Nanda learning rate
    b1: float = 0.9  # Varma/Nanda/fix-paper beta1
    b2: float = 0.98  # Varma/Nanda/fix-paper beta2 (not optax's 0.999)
    eps: float = 1e-8  # Adam's default; equilibrium margin log(1/eps) = 18.4 sits past c32
    weight_decay: float = 1.0  # lambda = 1 of Varma et al. (fig2-top, Table 1)
    track_sqrt_v: bool = False  # LaProp only: track sqrt(v) without squaring g (fig4 sets it)
    orthograd: bool = False  # Prieto et al.'s ⊥Grad before the optimizer (optimizers.orthograd)
    # Numerics.
    precision: str = "fp32"  # the papers' default; 'bf16', 'fp64', or 'PARAM/COMPUTE'
    loss: str = "fixed"  # numerics.cross_entropy: the fix this lab is about
    matmul_precision: str = "highest"  # fp32 model matmuls: exact; tf32/bf16 round operands
    # Schedule.
    steps: int = 10_000  # fig2-top / Table 1 train 10,000 full-batch steps
    eval_every: int = 100  # test loss/accuracy cadence; 1% of the steps costs ~nothing
    warmup_steps: int = 0  # W > 0: lr (and so decay) x min(t / W, 1) at update t (Nanda: 10)
    # The measures move no training number: runs stored before them keep their hash (and are
    # retrained once, for the missing columns: grokbench.experiment).
    # Off by default (~6% of a step, ~30% of a short run with its compile); fig2-top,
    # setup-study and orthograd turn them on (recipes.py).
    progress_measures: bool = False  # Nanda et al.'s progress measures every eval_every (fourier)
    seed: int = 0  # model init seed (runs of a sweep use seed, seed + 1, ...)
    # Distillation (fig7, grokbench.distill); off by default: a run trains from scratch.
    teacher_steps: int = 0  # N > 0: the student starts as a teacher trained N steps (fig7: 5,000)
    temperature: float = 4.0  # fig7's T = 4 (Hinton et al.): the teacher's m/T stays below c16
    distill_objective: str = "soft_target"  # fig7's loss: soft-target CE (the paper), or 'kl'

    def __post_init__(self) -> None:
        check_field_types(self)
        _check_choice("task", self.task, OPERATIONS)
        _check_choice("model", self.model, _MODELS)
        _check_choice("optimizer", self.optimizer, _OPTIMIZERS)
        _check_choice("loss", self.loss, _LOSSES)
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("split", self.split, _SPLITS)
        _check_choice("init", self.init, INITS)
        _check_choice("mlp_init", self.mlp_init, MLP_INITS)
        _check_choice("matmul_precision", self.matmul_precision, MATMUL_PRECISIONS)
        require(
            self.model == "transformer" or (self.init == "nanda" and not self.eq_output),
            "init and eq_output apply to model=transformer only",
        )
        require(self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}")
        require(self.split_seed >= 0, f"split_seed must be >= 0, got {self.split_seed}")
        require(
            self.split == "fixed" or self.split_seed == 0,
            f"split_seed applies to split=fixed only (split=per_seed draws the split from "
            f"the run's seed); got split_seed={self.split_seed}",
        )
        require(self.mlp_width >= 1, f"mlp_width must be >= 1, got {self.mlp_width}")
        require(
            self.model == "mlp" or self.mlp_init == "unit",
            "mlp_init applies to model=mlp only",
        )
        try:
            # One name per policy ('bfloat16' and 'bf16/bf16' are 'bf16'): one hash per run.
            object.__setattr__(self, "precision", get_precision(self.precision).name)
            compute = get_precision(self.precision).compute_dtype.name
            require(
                self.matmul_precision == "highest" or compute == "float32",
                f"matmul_precision={self.matmul_precision} emulates float32 matmuls on "
                f"TPUs and GPUs: it needs float32 compute (precision=fp32 or PARAM/fp32), "
                f"got precision={self.precision}",
            )
            self.modular_task()
            self.model_config()
        except (TypeError, ValueError) as err:
            raise ConfigError(str(err)) from None
        require(self.lr > 0, f"lr must be > 0, got {self.lr}")
        require(0 <= self.b1 < 1, f"b1 must be in [0, 1), got {self.b1}")
        require(0 <= self.b2 < 1, f"b2 must be in [0, 1), got {self.b2}")
        require(self.eps >= 0, f"eps must be >= 0, got {self.eps}")
        require(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        require(
            self.optimizer != "adam" or self.weight_decay == 0,
            f"optimizer adam has no weight decay (got weight_decay={self.weight_decay}); "
            "use optimizer=adamw",
        )
        require(
            self.optimizer == "laprop" or not self.track_sqrt_v,
            "track_sqrt_v applies to optimizer=laprop only",
        )
        require(self.steps >= 1, f"steps must be >= 1, got {self.steps}")
        require(self.eval_every >= 1, f"eval_every must be >= 1, got {self.eval_every}")
        require(
            self.steps % self.eval_every == 0,
            f"steps ({self.steps}) must be a multiple of eval_every ({self.eval_every})",
        )
        require(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        _check_distill(self)

    def modular_task(self) -> ModularTask:
        """The dataset this run trains on (split from `split_seed`, or the run's seed)."""
        split_seed = self.seed if self.split == "per_seed" else self.split_seed
        return ModularTask(self.task, self.p, self.train_fraction, split_seed)

    def model_config(self) -> TransformerConfig | MLPConfig:
        """The model config for `tasks.build_model`."""
        if self.model == "mlp":
            return MLPConfig(
                p=self.p,
                width=self.mlp_width,
                activation=self.activation,
                init=self.mlp_init,
                matmul_precision=self.matmul_precision,
            )
        return TransformerConfig(
            vocab_size=self.p + 1,
            num_classes=self.p + 1 if self.eq_output else self.p,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_mlp=self.d_mlp,
            layer_norm=self.layer_norm,
            init=self.init,
            matmul_precision=self.matmul_precision,
        )

    def to_dict(self) -> dict[str, Any]:
        """The flat, JSON-ready dict of every field."""
        return dataclasses.asdict(self)


def require(ok: bool, message: str) -> None:
    """Raise `ConfigError(message)` unless `ok`."""
    if not ok:
        raise ConfigError(message)


def _check_distill(cfg: RunConfig) -> None:
    require(cfg.teacher_steps >= 0, f"teacher_steps must be >= 0, got {cfg.teacher_steps}")
    require(cfg.temperature > 0, f"temperature must be > 0, got {cfg.temperature}")
    _check_choice("distill_objective", cfg.distill_objective, tuple(DISTILL_OBJECTIVES))
    if not cfg.teacher_steps:
        for name in ("temperature", "distill_objective"):
            require(
                getattr(cfg, name) == RunConfig.__dataclass_fields__[name].default,
                f"{name} applies to distillation runs only (set teacher_steps > 0)",
            )
        return
    require(
        cfg.loss in DISTILL_LOSSES,
        f"a distillation run's loss is one of {', '.join(DISTILL_LOSSES)} (soft-target CE); "
        f"got {cfg.loss!r}",
    )
    require(
        cfg.eval_every == 1,
        "a distillation run records test metrics every step: eval_every must be 1, "
        f"got {cfg.eval_every}",
    )
    require(
        not cfg.eq_output and not cfg.warmup_steps,
        "eq_output and warmup_steps apply to runs trained from scratch, not distillation runs",
    )


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    require(value in choices, f"{name} must be one of {', '.join(choices)}; got {value!r}")


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """'did you mean ...?': the choices NAME begins, else difflib's nearest; else all of them."""
    near = [c for c in choices if c.startswith(name)]
    near = near or difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    return f"did you mean {' or '.join(near)}?" if near else f"known: {', '.join(choices)}"


def describe(cls: type) -> list[tuple[str, str, str, str]]:
    """(name, type, default, meaning) of each field of the config dataclass `cls`; the meaning
    is the field's trailing `# comment` in the source (where every default gives its reason)."""
    meanings = {}
    for line in inspect.getsource(cls).splitlines():
        match = re.match(r"\s+(\w+): [^#]+?=[^#]+#\s*(.+)$", line)
        if match:
            meanings[match[1]] = match[2]
    hints = _hints(cls)
    return [
        (
            f.name,
            getattr(hints[f.name], "__name__", str(hints[f.name])),
            repr(f.default),
            meanings.get(f.name, ""),
        )
        for f in dataclasses.fields(cls)
    ]


def format_keys(rows: Sequence[tuple[str, str, str, str]]) -> str:
    """`describe`'s rows as aligned columns, the meaning last."""
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + " " + row[3]
        for row in rows
    )


def field_types(cls: type | None = None) -> dict[str, Any]:
    """Field name -> resolved type annotation (e.g. int, float, `int | None`) of the config
    dataclass `cls` (RunConfig's by default)."""
    return dict(_hints(RunConfig if cls is None else cls))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """`typing.get_type_hints(cls)`, resolved once per class: every config checks its fields
    on construction, and resolving the string annotations was most of that (about 0.8 ms of
    each RunConfig here)."""
    return typing.get_type_hints(cls)


def _type_name(tp: Any) -> str:
    return " | ".join(t.__name__ for t in overrides.members(tp))


def _is_instance(value: Any, tp: Any) -> bool:
    for member in overrides.members(tp):
        if member is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if member is int and isinstance(value, bool):
            continue  # bool is an int subclass; True is not a width
        if isinstance(value, member):
            return True
    return False


def check_field_types(cfg: Any) -> None:
    """Check every field of the dataclass `cfg` against its annotation; floats must be finite
    and are stored as float (so 1 and 1.0 hash alike). One-line `ConfigError` otherwise."""
    for name, tp in _hints(type(cfg)).items():
        value = getattr(cfg, name)
        require(
            _is_instance(value, tp),
            f"{name} must be {_type_name(tp)}, got {type(value).__name__} {value!r}",
        )
        if float in overrides.members(tp) and isinstance(value, int | float):
            require(math.isfinite(value), f"{name} must be finite, got {value}")
            # Store floats as floats: 1 and 1.0 must hash to the same run.
            object.__setattr__(cfg, name, float(value))


def _parse_value(key: str, text: str, types_: Mapping[str, Any] | None = None) -> Any:
    """Parse one override value against the type of field `key` (ConfigError if it fails).

    `types_` maps field names to annotations: `field_types()` (RunConfig's) unless given.
    """
    types_ = field_types() if types_ is None else types_
    if key not in types_:
        raise ConfigError(f"unknown key {key!r}")
    return overrides.read_value(key, text, types_[key])


def override_readers(
    cls: type | None = None, extra: Sequence[str] = ("seeds",)
) -> dict[str, overrides.Reader]:
    """The `grokbench.overrides` reader of each key of the config dataclass `cls` (RunConfig's
    by default: every field by its type, a comma list sweeping it, except the fields
    `cls.WHOLE_VALUES` names, which take their text whole) and of each of `extra` (counts:
    positive ints, one value each)."""
    whole = getattr(cls, "WHOLE_VALUES", ())
    fields = {k: overrides.typed(tp, whole=k in whole) for k, tp in field_types(cls).items()}
    return {**fields, **dict.fromkeys(extra, overrides.count)}


def parse_overrides(
    tokens: Sequence[str],
    extra: Sequence[str] = ("seeds",),
    cls: type | None = None,
    also: Sequence[str] = (),
    *,
    check_lists: bool = False,
) -> dict[str, tuple]:
    """`key=value` or `key=v1,v2,...` tokens -> {key: values}; a list makes a sweep axis.

    Keys are fields of the config dataclass `cls` (RunConfig's by default) or one of `extra`
    (positive ints, one value each), read by `override_readers` through the one parser,
    `grokbench.overrides.parse`. A field `cls.WHOLE_VALUES` names takes its text whole (a
    comma is part of its value: `bits=W8A8,W6A6`). Values are type-checked here; ranges and
    choices are checked by the config class. `also`: keys the caller reads itself, named
    in the unknown-key message. `check_lists`: refuse `key=` and a list with an empty value
    first (`run` and `sweep`, through `grokbench.sweep.expand_grid`).
    """
    known = [*also, *field_types(cls), *extra]
    readers = override_readers(cls, extra)
    return overrides.parse(tokens, readers, known=known, check_lists=check_lists)


def from_stored(stored: Mapping[str, Any]) -> RunConfig:
    """The `RunConfig` of a stored config dict (a run's config.json or summary's "config").

    A config written under another schema (a field since removed or renamed, a value no
    longer valid) raises `ConfigError` with one line naming what does not fit.
    """
    if not isinstance(stored, Mapping):
        raise ConfigError(f"a stored config must be a JSON object, got {type(stored).__name__}")
    unknown = sorted(set(stored) - set(field_types()))
    if unknown:
        raise ConfigError(f"stored config has fields this version does not know: {unknown}")
    return RunConfig(**stored)


def identity(cfg: RunConfig) -> dict[str, Any]:
    """`cfg.to_dict()` less the `ADDED_FIELDS` that sit at their default: what names a run."""
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    return {k: v for k, v in cfg.to_dict().items() if not (k in ADDED_FIELDS and v == defaults[k])}


_YNN_DOT_MIN_WIDTH = 128
"""Transformers at least this wide compile with YNNPACK on the dots only (`xla_options`)."""


def xla_options(cfg: RunConfig) -> dict[str, str]:
    """XLA compiler options of `cfg`'s training programs (`jax.jit(compiler_options=...)`).

    XLA CPU's default fuses each dot with the elementwise ops and reductions around it into
    one YNNPACK fusion. Keeping YNNPACK for the dots alone (`individual_dot`) runs Nanda et
    al.'s width-128 model ~1.3x faster end to end, but slows a vmapped batch of the width-64
    model (docs/studies/training-step-speed.md). So transformers of width >=
    `_YNN_DOT_MIN_WIDTH` take it and every other model keeps XLA's default. The option moves
    a run's last bits: when set it is part of the run's hash (`config_hash`), so runs stored
    before it are not reused. The engine passes them to XLA on the CPU backend only
    (`engine.compiler_options`).
    """
    if cfg.model == "transformer" and cfg.d_model >= _YNN_DOT_MIN_WIDTH:
        return {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
    return {}


def config_hash(cfg: RunConfig) -> str:
    """A stable 16-hex-digit hash (`grokbench.versions.stable_hash`) of the run's `identity`,
    `CONFIG_VERSION`, `xla_options` (when it sets any: the runs on XLA's defaults keep the
    hashes they had before it) and, for a distillation run, `DISTILL_VERSION`."""
    options = xla_options(cfg)
    extra = {"xla": options} if options else {}
    if cfg.teacher_steps:
        extra["distill"] = DISTILL_VERSION
    return stable_hash({"version": CONFIG_VERSION, **identity(cfg), **extra})


def group_key(cfg: RunConfig) -> tuple:
    """Everything but the `_VMAPPED` fields: runs with equal keys share one batched program."""
    return tuple((k, v) for k, v in sorted(cfg.to_dict().items()) if k not in _VMAPPED)


def group_runs(configs: Sequence[RunConfig]) -> list[list[RunConfig]]:
    """Split configs into shape groups (equal `group_key`), keeping first-seen order."""
    groups: dict[tuple, list[RunConfig]] = {}
    for cfg in configs:
        groups.setdefault(group_key(cfg), []).append(cfg)
    return list(groups.values())
