"""The doc blocks rendered from the results bundle (`figures.report.bundle`): one function per
block.

Each takes the loaded bundle ({'manifest', 'quick', 'full', 'bench'}) and returns the block's
Markdown. A block whose data the bundle lacks says so instead of printing a number.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from figures.report import paper

Bundle = dict[str, Any]

__all__ = ["BLOCKS"]

WIDTH = 92
"""The docs' line width: a rendered paragraph or bullet is wrapped to it, tables are not."""


def wrap(text: str) -> str:
    """Every line of `text` that is not a table row, wrapped to WIDTH (a bullet's
    continuation lines indented under its text)."""
    out = []
    for line in text.split("\n"):
        if not line or line.startswith("|"):
            out.append(line)
            continue
        indent = "  " if line.startswith("- ") else ""
        out.append(
            textwrap.fill(
                line,
                WIDTH,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(out)


# --- reading the bundle ------------------------------------------------------------------------


def _runs(b: Bundle, scale: str, recipe: str, **where: Any) -> list[dict]:
    """The summaries of `recipe`'s runs at `scale` whose config has every key = value."""
    runs = ((b.get(scale) or {}).get("runs") or {}).get(recipe) or []
    return [r for r in runs if all(r["config"].get(k) == v for k, v in where.items())]


def _rows(b: Bundle, scale: str) -> list[dict]:
    return (b.get(scale) or {}).get("report") or []


def _row(b: Bundle, scale: str, claim: str) -> dict | None:
    return next((r for r in _rows(b, scale) if r["claim"] == claim), None)


def _counts(rows: Iterable[dict]) -> dict[str, int]:
    rows = list(rows)
    return {s: sum(r["status"] == s for r in rows) for s in ("holds", "fails", "not tested")}


def _count_text(rows: Sequence[dict]) -> str:
    c = _counts(rows)
    return f"{c['holds']} holds, {c['fails']} fails, {c['not tested']} not tested of {len(rows)}"


def _span(values: Iterable[float], fmt: str = "{:.1f}") -> str:
    """'a-b' (or 'a' when equal) of the values, formatted."""
    values = sorted(values)
    if not values:
        return "-"
    lo, hi = fmt.format(values[0]), fmt.format(values[-1])
    return lo if lo == hi else f"{lo}-{hi}"


def _seeds(runs: Sequence[dict]) -> str:
    return _span([r["config"]["seed"] for r in runs], "{}")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _source(b: Bundle, entry: str, link: str, recipes: Sequence[str] = ()) -> str:
    """The italic line under a block: what made its numbers, and where they are."""
    m = b.get("manifest")
    if not m:
        return (
            "*Not in the results bundle yet: `python -m figures.report.bundle refresh` makes it.*"
        )
    e = m["entries"].get(entry, {})
    if entry == "full":
        held = m.get("full_recipes", [])
        command = "; ".join(f"`{e[r]['command']}`" for r in recipes if r in e and r in held)
        command = command or "-"
    else:
        command = f"`{e.get('command', '-')}`"
    machine = m["machine"]
    return (
        f"*From the results bundle ([{link}]({link})): {command}; `CONFIG_VERSION` "
        f"{m['versions']['CONFIG_VERSION']}, {m['made']}, {machine['cpu']} "
        f"({machine['cores']} cores, shared).*"
    )


def _missing(what: str) -> str:
    return (
        f"*{what}: not in the results bundle (`python -m figures.report.bundle refresh` makes it).*"
    )


# --- the report's counts -----------------------------------------------------------------------


def readme_counts(b: Bundle) -> str:
    quick, full = _rows(b, "quick"), _rows(b, "full")
    if not quick:
        return _missing("The report's counts")
    m = b["manifest"]
    text = (
        f"The quick build's report in the [results bundle](docs/data/manifest.json) says "
        f"{_count_text(quick)} claims"
    )
    if full:
        text += (
            f"; with the full-scale runs the bundle holds ({', '.join(m['full_recipes'])}), "
            f"{_count_text(full)}"
        )
    return text + " ([figures.md](docs/figures.md#the-reproduction-report))."


def figures_counts(b: Bundle) -> str:
    quick, full = _rows(b, "quick"), _rows(b, "full")
    if not quick:
        return _missing("The report's counts")
    sections = list(dict.fromkeys(r["section"] for r in [*quick, *full]))
    lines = [
        f"Quick build: {_count_text(quick)} claims. Full scale, on the runs of "
        + (", ".join(f"`{r}`" for r in b["manifest"]["full_recipes"]) if full else "none")
        + (f": {_count_text(full)} claims." if full else "."),
        "",
        "| section | quick: holds / fails / not tested | full: holds / fails / not tested |",
        "| --- | --- | --- |",
    ]
    for title in sections:

        def cell(rows, title=title):
            c = _counts(r for r in rows if r["section"] == title)
            return f"{c['holds']} / {c['fails']} / {c['not tested']}" if rows else "-"

        lines.append(f"| {title} | {cell(quick)} | {cell(full)} |")
    missing = b["manifest"].get("recipes_not_in_the_bundle_at_full_scale", [])
    lines += [
        "",
        "At full scale the rows of the recipes the bundle does not hold at that scale ("
        + ", ".join(f"`{r}`" for r in missing)
        + ") are `not tested`: they take hours on a 2-core CPU. fig6's `fig6-mod31` rows "
        "read runs that share Table 1's configs (fp32 and fp64 at eps 1e-12), so a store "
        "with Table 1's full runs tests them too.",
        "",
        _source(b, "quick", "data/manifest.json"),
    ]
    return "\n".join(lines)


# --- grokking: fig2, eps-settle, fig4 ----------------------------------------------------------


def _grokked(runs: Sequence[dict]) -> list[dict]:
    return [r for r in runs if r.get("grok_step") is not None]


def slingshot_measured(b: Bundle) -> str:
    std = _runs(b, "full", "fig2-top", loss="standard")
    fixed = _runs(b, "full", "fig2-top", loss="fixed")
    if not std or not fixed:
        return _missing("fig2-top at full scale")
    launch = _row(b, "full", "standard CE's spikes launch from margins at c32")
    return "\n".join(
        [
            f"On fig2-top (fp32, {std[0]['steps']:,} steps, seeds {_seeds(std)}) standard CE "
            "spikes "
            f"{[r['spikes'] for r in std]} times per seed; fixed CE "
            f"{[r['spikes'] for r in fixed]}. The report's launch row: "
            f"{launch['ours'] if launch else '-'} (c32 = 16.64; "
            f"{launch['status'] if launch else 'not in the bundle'}).",
            "",
            _source(b, "full", "data/manifest.json", ["fig2-top"]),
        ]
    )


def recipes_fig2_top(b: Bundle) -> str:
    fixed = _runs(b, "full", "fig2-top", loss="fixed")
    std = _runs(b, "full", "fig2-top", loss="standard")
    if not fixed or not std:
        return _missing("fig2-top at full scale")
    rate = _row(b, "full", "every seed groks: fixed CE on 20 seeds (a+b mod 31, fp32, eps 1e-8)")
    g = _grokked(fixed)
    lines = [
        f"Measured (`grokbench run fig2-top`, seeds {_seeds(fixed)} x {fixed[0]['steps']:,} "
        f"steps): fixed CE reaches >= 99% test on {len(g)} of "
        f"{len(fixed)} seeds (grok steps {_span([r['grok_step'] for r in g], '{:,.0f}')}; "
        f"final test {_span([100 * r['test_accuracy'] for r in fixed], '{:.2f}')}%), final "
        f"margins {_span([r['final_margin'] for r in fixed], '{:.2f}')} against the paper's "
        f"17.9, spikes {[r['spikes'] for r in fixed]}. Standard CE spikes "
        f"{[r['spikes'] for r in std]} times per seed and ends at "
        f"{_span([100 * r['test_accuracy'] for r in std], '{:.1f}')}% test.",
    ]
    if rate and rate["status"] != "not tested":
        lines += [
            "",
            f'"Groks on all 5 seeds" as a rate (`grokbench run fig2-top-seeds`): {rate["ours"]}; '
            f"the report's row {rate['status']} (its rule, fixed before running: every seed).",
        ]
    return "\n".join(
        [*lines, "", _source(b, "full", "data/manifest.json", ["fig2-top", "fig2-top-seeds"])]
    )


def _collapse_text(b: Bundle, recipe: str, task: str) -> str:
    setting = "(a^2+b^2 mod 97, MLP, Adam, lambda 0, eps 1e-16)"
    cube = "a^3+b mod 97, lambda 0: standard CE test accuracy, "
    claims = {  # the report's rows on the first spike, and how the text shows each
        "fig2-bottom": {
            f"standard CE's mean train margin hits c32 {setting}": (
                "mean margin first at c32 at step {} ({}; the paper: ~1,250)"
            ),
            f"standard CE test accuracy just before the spike {setting}": (
                "test accuracy just before the spike {}% ({}; the paper: 61%)"
            ),
            f"standard CE test accuracy after it (lowest) {setting}": (
                "lowest after it {}% ({}; the paper: 23%)"
            ),
        },
        "fig2-bottom-cube": {
            f"{cube}60 % before the spike": "just before the spike {}% ({}; the paper: 60%)",
            f"{cube}drops to 21 %": "lowest after it {}% ({}; the paper: 21%)",
        },
    }[recipe]
    std = _runs(b, "full", recipe, loss="standard")
    fixed = _runs(b, "full", recipe, loss="fixed")
    text = (
        f"{task}: standard CE ends at {_span([100 * r['test_accuracy'] for r in std])}% test "
        f"(spikes {[r['spikes'] for r in std]}), fixed CE at "
        f"{_span([100 * r['test_accuracy'] for r in fixed])}% (spikes "
        f"{[r['spikes'] for r in fixed]})"
    )
    parts = []
    for claim, shown in claims.items():
        r = _row(b, "full", claim)
        if r is None or r["status"] == "not tested":
            continue
        found = re.search(r"mean ([0-9.]+)", r["ours"]) or re.match(r"([0-9.]+)", r["ours"])
        parts.append(shown.format(found.group(1) if found else r["ours"], r["status"]))
    text += ("; the report's rows: " + ", ".join(parts)) if parts else ""
    return text


def recipes_fig2_bottom(b: Bundle) -> str:
    if not _runs(b, "full", "fig2-bottom"):
        return _missing("fig2-bottom at full scale")
    cube = bool(_runs(b, "full", "fig2-bottom-cube"))
    lines = [
        "Measured (`grokbench run fig2-bottom`"
        + (", `grokbench run fig2-bottom-cube`" if cube else "")
        + ", 3 seeds x 2,000 steps). "
        + _collapse_text(b, "fig2-bottom", "a^2+b^2")
        + "."
        + (" " + _collapse_text(b, "fig2-bottom-cube", "a^3+b") + "." if cube else ""),
    ]
    if not cube:
        lines.append("")
        lines.append(_missing("fig2-bottom-cube at full scale"))
    lines += ["", _source(b, "full", "data/manifest.json", ["fig2-bottom", "fig2-bottom-cube"])]
    return "\n".join(lines)


def recipes_eps_settle(b: Bundle) -> str:
    runs = _runs(b, "full", "eps-settle")
    if not runs:
        return _missing("eps-settle at full scale")
    parts = []
    for eps in sorted({r["config"]["eps"] for r in runs}, reverse=True):
        group = [r for r in runs if r["config"]["eps"] == eps]
        parts.append(
            f"eps {eps:g}: spikes {[r['spikes'] for r in group]}, final margins "
            f"{_span([r['final_margin'] for r in group], '{:.2f}')} (log(1/eps) "
            f"{math.log(1 / eps):.2f}), test {_span([100 * r['test_accuracy'] for r in group])}%"
        )
    return "\n".join(
        [
            f"Measured (`grokbench run eps-settle`, {len(runs)} runs): " + "; ".join(parts) + ".",
            "",
            _source(b, "full", "data/manifest.json", ["eps-settle"]),
        ]
    )


def equilibrium_measured(b: Bundle) -> str:
    groups = (b.get("full") or {}).get("equilibrium") or []
    if not groups:
        return _missing("fig4 at full scale")
    by = {(g["eps"], g["weight_decay"]): g for g in groups}
    lines = [
        "| eps | log(1/eps) | lambda = 1: plateau (dev) | plateaued "
        "| lambda = 0: plateau or peak (dev) |",
        "| --- | --- | --- | --- | --- |",
    ]

    def cell(g):
        if g is None or g["measured_mean"] is None:
            return "-"
        dev = "" if g["deviation"] is None else f" ({g['deviation']:+.2f})"
        return f"{g['measured_mean']:.2f} +- {g['measured_std']:.2f}{dev}"

    for eps in sorted({g["eps"] for g in groups}, key=lambda e: (e == 0, -e)):
        one, zero = by.get((eps, 1.0)), by.get((eps, 0.0))
        pred = "-" if eps == 0 else f"{math.log(1 / eps):.2f}"
        plateaued = f"{round(one['plateaued'] * one['n'])}/{one['n']}" if one else "-"
        lines.append(f"| {eps:g} | {pred} | {cell(one)} | {plateaued} | {cell(zero)} |")
    return "\n".join(
        [
            *lines,
            "",
            "A group that did not plateau shows its runs' mean peak margin (`grokbench "
            "equilibrium`'s rule); eps = 0 has no prediction: its fp32 underflow margin is "
            "-log(tiny) - log 480 = 81.2.",
            "",
            _source(b, "full", "data/manifest.json", ["fig4"]),
        ]
    )


# --- distillation ------------------------------------------------------------------------------


def distillation_measured(b: Bundle) -> str:
    runs = _runs(b, "full", "fig7")
    if not runs:
        return _missing("fig7 at full scale")
    typical = (b.get("full") or {}).get("fig7_typical_residual") or {}
    lines = [
        "| precision | loss | residual max | residual, typical row | KL final | KL max | "
        "max param distance | test acc final (min) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for precision in ("fp32/bf16", "fp32", "fp64"):
        for loss in ("fixed", "standard"):
            for r in (x for x in runs if x["config"]["precision"] == precision):
                if r["config"]["loss"] != loss:
                    continue
                t = typical.get(precision) if loss == "standard" else None
                # The KL students (KL(p || q) as the loss) beside the soft-target CE ones.
                kl = r["config"].get("distill_objective", "soft_target") == "kl"
                label = f"{loss}, KL loss" if kl else loss
                lines.append(
                    f"| {precision} | {label} | {r['residual_gradient']:.2g} | "
                    f"{'-' if t is None else f'{t:.2g}'} | {r['kl_final']:.2g} | "
                    f"{r['kl_max']:.2g} | {r['max_param_distance']:.3g} | "
                    f"{_pct(r['test_accuracy'])} ({_pct(r['min_test_accuracy'])}) |"
                )
    return "\n".join([*lines, "", _source(b, "full", "data/manifest.json", ["fig7"])])


# --- quantization ------------------------------------------------------------------------------

_BITS = ("w8a8", "w6a8", "w4a8", "w6a6")


def _losses(table: dict) -> list[tuple[float, str, str]]:
    """(relative loss over FP, family variant, width) for every row and width in the table."""
    out = []
    for r in table["rows"]:
        for bits in _BITS:
            if f"{bits}_perplexity" in r:
                out.append(
                    (
                        r[f"{bits}_perplexity"] / r["fp_perplexity"] - 1,
                        f"{r['family']} {r['label']}",
                        bits.upper(),
                    )
                )
    return out


def quant_quick(b: Bundle) -> str:
    table = (b.get("quick") or {}).get("quant")
    if not table:
        return _missing("The quick quant table")
    cells = "; ".join(
        f"{r['family']} {r['label']} {r['fp_perplexity']:.2f} / {r['max_inf_norm']:.1f} / "
        f"{r['avg_kurtosis']:.1f} / {r['w8a8_perplexity']:.2f}"
        for r in table["rows"]
    )
    worst = max(_losses(table))
    cfg = table["configs"][0]
    return "\n".join(
        [
            f"**`--quick`** (d_model {cfg['d_model']}, T = {cfg['seq_len']}, {cfg['steps']} "
            f"steps): FP / max inf-norm / kurtosis / W8A8: {cells}. The largest loss at any "
            f"width: {_pct(worst[0])} ({worst[1]}, {worst[2]}).",
            "",
            _source(b, "quick", "data/manifest.json"),
        ]
    )


def quant_report_rows(b: Bundle) -> str:
    rows = [r for r in _rows(b, "quick") if r["section"] == "Quantizable transformers"]
    if not rows:
        return _missing("The quick build's quant rows")
    lines = [f"The quick build's quant rows: {_count_text(rows)}."]
    for status in ("holds", "fails"):
        claims = [r["claim"] for r in rows if r["status"] == status]
        if claims:
            lines.append(f"- {status}: " + "; ".join(claims) + ".")
    untested = [r for r in rows if r["status"] == "not tested"]
    if untested:
        reasons = dict.fromkeys(r["note"].split(";")[0].split(" (")[0] for r in untested)
        lines.append(f"- not tested ({len(untested)}): " + "; ".join(sorted(reasons)) + ".")
    return "\n".join([*lines, "", _source(b, "quick", "data/manifest.json")])


# --- speed -------------------------------------------------------------------------------------


def benchmarks_ce(b: Bundle) -> str:
    from figures.report.paper import SLOWDOWN

    bench = b.get("bench")
    if not bench:
        return _missing("The cross-entropy benchmark")
    bound = {
        ("fixed CE", "optax CE"): SLOWDOWN["cross_entropy"].value,
        ("fixed soft CE", "standard soft CE"): SLOWDOWN["soft_target_cross_entropy"].value,
    }
    lines = [
        "| dtype | mode | fixed CE / optax | fixed soft / standard soft |",
        "| --- | --- | --- | --- |",
    ]
    for dtype in ("float32", "bfloat16"):
        med = bench.get(dtype)
        if not med:
            continue
        for mode in ("grad", "value_and_grad"):
            cells = []
            for (fixed, base), limit in bound.items():
                keys = [n if mode == "value_and_grad" else f"{n} (grad)" for n in (fixed, base)]
                t, t0 = med[keys[0]], med[keys[1]]
                verdict = "holds" if t / t0 <= limit else "fails"
                cells.append(
                    f"{t / t0:.3f}x ({1e3 * t:.1f} / {1e3 * t0:.1f} ms; <= {limit:.2f}x {verdict})"
                )
            lines.append(f"| {dtype} | {mode} | {cells[0]} | {cells[1]} |")
    m = b.get("manifest") or {}
    load = (m.get("entries", {}).get("bench") or {}).get("load_average_before")
    return "\n".join(
        [
            *lines,
            "",
            f"Medians of 9 interleaved runs on (2048, 32768) logits, {bench.get('device')}; "
            f"the load average was {load} when it started (a shared machine: read the ratios, "
            "not the milliseconds). The bounds are `figures.report.paper.SLOWDOWN`'s.",
            "",
            _source(b, "bench", "data/manifest.json"),
        ]
    )


def _bench_ratios(b: Bundle) -> str:
    bench = b.get("bench") or {}
    parts = []
    for dtype in ("float32", "bfloat16"):
        med = bench.get(dtype)
        if med:
            parts.append(
                f"{dtype}: fixed CE {med['fixed CE (grad)'] / med['optax CE (grad)']:.2f}x / "
                f"{med['fixed CE'] / med['optax CE']:.2f}x optax (gradient / value and "
                f"gradient), the fixed soft-target loss "
                f"{med['fixed soft CE (grad)'] / med['standard soft CE (grad)']:.2f}x / "
                f"{med['fixed soft CE'] / med['standard soft CE']:.2f}x the standard formula"
            )
    return "; ".join(parts)


# --- the README's headline results -------------------------------------------------------------


def _headline_cliffs(b: Bundle) -> str | None:
    """The cliffs per dtype (`grokbench cliffs`)."""
    cliffs = {c["dtype"]: c for c in b["quick"].get("cliffs", [])}
    if cliffs:
        return (
            "- **Softmax Collapse is exact and per dtype.** Standard cross-entropy's target "
            "gradient is exactly 0 from m = "
            + ", ".join(f"{c['standard_grad_zero_from']:.6g} ({d})" for d, c in cliffs.items())
            + " on (the first margins at or past p ln 2); the fixed one is 0 only from "
            + ", ".join(f"{c['fixed_grad_zero_from']:.6g}" for c in cliffs.values())
            + ", where e^-m itself underflows (`grokbench cliffs`; "
            "[numerics.md](docs/numerics.md))."
        )
    return None


def _headline_fig2_top(b: Bundle) -> str | None:
    """fig2-top at full scale: slingshots, grokking, the 20-seed rate."""
    fixed = _runs(b, "full", "fig2-top", loss="fixed")
    std = _runs(b, "full", "fig2-top", loss="standard")
    if fixed and std:
        g = _grokked(fixed)
        rate = _row(
            b, "full", "every seed groks: fixed CE on 20 seeds (a+b mod 31, fp32, eps 1e-8)"
        )
        text = (
            f"- **Slingshots and grokking (fig2-top, fp32, {fixed[0]['steps']:,} steps, "
            f"{len(fixed)} seeds).** Standard CE spikes {_span([r['spikes'] for r in std], '{}')} "
            f"times per seed and ends at {_span([100 * r['test_accuracy'] for r in std])}% test; "
            f"fixed CE never spikes ({[r['spikes'] for r in fixed]}), reaches >= 99% test on "
            f"{len(g)} of {len(fixed)} seeds and levels off at margins "
            f"{_span([r['final_margin'] for r in fixed], '{:.2f}')} (the paper: 17.9)"
        )
        if rate and rate["status"] != "not tested":
            text += f". On 20 seeds: {rate['ours']}"
        return text + " ([recipes.md](docs/recipes.md#fig2-top-slingshot-with-weight-decay))."
    return None


def _headline_fig2_bottom(b: Bundle) -> str | None:
    """fig2-bottom (and its cube variant) at full scale."""
    bottom = _runs(b, "full", "fig2-bottom")
    if bottom:
        return (
            "- **Slingshot without weight decay (fig2-bottom, a^2+b^2 mod 97).** "
            + _collapse_text(b, "fig2-bottom", "a^2+b^2")
            + (
                "; " + _collapse_text(b, "fig2-bottom-cube", "a^3+b")
                if _runs(b, "full", "fig2-bottom-cube")
                else ""
            )
            + " (the paper's fixed CE: 85%; "
            "[recipes.md](docs/recipes.md#fig2-bottom-slingshot-without-weight-decay))."
        )
    return None


def _headline_fig4(b: Bundle) -> str | None:
    """fig4's margin equilibria at full scale."""
    groups = (b.get("full") or {}).get("equilibrium") or []
    decayed = [g for g in groups if g["weight_decay"] == 1.0 and g["eps"] > 0]
    zero = next((g for g in groups if g["weight_decay"] == 1.0 and g["eps"] == 0), None)
    if decayed:
        offsets = ", ".join(f"{-g['deviation']:.2f}" for g in decayed if g["deviation"] is not None)
        eps = ", ".join(f"{g['eps']:g}" for g in decayed)
        return (
            "- **Margin equilibria (fig4, 3 seeds).** With weight decay LaProp's margins level "
            f"off {offsets} nats below log(1/eps) for eps {eps}"
            + (
                f"; eps = 0 climbs to {zero['measured_mean']:.1f} (the paper's fp32 "
                "underflow: 81.2)"
                if zero and zero["measured_mean"] is not None
                else ""
            )
            + " ([equilibrium.md](docs/equilibrium.md#measured))."
        )
    return None


def _headline_fig7(b: Bundle) -> str | None:
    """fig7's distillation at full scale."""
    fig7 = _runs(b, "full", "fig7")
    if fig7:
        fixed7 = [r for r in fig7 if r["config"]["loss"] == "fixed"]
        std16 = [
            r
            for r in fig7
            if r["config"]["loss"] == "standard" and r["config"]["precision"] == "fp32/bf16"
        ]
        still = all(
            r["kl_max"] == 0 and r["max_param_distance"] == 0 and r["residual_gradient"] == 0
            for r in fixed7
        )
        return (
            "- **Distillation (fig7).** The fixed soft-target loss "
            + (
                "keeps the student exactly at its teacher (gradient, KL and parameter distance "
                "0 at every step, in every precision)"
                if still
                else "moves the student"
            )
            + (
                f"; the standard one in bf16 compute drops test accuracy to "
                f"{_pct(std16[0]['min_test_accuracy'])}"
                if std16
                else ""
            )
            + " ([distillation.md](docs/distillation.md#measured-full-recipe))."
        )
    return None


def _headline_quant(b: Bundle) -> str | None:
    """The quant lab's quick table."""
    table = b["quick"].get("quant")
    if table:
        by = {(r["family"], r["variant"]): r for r in table["rows"]}
        worst = max(_losses(table))
        van = [r for r in (by.get((f, "vanilla")) for f in ("encoder", "decoder")) if r]
        outliers = any(r["max_inf_norm"] >= paper.OUTLIER_MIN_INF_NORM for r in van)
        return (
            "- **Quantization (quick scale).** Vanilla's max inf-norm is "
            + " and ".join(f"{r['max_inf_norm']:.1f} ({r['family']})" for r in van)
            + (
                f" (the report's outlier line: {paper.OUTLIER_MIN_INF_NORM:g})"
                if outliers
                else f": no outliers at this size (the report's line: "
                f"{paper.OUTLIER_MIN_INF_NORM:g})"
            )
            + f", and no variant loses more than {_pct(worst[0])} at W8A8. The recipe-scale "
            "runs and the corpora with other sinks (`uniform_backcopy`, `delimited_backcopy`) "
            "are in [quant.md](docs/quant.md) (not in the bundle: each takes about an hour here)."
        )
    return None


def _headline_speed(b: Bundle) -> str | None:
    """The cross-entropy benchmark."""
    if b.get("bench"):
        return (
            f"- **Speed** ([benchmarks.md](docs/benchmarks.md#cross-entropy)). On (2048, "
            f"32768) logits, {_bench_ratios(b)}."
        )
    return None


def readme_headline(b: Bundle) -> str:
    """The README's headline results: one bullet per result the bundle holds."""
    if not b.get("manifest") or not b.get("quick"):
        return _missing("The headline results")
    m = b["manifest"]
    parts = (
        _headline_cliffs,
        _headline_fig2_top,
        _headline_fig2_bottom,
        _headline_fig4,
        _headline_fig7,
        _headline_quant,
        _headline_speed,
    )
    out = [text for part in parts if (text := part(b))]
    out.append(
        "- **Table 1 at full scale** (81 runs x 10,000 steps, about 40 minutes on an idle "
        "2-core CPU) is not in the bundle; the table measured at `CONFIG_VERSION` 4 is in "
        "[studies/table1-full-scale.md](docs/studies/table1-full-scale.md)."
    )
    return "\n".join(
        [
            *out,
            "",
            f"*Numbers from the results bundle ([docs/data](docs/data/manifest.json)): "
            f"`python -m figures.report.bundle refresh`, `CONFIG_VERSION` "
            f"{m['versions']['CONFIG_VERSION']}, {m['made']}, {m['machine']['cpu']} "
            f"({m['machine']['cores']} cores, shared).*",
        ]
    )


_BLOCKS: dict[str, Callable[[Bundle], str]] = {
    "readme-counts": readme_counts,
    "readme-headline": readme_headline,
    "figures-counts": figures_counts,
    "slingshot-measured": slingshot_measured,
    "recipes-fig2-top": recipes_fig2_top,
    "recipes-fig2-bottom": recipes_fig2_bottom,
    "recipes-eps-settle": recipes_eps_settle,
    "equilibrium-measured": equilibrium_measured,
    "distillation-measured": distillation_measured,
    "quant-quick": quant_quick,
    "quant-report-rows": quant_report_rows,
    "benchmarks-ce": benchmarks_ce,
}
BLOCKS: dict[str, Callable[[Bundle], str]] = {
    name: (lambda b, fn=fn: wrap(fn(b))) for name, fn in _BLOCKS.items()
}
"""Every block a doc may hold, by name: its renderer, wrapped to the docs' width."""
