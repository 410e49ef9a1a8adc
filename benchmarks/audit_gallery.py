"""The audit gallery: `grokbench audit` of the common softmax and cross-entropy functions.

    python benchmarks/audit_gallery.py [--out docs/audit-gallery.md] [--dtypes bf16,fp32]

Audits, in every dtype, side by side: optax's integer-label and soft-label
cross-entropies, jax.nn's log_softmax and softmax, the fix paper's reference formulas
(its section 2 and 3 listings, below, verbatim but for names), StableMax (against its
own mpmath oracle: it is a different function) and this lab's fixed functions. Writes
the Markdown page OUT; rerun it when a dependency moves.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import time

import jax
import jax.numpy as jnp
import optax

import numerics
from grokbench import audit
from numerics import oracle, testing


# The fix paper's reference implementations (section 2, equations 5 and 6; section 3,
# equation 9), as printed there.
def paper_log_softmax(z):
    i_max = jnp.argmax(z, axis=-1)
    z_max = jnp.take_along_axis(z, i_max[..., None], axis=-1)  # Max logit.
    is_max = jax.nn.one_hot(i_max, z.shape[-1], dtype=bool)  # Max mask.
    shifted = jnp.where(is_max, 0.0, z - z_max)  # Exact 0 at argmax.
    others = jnp.where(is_max, -jnp.inf, shifted)  # Exclude argmax from sum.
    m = -jax.nn.logsumexp(others, axis=-1, keepdims=True)  # Logit margin.
    return shifted - jax.nn.softplus(-m)  # log_softmax(z).


def paper_softmax(z):
    return jnp.exp(paper_log_softmax(z))


def paper_cross_entropy(z, t):
    z_t = jnp.take_along_axis(z, t[..., None], axis=-1)  # Target logit.
    is_t = jax.nn.one_hot(t, z.shape[-1], dtype=bool)  # Target mask.
    others = jnp.where(is_t, -jnp.inf, z - z_t)  # Exclude target from sum.
    m = -jax.nn.logsumexp(others, axis=-1)  # Logit margin.
    return jax.nn.softplus(-m)  # -log_softmax(z)_t.


def paper_soft_target_cross_entropy(z_s, z_t):
    log_q = paper_log_softmax(z_s)
    q, p = jnp.exp(log_q), paper_softmax(z_t)
    delta = z_s - z_t  # Logit difference.
    d = delta - jnp.sum(p * delta, axis=-1, keepdims=True)  # Center under p.
    s = d - jnp.log1p(jnp.sum(p * jnp.expm1(d), axis=-1, keepdims=True))  # log(q / p).
    u = jnp.where(jnp.abs(s) < 1, p * jnp.expm1(s), q - p)  # Difference q - p.
    g = u - q * jnp.sum(u, axis=-1, keepdims=True)  # Ensure sum(g) = 0.
    sg = jax.lax.stop_gradient
    loss = -jnp.sum(p * sg(log_q), axis=-1)  # Forward loss.
    return loss + jnp.sum(sg(g) * (z_s - sg(z_s)), axis=-1)  # Custom gradient g.


def optax_soft_labels(student, teacher):
    """optax.softmax_cross_entropy on the teacher's softmax: the formula users write."""
    return optax.softmax_cross_entropy(student, jax.nn.softmax(teacher))


# (kind, name shown, function, extra arguments of the check)
GALLERY = [
    (
        "ce",
        "optax.softmax_cross_entropy_with_integer_labels",
        optax.softmax_cross_entropy_with_integer_labels,
        {},
    ),
    ("ce", "paper eq. 6 (cross_entropy)", paper_cross_entropy, {}),
    (
        "ce",
        "StableMax (numerics.stablemax_cross_entropy)",
        numerics.stablemax_cross_entropy,
        {"reference": oracle.stablemax_cross_entropy_value_and_grad},
    ),
    ("ce", "ours: numerics.cross_entropy", numerics.cross_entropy, {}),
    ("soft-target", "optax.softmax_cross_entropy(s, softmax(t))", optax_soft_labels, {}),
    ("soft-target", "paper eq. 9 (soft_target_cross_entropy)", paper_soft_target_cross_entropy, {}),
    (
        "soft-target",
        "ours: numerics.soft_target_cross_entropy",
        numerics.soft_target_cross_entropy,
        {},
    ),
    ("log_softmax", "jax.nn.log_softmax", jax.nn.log_softmax, {}),
    ("log_softmax", "paper eq. 5 (log_softmax)", paper_log_softmax, {}),
    ("log_softmax", "ours: numerics.log_softmax", numerics.log_softmax, {}),
    ("softmax", "jax.nn.softmax", jax.nn.softmax, {}),
    ("softmax", "paper (exp of eq. 5)", paper_softmax, {}),
    ("softmax", "ours: numerics.softmax", numerics.softmax, {}),
]

TITLES = {
    "ce": "Integer-label cross-entropy: fn(logits, labels)",
    "soft-target": "Soft-target cross-entropy: fn(student_logits, teacher_logits)",
    "log_softmax": "log_softmax: fn(x)",
    "softmax": "softmax: fn(x)",
}
HEADER = (
    "| function | dtype | value ulps (bound) | grad ulps (bound) | grad = 0 from | "
    "value = 0 from | grad sum (eps) | NaN | inf/NaN rows | 0 at teacher | speed | audit |"
)


def _margin(value: float | None) -> str:
    return "never" if value is None else f"{value:.6g}"


def _row(name: str, row: audit.AuditRow) -> str:
    r = row.result
    cells = [
        name,
        r.dtype,
        f"{r.value_ulps:.3g} ({r.value_bound:.3g})",
        f"{r.grad_ulps:.3g} ({r.grad_bound:.3g})",
        "-" if r.kind == "soft-target" else _margin(r.grad_dies_at),
        _margin(r.value_zero_at) if r.kind in ("ce", "log_softmax") else "-",
        f"{r.grad_sum_error:.3g}",
        "NaN" if r.nan_propagates else "finite",
        str(r.nonfinite_rows),
        {None: "-", True: "yes", False: "no"}[r.zero_at_teacher],
        f"{row.ms / row.reference_ms:.2f}x",
        "pass" if r.ok else f"FAIL ({len(r.failures)})",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("docs/audit-gallery.md"))
    parser.add_argument("--dtypes", default="bf16,fp16,fp32,fp64")
    args = parser.parse_args()
    dtypes = [testing.as_dtype(d) for d in args.dtypes.split(",")]
    start = time.perf_counter()
    sections: dict[str, list[str]] = {}
    first_lines: list[str] = []
    for kind, name, fn, check in GALLERY:
        for dtype in dtypes:
            row = audit.audit(fn, kind, dtype, **check)
            print(f"{row.seconds:5.1f} s  {name} {dtype.name}: {len(row.result.failures)} failures")
            sections.setdefault(kind, []).append(_row(name, row))
            if row.result.failures:
                first_lines.append(f"- {name}: {row.result.failures[0]}")
    rows, cols = audit.SPEED_SHAPE
    load = os.getloadavg()[0]
    page = [
        "# Audit gallery",
        "",
        "`grokbench audit` (see [audit.md](audit.md)) of the common softmax and cross-entropy",
        "functions, side by side, generated by `python benchmarks/audit_gallery.py` on "
        f"{platform.machine()} CPU with jax {jax.__version__} and optax {optax.__version__} "
        f"in {time.perf_counter() - start:.0f} s (load average {load:.1f} on "
        f"{os.cpu_count()} cores at the end: speed ratios from a busy machine are rough). "
        "Regenerate it when a dependency moves.",
        "",
        "Columns: the worst value and gradient errors in ulps of the dtype against mpmath, with "
        "the bound at that element (the lab's table, plus conditioning on random rows); the "
        "first margin m (logits [m, 0]) from which the target gradient (for the normalizers: "
        "d out[0] / dx0) and the loss (log_softmax[0]) are exactly 0 though the exact value is "
        "a normal number; the worst |sum g| / (eps sum |g|); what a NaN logit gives; rows with "
        "inf or NaN output where the exact value is finite; whether the soft-target gradient "
        f"is exactly 0 at student = teacher; time of value and gradient on ({rows}, {cols}) "
        "logits relative to optax's function of the same kind (jax.nn's for the normalizers), "
        "and the verdict with its number of failure lines.",
        "",
        "StableMax is a different function from softmax cross-entropy, so it is audited "
        "against its own mpmath reference (`oracle.stablemax_cross_entropy_value_and_grad`). "
        "The precision cliffs: bf16 5.545, fp16 7.625, fp32 16.636, fp64 36.737.",
    ]
    for kind, lines in sections.items():
        page += ["", f"## {TITLES[kind]}", "", HEADER, "|" + " --- |" * 12, *lines]
    page += ["", "## First failure line of each failing audit", "", *first_lines, ""]
    args.out.write_text("\n".join(page))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
