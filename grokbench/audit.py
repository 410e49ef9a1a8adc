"""`grokbench audit MODULE:FUNCTION`: `numerics.testing`'s checks on any function, with speed."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import json
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from numerics import standard, testing

__all__ = ["KIND_CALLS", "SPEED_SHAPE", "AuditRow", "audit", "run"]

_PAIR_KINDS = ("soft-target", "kl", "reverse-kl", "js")
"""The kinds called as fn(student_logits, teacher_logits)."""

_SINK_KINDS = ("sink-softmax", "sink-log_softmax")
"""The kinds called as fn(x, sink=s), s one sink logit per row."""

SPEED_SHAPE = (512, 8192)
"""(rows, K) of the logits the speed comparison times value and gradient on."""


KIND_CALLS = {
    "ce": "fn(logits, labels) -> per-row losses",
    "softmax": "fn(x) -> probabilities",
    "log_softmax": "fn(x) -> log-probabilities",
    "soft-target": "fn(student_logits, teacher_logits) -> per-row losses",
    "z-loss": "fn(logits, labels) -> per-row losses + 1e-4 logsumexp^2",
    "soft-cap": "fn(logits, labels) -> per-row losses of 30 tanh(logits / 30)",
    "label-smoothing": "fn(logits, labels) -> per-row losses, label smoothing 0.1",
    "linear-ce": "fn(hidden, weight, labels) -> per-row losses of hidden @ weight",
    "kl": "fn(student_logits, teacher_logits) -> per-row KL(p_teacher || q_student)",
    "reverse-kl": "fn(student_logits, teacher_logits) -> per-row KL(q_student || p_teacher)",
    "js": "fn(student_logits, teacher_logits) -> per-row Jensen-Shannon divergences",
    "sink-softmax": "fn(x, sink=s) -> probabilities e^x / (e^s + sum e^x), s one per row",
    "sink-log_softmax": "fn(x, sink=s) -> log-probabilities with the sink s in the sum",
    "log-prob": "fn(logits, labels) -> per-row log-probabilities of the labels",
    "entropy": "fn(logits) -> per-row entropies of the softmax",
}
"""Each kind `grokbench audit --kind` takes, and the call it expects of the function."""


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One dtype's audit: the check's result, how long it took, and the speed comparison."""

    result: testing.CheckResult  # what numerics.testing measured
    seconds: float  # wall time of the check (compilation included)
    ms: float  # median ms of value and gradient of the audited function on SPEED_SHAPE
    reference_ms: float  # the same for `_reference(kind)`
    reference: str  # what the reference is


def _load(spec: str) -> Callable:
    """The callable named by 'MODULE:FUNCTION' ('pkg.mod:Class.method' works too).

    The current directory is searched first, as `python -m` does. Raises ValueError
    with one line on any problem: no colon, no such module, no such attribute, not
    callable, or an import that fails.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:FUNCTION, e.g. numerics:cross_entropy; got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise ValueError(f"no module named {err.name!r} (importing {module_name})") from None
    except Exception as err:  # the user's module failed to import: say how, in one line
        raise ValueError(f"importing {module_name} raised {type(err).__name__}: {err}") from None
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            where = ".".join([module_name, *attr.split(".")[:i]])
            names = [n for n in dir(obj) if not n.startswith("_")]
            near = difflib.get_close_matches(part, names, n=3)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise ValueError(f"{where} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec} is a {type(obj).__name__}, not a function")
    return obj


def _infer_kind(spec: str) -> str:
    """The kind a function's name suggests: log_softmax, softmax, soft-target, linear-ce,
    z-loss, soft-cap, label-smoothing, kl, reverse-kl, js, sink-softmax, sink-log_softmax,
    else ce."""
    name = spec.rpartition(":")[2].lower()
    if "sink" in name or "softmax1" in name or "softmax_1" in name or "off_by_one" in name:
        return "sink-log_softmax" if "log" in name else "sink-softmax"
    for words, kind in (
        (("linear",), "linear-ce"),
        (("z_loss", "zloss"), "z-loss"),
        (("soft_cap", "softcap"), "soft-cap"),
        (("smooth",), "label-smoothing"),
    ):
        if any(word in name for word in words):
            return kind
    words = name.split("_")
    if "kl" in words or any(w.startswith("kldiv") for w in words) or "kullback" in name:
        return "reverse-kl" if "reverse" in name else "kl"
    if {"js", "jsd"} & set(words) or "jensen" in name:
        return "js"
    if "log_softmax" in name:
        return "log_softmax"
    if "log_prob" in name or "logprob" in name:
        return "log-prob"
    if "entropy" in name and "cross" not in name:
        return "entropy"
    if "soft_target" in name or "distill" in name:
        return "soft-target"
    if "softmax" in name and "cross_entropy" not in name:
        return "softmax"
    return "ce"


def _soft_labels(student, teacher):
    # optax's soft-label loss on the teacher's softmax: the formula users write.
    return optax.softmax_cross_entropy(student, jax.nn.softmax(teacher))


def _optax_kl(student, teacher):
    # optax's KL of the teacher's softmax from the student's log-softmax.
    return optax.kl_divergence(jax.nn.log_softmax(student), jax.nn.softmax(teacher))


def _optax_reverse_kl(student, teacher):
    # KL(q || p) with log targets: torch's kl_div(log p, log q, log_target=True).
    return optax.losses.kl_divergence_with_log_targets(
        jax.nn.log_softmax(teacher), jax.nn.log_softmax(student)
    )


def _optax_on_logits(hidden, labels, weight):
    # optax's loss on the materialized logits: what a trainer without a fused kernel runs.
    return optax.softmax_cross_entropy_with_integer_labels(hidden @ weight, labels)


def _reference(kind: str) -> tuple[str, Callable]:
    """(name, function): optax's (or jax.nn's, which optax has none of) function of `kind`;
    for the options, which optax lacks, `numerics.standard.cross_entropy` with the option
    (the peers' formula); for linear-ce, optax on the materialized logits; for js,
    `numerics.standard.js_divergence` (Liger-Kernel's formula); for the sink kinds,
    `numerics.standard.softmax` / `log_softmax` with `sink=` (GPT-OSS's reference)."""
    if kind in testing.OPTIONS:
        return "standard", functools.partial(standard.cross_entropy, **testing.OPTIONS[kind])
    return {
        "ce": ("optax", optax.softmax_cross_entropy_with_integer_labels),
        "soft-target": ("optax", _soft_labels),
        "log_softmax": ("jax.nn", jax.nn.log_softmax),
        "softmax": ("jax.nn", jax.nn.softmax),
        "linear-ce": ("optax on hidden @ weight", _optax_on_logits),
        "kl": ("optax", _optax_kl),
        "reverse-kl": ("optax", _optax_reverse_kl),
        "js": ("standard", standard.js_divergence),  # Liger-Kernel's JSD formula; optax has none
        # GPT-OSS's reference: jax.nn on the row with the sink appended, its entry dropped.
        "sink-softmax": ("standard", standard.softmax),
        "sink-log_softmax": ("standard", standard.log_softmax),
        # The trainers' formulas: log_softmax(z)[y]; verl's lse - sum p z.
        "log-prob": ("standard", standard.log_prob),
        "entropy": ("standard", standard.entropy),
    }[kind]


_LINEAR_SPEED_D = 256
"""Hidden size of the linear-ce speed comparison: hidden (rows, D), weight (D, K)."""


def _speed(fn: Callable, ref: Callable, kind: str, dtype: np.dtype, reps: int = 7):
    """Median ms of value and gradient of `fn` and of `ref` on SPEED_SHAPE, interleaved
    (linear-ce: hidden (rows, _LINEAR_SPEED_D) and weight (_LINEAR_SPEED_D, K), the
    gradient with respect to hidden)."""
    key_x, key_o = jax.random.split(jax.random.key(0))
    x = (3 * jax.random.normal(key_x, SPEED_SHAPE, jnp.float32)).astype(dtype)
    labels = jax.random.randint(key_o, SPEED_SHAPE[:1], 0, SPEED_SHAPE[1])
    if kind in _PAIR_KINDS:  # a teacher near the student
        other = x + (0.1 * jax.random.normal(key_o, SPEED_SHAPE)).astype(dtype)
    else:  # softmax: a cotangent
        other = jax.random.normal(key_o, SPEED_SHAPE).astype(dtype)
    losses = ("ce", *_PAIR_KINDS, *testing.OPTIONS, "log-prob")
    if kind in ("ce", "log-prob", *testing.OPTIONS):
        other = labels
    if kind in _SINK_KINDS:  # the last column is the sink: (rows, K - 1) outputs
        fn, ref = _with_sink(fn), _with_sink(ref)
        other = other[:, :-1]
    if kind == "linear-ce":
        shape = (_LINEAR_SPEED_D, SPEED_SHAPE[1])
        weight = (jax.random.normal(key_o, shape) / _LINEAR_SPEED_D**0.5).astype(dtype)
        x = x[:, :_LINEAR_SPEED_D]
        other = labels
        fn = functools.partial(_with_weight, fn, weight)
        ref = functools.partial(_with_weight_last, ref, weight)

    def step(f):
        if kind in (*losses, "linear-ce"):
            loss = lambda x, o: jnp.sum(f(x, o))  # noqa: E731
        elif kind == "entropy":  # per-row outputs of one argument
            loss = lambda x, o: jnp.sum(f(x))  # noqa: E731
        else:
            loss = lambda x, o: jnp.sum(f(x) * o)  # noqa: E731
        compiled = jax.jit(jax.value_and_grad(loss))
        return lambda: jax.block_until_ready(compiled(x, other))

    steps = [step(fn), step(ref)]
    for run in steps:
        run()  # compile
        run()  # warm
    times: list[list[float]] = [[], []]
    for _ in range(reps):
        for run, out in zip(steps, times, strict=True):
            start = time.perf_counter()
            run()
            out.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times[0]), statistics.median(times[1])


def _with_sink(fn):
    # fn(x, sink=s) on logits whose last column is the sink, one per row.
    return lambda x: fn(x[:, :-1], sink=x[:, -1])


def _with_weight(fn, weight, hidden, labels):
    return fn(hidden, weight, labels)


def _with_weight_last(fn, weight, hidden, labels):
    return fn(hidden, labels, weight)


def audit(
    fn: Callable,
    kind: str,
    dtype,
    max_ulps: float | None = None,
    quick: bool = False,
    **check: object,
) -> AuditRow:
    """Check `fn` as `kind` in `dtype` (numerics.testing; `check` goes to the check, e.g.
    `reference=`) and time it against `_reference(kind)`."""
    dtype = testing.as_dtype(dtype)
    start = time.perf_counter()
    result = testing.CHECKS[kind](fn, dtype, max_ulps=max_ulps, quick=quick, **check)
    seconds = time.perf_counter() - start
    name, ref = _reference(kind)
    with jax.enable_x64(dtype == np.float64):
        ms, ref_ms = _speed(fn, ref, kind, dtype)
    return AuditRow(result, seconds, ms, ref_ms, name)


def _margin(value: float | None, cliff: float, never: str) -> str:
    if value is None:
        return never
    return f"m = {value:.8g}   (cliff {cliff:.8g})"


def _format_dtype(row: AuditRow) -> str:
    """One dtype's table: errors, cliffs, sums, edge cases, speed and the verdict."""
    r = row.result
    hard_label = ("ce", "linear-ce", "log-prob", *testing.OPTIONS)
    target = "target gradient" if r.kind in hard_label else f"d {r.kind}[0] / dx0"
    value_zero = "loss" if r.kind in hard_label else {"log_softmax": "log_softmax[0]"}.get(r.kind)
    if r.kind == "sink-log_softmax":  # the margin sweep: softmax off by one of the row [m]
        value_zero = "sink-log_softmax[0]"
    if r.kind in ("log-prob", "entropy"):
        value_zero = {"log-prob": "log_prob", "entropy": "entropy"}[r.kind]
        target = {"log-prob": "target gradient", "entropy": "gradient at the max"}[r.kind]
    lines = [
        ("value error", f"{r.value_ulps:.3g} ulps (bound {r.value_bound:.3g}) at {r.value_at}"),
        ("gradient error", f"{r.grad_ulps:.3g} ulps (bound {r.grad_bound:.3g}) at {r.grad_at}"),
    ]
    never = "never (until exp(-m) underflows)"
    if r.kind not in _PAIR_KINDS:
        lines.append((f"{target} = 0 from", _margin(r.grad_dies_at, r.cliff, never)))
    if value_zero:
        lines.append((f"{value_zero} = 0 from", _margin(r.value_zero_at, r.cliff, never)))
    lines.append(("gradient sum", f"|sum g| <= {r.grad_sum_error:.3g} eps * sum |g|"))
    if r.zero_at_teacher is not None:
        exact = "exactly 0" if r.zero_at_teacher else "NOT exactly 0"
        what = "grad" if r.kind == "soft-target" else "value, grad"
        lines.append((f"{what} at student=teacher", exact))
    lines.append(("NaN in", "NaN out" if r.nan_propagates else "a finite number out"))
    finite = f"{r.nonfinite_rows} rows" if r.nonfinite_rows else "none"
    lines.append(("inf/NaN out", finite + " (where the exact value is finite)"))
    rows, cols = SPEED_SHAPE
    lines.append(
        (
            "speed",
            f"{row.ms / row.reference_ms:.2f}x {row.reference} ({row.ms:.3g} vs "
            f"{row.reference_ms:.3g} ms, value and gradient on ({rows}, {cols}))",
        )
    )
    verdict = "PASS" if r.ok else f"FAIL ({len(r.failures)} failures below)"
    lines.append(("verdict", verdict))
    head = f"{r.dtype}: {r.rows:,} rows against mpmath in {row.seconds:.1f} s"
    if r.output_dtype != r.dtype:
        head += f" (returns {r.output_dtype})"
    width = max(len(label) for label, _ in lines)
    return "\n".join([head, *(f"  {label.ljust(width)}  {text}" for label, text in lines)])


def run(
    spec: str,
    kind: str | None,
    dtypes: list[str],
    *,
    max_ulps: float | None = None,
    quick: bool = False,
    json_path: pathlib.Path | None = None,
) -> int:
    """`grokbench audit`: audit the function `spec` in each of `dtypes`, printing each dtype's
    table as it finishes, then the failures and the verdict; 0 if it passes, else 1.
    ConfigError (one line) for bad input: found before any dtype is checked where it can be."""
    from grokbench.config import ConfigError
    from grokbench.runtime import FLOAT16_UNSUPPORTED, is_float16_link_error

    if max_ulps is not None and not max_ulps > 0:
        raise ConfigError(f"--max-ulps must be > 0; got {max_ulps}")
    fn = _load(spec)
    kind = kind or _infer_kind(spec)
    print(f"grokbench audit {spec} as {kind} ({KIND_CALLS[kind]}), bounds: ", end="")
    model = "numerics.testing.ULPS"
    if kind == "entropy":
        model = "the entropy's error model (numerics._check_per_token.entropy_bounds)"
    print(model if max_ulps is None else f"{max_ulps:g} ulps")
    rows = []
    for name in dtypes:
        try:
            rows.append(audit(fn, kind, name, max_ulps=max_ulps, quick=quick))
        except testing.SignatureError as err:
            if is_float16_link_error(err):
                raise ConfigError(f"{FLOAT16_UNSUPPORTED} (--dtypes {name})") from None
            raise ConfigError(f"{err} (is --kind {kind} right?)") from None
        print(f"\n{_format_dtype(rows[-1])}", flush=True)
    failures = [line for row in rows for line in row.result.failures]
    if json_path is not None:
        json_path.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=2) + "\n")
        print(f"\nwrote {json_path}")
    print()
    for line in failures:
        print(f"FAIL {line}")
    print(f"{'FAIL' if failures else 'PASS'}: {spec} as {kind} in {', '.join(dtypes)}")
    return 1 if failures else 0
