"""Quantization-lab figures, drawn from stored results (never trains).

`draw_quant_figures(table, out)` takes the table `grokbench.quant.run_quant` returns (or the
path of its quant_table.json) and writes, per model family:

- quant_attention_FAMILY.png: for each variant, the attention pattern of its most
  no-op-like head (the head with the largest mean attention mass on delimiter and special
  tokens) on the first validation sequence, with the key/query tokens on the axes;
- quant_outlier_dims_FAMILY.png: for each variant and layer, how many outliers (entries
  beyond 6 sigma) each hidden dimension of the FFN output carries on the validation set;
- quant_sweep_AXIS.png, when the table sweeps one field (`grokbench quant alpha=2,4,8`):
  FP perplexity, max inf-norm and the W8A8 gap against it, one line per family and variant.
"""

from __future__ import annotations

import functools
import json
import pathlib

import matplotlib.colors
import numpy as np

from figures import paper
from figures._common import new_figure, save_to
from figures.claims import Evidence, Row, claim_row
from figures.registry import Figure
from grokbench.store import atomic_write_json

__all__ = [
    "ABLATIONS_FILE",
    "FIGURE",
    "claims",
    "draw_quant_figures",
]

ABLATIONS_FILE = "quant_ablations.json"
"""The full build's ablation sweeps: {"vanilla": table, AXIS: table} (`run_ablations`)."""


def _load_table(table: dict | str | pathlib.Path) -> dict:
    if isinstance(table, dict):
        return table
    path = pathlib.Path(table)
    if path.is_dir():
        path = path / "quant_table.json"
    return json.loads(path.read_text())


def _analysis(row: dict) -> dict[str, np.ndarray]:
    with np.load(row["analysis"]) as npz:
        return {k: npz[k] for k in npz.files}


def _save(fig, title: str, out: pathlib.Path, name: str) -> list[pathlib.Path]:
    fig.suptitle(title)
    return save_to(fig, out, name)


def _attention_figure(rows: list[dict], family: str, out: pathlib.Path) -> list[pathlib.Path]:
    n = len(rows)
    cols = min(n, 3)
    grid_rows = -(-n // cols)
    fig, axes = new_figure(grid_rows, cols, width=4.6 * cols, height=4.4)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    for ax, row in zip(axes.ravel(), rows, strict=False):
        data = _analysis(row)
        mass = data["delimiter_attention"]  # (L, H)
        layer, head = np.unravel_index(int(np.argmax(mass)), mass.shape)
        probs = data["example_probs"][layer, head]
        names = data["token_names"]
        labels = [str(names[int(t)]) for t in data["example_tokens"]]
        # Square-root colour scale: a no-op head's small off-delimiter mass stays visible.
        norm = matplotlib.colors.PowerNorm(0.5, vmin=0.0, vmax=max(float(probs.max()), 1e-6))
        ax.imshow(probs, cmap="viridis", norm=norm)
        ticks = np.arange(len(labels))
        ax.set_xticks(ticks, labels, fontsize=4, rotation=90)
        ax.set_yticks(ticks, labels, fontsize=4)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        dead = " (all zero: dead)" if not probs.any() else ""
        ax.set_title(
            f"{row['label']}\nlayer {layer} head {head}: "
            f"{mass[layer, head]:.0%} of attention on delimiters{dead}",
            fontsize=8,
        )
    title = f"Most no-op-like head per variant ({family}, first validation sequence)"
    return _save(fig, title, out, f"quant_attention_{family}")


def _outlier_dims_figure(rows: list[dict], family: str, out: pathlib.Path) -> list[pathlib.Path]:
    layers = _analysis(rows[0])["outlier_dims"].shape[0]
    fig, axes = new_figure(len(rows), layers, width=3.2 * layers, height=1.7, sharex=True)
    for i, row in enumerate(rows):
        dims = _analysis(row)["outlier_dims"]  # (L, D)
        for layer in range(layers):
            ax = axes[i, layer]
            ax.bar(np.arange(dims.shape[1]), dims[layer], width=1.0, color="tab:red")
            ax.set_ylim(bottom=0, top=max(1.0, float(dims.max()) * 1.1))
            if not dims[layer].any():
                ax.text(0.5, 0.5, "no outliers", ha="center", va="center", transform=ax.transAxes)
            ax.tick_params(labelsize=6)
            if i == 0:
                ax.set_title(f"layer {layer} FFN output", fontsize=8)
            if layer == 0:
                ax.set_ylabel(row["label"].replace(" (", "\n("), fontsize=6)
            if i == len(rows) - 1:
                ax.set_xlabel("hidden dimension", fontsize=7)
    title = f"Outliers (> 6 sigma) per hidden dimension ({family}, validation set)"
    return _save(fig, title, out, f"quant_outlier_dims_{family}")


def _sweep_figure(rows: list[dict], axis: str, out: pathlib.Path) -> list[pathlib.Path]:
    """The paper's ablation plots (Fig. 6 alpha, Fig. 7 pi_init, Table 1 zeta, Table 6 LN
    weight decay): FP perplexity, max inf-norm and the W8A8 gap against the swept value."""
    panels = (
        ("FP perplexity", lambda r: r["fp_perplexity"]),
        ("max inf-norm", lambda r: r["max_inf_norm"]),
        ("W8A8 / FP perplexity", lambda r: r["w8a8_perplexity"] / r["fp_perplexity"]),
    )
    fig, axes = new_figure(1, len(panels), width=4.2 * len(panels), height=3.4)
    axes = axes[0]
    lines: dict[str, list[dict]] = {}
    for r in rows:
        lines.setdefault(f"{r['family']} {r['variant']}", []).append(r)
    for ax, (name, value) in zip(axes, panels, strict=True):
        for label, members in lines.items():
            members = sorted(members, key=lambda r: float(r["sweep"][axis]))
            xs = [float(r["sweep"][axis]) for r in members]
            ax.plot(xs, [value(r) for r in members], "o-", label=label)
        ax.set_xlabel(axis)
        ax.set_title(name, fontsize=9)
    axes[0].legend(fontsize=7)
    return _save(fig, f"Sweep of {axis}", out, f"quant_sweep_{axis}")


def draw_quant_figures(
    table: dict | str | pathlib.Path, out: str | pathlib.Path
) -> list[pathlib.Path]:
    """Write the attention and outlier-dimension figures of every family; return their paths."""
    table = _load_table(table)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for family in ("encoder", "decoder"):
        rows = [r for r in table["rows"] if r["family"] == family]
        if rows:
            paths += _attention_figure(rows, family, out)
            paths += _outlier_dims_figure(rows, family, out)
    axes = {k for r in table["rows"] for k in r.get("sweep", {})}
    if len(axes) == 1:  # one swept field: the paper's ablation plot
        paths += _sweep_figure(table["rows"], axes.pop(), out)
    return paths


def draw(ctx) -> list[pathlib.Path]:
    """`grokbench figures quant`: the quant lab at the build's scale (cached), then its table
    (quant_table.json, quant_table.md) and figures in the build's output directory. The full
    build adds the paper's ablations (`grokbench.quant.ABLATIONS`, run at the quick scale:
    14 short runs instead of ~40 minutes at full scale): quant_ablations.json and one
    quant_sweep_AXIS.png each. The quick build draws none (it stays within its budget)."""
    from grokbench import quant

    table = quant.run_quant(ctx.quick, ctx.out, {}, results=ctx.store.root, progress=ctx.progress)
    paths = [ctx.out / "quant_table.json", ctx.out / "quant_table.md"]
    paths += draw_quant_figures(table, ctx.out)
    if not ctx.quick:
        tables = quant.run_ablations(ctx.store.root, ctx.progress)
        atomic_write_json(ctx.out / ABLATIONS_FILE, tables)
        paths.append(ctx.out / ABLATIONS_FILE)
        for axis in quant.ABLATIONS:
            paths += _sweep_figure(tables[axis]["rows"], axis, ctx.out)
    return paths


# --- the report's claims (Quantizable Transformers) -------------------------------------------

_LAB = "`grokbench figures quant` (or `grokbench quant`)"


def _rows_by(table) -> dict[tuple[str, str], dict]:
    return {(r["family"], r["variant"]): r for r in table["rows"]} if table else {}


def _gap(r: dict, bits: str = "w8a8") -> float:
    return r[f"{bits}_perplexity"] / r["fp_perplexity"] - 1


def _fp_to_w8a8(r: dict) -> str:
    """A row's FP and W8A8 perplexities and the relative gap, as the report prints them."""
    return f"FP {r['fp_perplexity']:.2f} -> W8A8 {r['w8a8_perplexity']:.2f} ({100 * _gap(r):+.1f}%)"


def _label(family: str, variant: str, r: dict | None) -> str:
    """The variant's name; the decoder gate says where its pi_init differs from the paper's."""
    name = r["label"] if r else variant
    want = paper.QUANT_PAPER_PI_INIT.get(family)
    have = r.get("pi_init") if r else None
    if have is not None and want is not None and variant.startswith("gated") and have != want:
        name += f" (pi_init {r['pi_init']:g}; the paper's {want:g})"
    return name


def _table2_rows(by, why_missing) -> list[Row]:
    rows = []
    for family, variants in paper.QUANT_TABLE2.items():
        van = by.get((family, "vanilla"))
        p_inf, p_kurt, p_fp, p_w8 = variants["vanilla"]
        why = why_missing(family, "vanilla")
        loses = van is not None and _gap(van) >= paper.VANILLA_LOSS
        premise = (
            f"premise not met: {family} vanilla W8A8 is within "
            f"{paper.VANILLA_LOSS:.0%} of FP here, so there is nothing for a fix to recover"
        )
        rows += [
            claim_row(
                claim=f"{family}: vanilla attention develops activation outliers",
                source=paper.QUANT_WHERE,
                paper=f"max inf-norm {p_inf}, kurtosis {p_kurt}",
                ours=lambda van=van: (
                    f"max inf-norm {van['max_inf_norm']:.1f}, kurtosis {van['avg_kurtosis']:.1f}"
                ),
                tolerance=f"max inf-norm >= {paper.OUTLIER_MIN_INF_NORM:g} (above every fixed "
                "model of Table 2, below every vanilla one)",
                ok=None if van is None else van["max_inf_norm"] >= paper.OUTLIER_MIN_INF_NORM,
                why=why,
            ),
            claim_row(
                claim=f"{family}: vanilla W8A8 loses against floating point",
                source=paper.QUANT_WHERE,
                paper=f"FP {p_fp} -> W8A8 {p_w8}",
                ours=lambda van=van: _fp_to_w8a8(van),
                tolerance=f"W8A8 perplexity >= {1 + paper.VANILLA_LOSS:g}x FP",
                ok=None if van is None else loses,
                why=why,
            ),
        ]
        for variant, (f_inf, f_kurt, f_fp, f_w8) in variants.items():
            if variant == "vanilla":
                continue
            r = by.get((family, variant))
            name = _label(family, variant, r)
            why = why_missing(family, variant) if r is None else why_missing(family, "vanilla")
            both = r is not None and van is not None
            outliers = both and van["max_inf_norm"] >= paper.OUTLIER_MIN_INF_NORM
            no_outliers = (
                f"premise not met: {family} vanilla has no outliers here (max inf-norm below "
                f"{paper.OUTLIER_MIN_INF_NORM:g}), so there are none to cut"
            )
            paper_gap = f_w8 / f_fp - 1
            rows += [
                claim_row(
                    claim=f"{family}: {name} cuts the {what}",
                    source=paper.QUANT_WHERE,
                    paper=f"{p_val} -> {f_val} ({p_val / f_val:.0f}x lower)",
                    ours=lambda r=r, van=van, key=key: (
                        f"{van[key]:.1f} -> {r[key]:.1f} ({van[key] / r[key]:.2g}x lower)"
                    ),
                    tolerance=f"at least {paper.REDUCTION:g}x lower ('1-3 orders of magnitude')",
                    ok=None if not outliers else r[key] * paper.REDUCTION <= van[key],
                    why=why if not both else no_outliers,
                )
                for what, key, p_val, f_val in (
                    ("max inf-norm", "max_inf_norm", p_inf, f_inf),
                    ("average kurtosis", "avg_kurtosis", p_kurt, f_kurt),
                )
            ]
            rows += [
                claim_row(
                    claim=f"{family}: {name} keeps FP perplexity level with vanilla",
                    source=paper.QUANT_WHERE,
                    paper=f"FP {p_fp} -> {f_fp}",
                    ours=lambda r=r, van=van: (
                        f"FP {van['fp_perplexity']:.2f} -> {r['fp_perplexity']:.2f}"
                    ),
                    tolerance=f"at most {paper.FP_LEVEL:.0%} above vanilla ('maintain or "
                    "slightly improve')",
                    ok=None
                    if not both
                    else r["fp_perplexity"] <= (1 + paper.FP_LEVEL) * van["fp_perplexity"],
                    why=why,
                ),
                claim_row(
                    claim=f"{family}: {name} quantizes to W8A8 close to FP, where vanilla loses",
                    source=paper.QUANT_WHERE,
                    paper=f"FP {f_fp} -> W8A8 {f_w8} ({100 * paper_gap:+.1f}%)",
                    ours=lambda r=r: _fp_to_w8a8(r),
                    tolerance=f"within the paper's own gap for it, {100 * paper_gap:+.1f}%",
                    ok=None if not both or not loses else _gap(r) <= paper_gap,
                    why=why if not both else premise,
                ),
            ]
    return rows


def _opt_clipped_rows(by, why_missing) -> list[Row]:
    """Table 6's negative result, in two rows: kurtosis up (measurable at any scale), and
    W8A8 worse than vanilla's, which needs quantization to hurt at all (vanilla loses)."""
    van, r = by.get(("decoder", "vanilla")), by.get(("decoder", "clipped"))
    _, p_kurt, p_fp, p_w8 = paper.OPT_CLIPPED
    _, v_kurt, v_fp, v_w8 = paper.QUANT_TABLE2["decoder"]["vanilla"]
    why = why_missing("decoder", "clipped" if r is None else "vanilla")
    both = van is not None and r is not None
    loses = both and _gap(van) >= paper.VANILLA_LOSS
    row = functools.partial(claim_row, source=f"{paper.QT}, Table 6, Sec. 5.4")
    return [
        row(
            claim="decoder: clipped softmax raises kurtosis above vanilla's",
            paper=f"kurtosis {v_kurt} -> {p_kurt}",
            ours=lambda: f"kurtosis {van['avg_kurtosis']:.1f} -> {r['avg_kurtosis']:.1f}",
            tolerance="higher than vanilla's",
            ok=None if not both else r["avg_kurtosis"] > van["avg_kurtosis"],
            why=why,
        ),
        row(
            claim="decoder: clipped softmax quantizes worse than vanilla, where vanilla loses",
            paper=f"W8A8 {v_w8} (FP {v_fp}) -> {p_w8} (FP {p_fp})",
            ours=lambda: f"vanilla {_fp_to_w8a8(van)}; clipped {_fp_to_w8a8(r)}",
            tolerance="W8A8 perplexity and its gap over FP both larger than vanilla's",
            ok=None
            if not loses
            else r["w8a8_perplexity"] > van["w8a8_perplexity"] and _gap(r) > _gap(van),
            why=why
            if not both
            else "premise not met: decoder vanilla W8A8 is within "
            f"{paper.VANILLA_LOSS:.0%} of FP here, so quantization hurts nothing",
        ),
    ]


def _table5_rows(by, why_missing) -> list[Row]:
    van = by.get(("encoder", "vanilla"))
    loses = van is not None and _gap(van) >= paper.VANILLA_LOSS
    rows = []
    for variant, stated in paper.TABLE5_GATES.items():
        r = by.get(("encoder", variant))
        rows.append(
            claim_row(
                claim=f"encoder: {_label('encoder', variant, r)} reduces outliers and improves "
                "W8A8 against vanilla, where vanilla loses",
                source=f"{paper.QT}, Table 5",
                paper=f"{stated} vs vanilla 1294",
                ours=lambda r=r: (
                    f"max inf-norm {van['max_inf_norm']:.1f} -> "
                    f"{r['max_inf_norm']:.1f}; W8A8 {van['w8a8_perplexity']:.2f} -> "
                    f"{r['w8a8_perplexity']:.2f}"
                ),
                tolerance="both lower than vanilla's",
                ok=None
                if r is None or not loses
                else r["max_inf_norm"] < van["max_inf_norm"]
                and r["w8a8_perplexity"] < van["w8a8_perplexity"],
                why=why_missing("encoder", variant if r is None else "vanilla")
                if r is None or van is None
                else "premise not met: encoder vanilla W8A8 does not lose",
            )
        )
    return rows


def _table10_rows(by, why_missing) -> list[Row]:
    van = by.get(("encoder", "vanilla"))
    rows = []
    for bits, (p_van, *p_fixed) in paper.TABLE10.items():
        key = bits.lower()
        for variant, p in zip(("clipped", "gated_mlp"), p_fixed, strict=True):
            r = by.get(("encoder", variant))
            have = r is not None and van is not None and f"{key}_perplexity" in r
            loses = have and _gap(van, key) >= paper.VANILLA_LOSS
            rows.append(
                claim_row(
                    claim=f"encoder {bits}: {_label('encoder', variant, r)} beats vanilla",
                    source=f"{paper.QT}, Table 10",
                    paper=f"{p} vs vanilla {p_van}",
                    ours=lambda r=r, key=key: (
                        f"{r[key + '_perplexity']:.2f} vs vanilla "
                        f"{van[key + '_perplexity']:.2f} (FP {van['fp_perplexity']:.2f})"
                    ),
                    tolerance="lower perplexity than vanilla's, where vanilla loses "
                    f">= {paper.VANILLA_LOSS:.0%} at {bits}",
                    ok=None if not loses else r[f"{key}_perplexity"] < van[f"{key}_perplexity"],
                    why=why_missing("encoder", variant if r is None else "vanilla")
                    if r is None or van is None
                    else f"premise not met: vanilla loses < {paper.VANILLA_LOSS:.0%} at {bits}"
                    if have
                    else f"no {bits} column in the table",
                )
            )
    return rows


def _sweep_rows(sweeps: dict, axis: str, variant: str) -> list[dict]:
    rows = [r for r in sweeps[axis]["rows"] if r["variant"] == variant]
    return sorted(rows, key=lambda r: float(r["sweep"][axis]))


def _vanilla(sweeps: dict, family: str) -> dict:
    return _rows_by(sweeps["vanilla"])[(family, "vanilla")]


def _cuts(r: dict, van: dict) -> bool:
    """Table 2's test of a fix: max inf-norm `REDUCTION` x lower, FP within `FP_LEVEL`."""
    return (
        r["max_inf_norm"] * paper.REDUCTION <= van["max_inf_norm"]
        and r["fp_perplexity"] <= (1 + paper.FP_LEVEL) * van["fp_perplexity"]
    )


def _points(rows: list[dict], axis: str) -> str:
    return "; ".join(
        f"{axis} {r['sweep'][axis]:g}: FP {r['fp_perplexity']:.2f}, "
        f"max inf-norm {r['max_inf_norm']:.1f}"
        for r in rows
    )


def _check_gamma(s: dict) -> bool:  # alpha = 2 of 1/2, 2, 8: the paper's recommended range
    return _cuts(_sweep_rows(s, "gamma", "clipped")[1], _vanilla(s, "encoder"))


def _check_pi_init(s: dict) -> bool:
    van = _vanilla(s, "encoder")
    return all(_cuts(r, van) for r in _sweep_rows(s, "pi_init", "gated"))


def _check_zeta(s: dict) -> bool:
    base, *rest = _sweep_rows(s, "zeta", "clipped")
    return all(abs(r["max_inf_norm"] / base["max_inf_norm"] - 1) <= 0.25 for r in rest)


def _check_ln_weight_decay(s: dict) -> bool:
    with_wd, without = (
        next(
            r
            for r in s["ln_weight_decay"]["rows"]
            if r["variant"] == "vanilla" and r["sweep"]["ln_weight_decay"] is on
        )
        for on in (True, False)
    )
    return with_wd["max_inf_norm"] * 2 <= without["max_inf_norm"]


ABLATION_CLAIMS = {
    "gamma": (
        "clipped softmax with alpha = 2 (gamma = -2/T) cuts outliers at level FP perplexity",
        "Fig. 6",
        "alpha in [2, 4]: max inf-norm ~10-100x below vanilla, FP log-ppl close to vanilla's",
        "at least 10x lower max inf-norm than vanilla, FP within 1 % (Table 2's test)",
        "encoder",
        _check_gamma,
    ),
    "pi_init": (
        "the linear gate cuts outliers at level FP perplexity for every pi_init in [0.25, 0.9]",
        "Fig. 7",
        "pi_init 0.25-0.9: FP close to vanilla's, W8A8 far better (BERT-6L)",
        "each pi_init: at least 10x lower max inf-norm than vanilla, FP within 1 %",
        "encoder",
        _check_pi_init,
    ),
    "zeta": (
        "zeta > 1 (upper clipping) changes nothing; only gamma < 0 matters",
        "Table 1",
        "gamma -0.03: max inf-norm 20 +- 1 (zeta 1), 22 +- 3 (zeta 1.03); gamma 0: 735, 741",
        "max inf-norm at zeta 1.03 within 25 % of zeta 1's (the paper: 20 +- 1 vs 22 +- 3)",
        "encoder",
        _check_zeta,
    ),
    "ln_weight_decay": (
        "weight decay on LayerNorm gamma cuts vanilla OPT's outliers (max inf-norm 340 -> 87.7)",
        "Table 6",
        "vanilla OPT-125m: max inf-norm 340 +- 47 -> 87.7 +- 31.9 with LN-gamma decay",
        "vanilla max inf-norm at least 2x lower with the decay ('a strong effect'; 3.9x there)",
        "decoder",
        _check_ln_weight_decay,
    ),
}
"""The ablation claims per `grokbench.quant.ABLATIONS` axis: (claim, where, paper, tolerance,
family of the vanilla reference, check). Each needs the premise that the vanilla model of
the sweep's scale has outliers (max inf-norm >= `OUTLIER_MIN_INF_NORM`)."""


def _ablation_rows(table) -> list[Row]:
    sweeps = (table or {}).get("ablations")
    rows = []
    for axis, (text, where, stated, tolerance, family, check) in ABLATION_CLAIMS.items():
        van = _vanilla(sweeps, family) if sweeps else None
        premise = van is not None and van["max_inf_norm"] >= paper.OUTLIER_MIN_INF_NORM
        if sweeps is None:
            why = f"the full build runs it (`grokbench figures quant`; {ABLATIONS_FILE})"
        else:
            why = (
                f"premise not met: {family} vanilla at the sweep's (quick) scale has max "
                f"inf-norm {van['max_inf_norm']:.1f}, below {paper.OUTLIER_MIN_INF_NORM:g}"
            )
        variants = {r["variant"] for r in sweeps[axis]["rows"]} if sweeps else set()
        rows.append(
            claim_row(
                claim=text,
                source=f"{paper.QT}, {where}",
                paper=stated,
                ours=lambda sweeps=sweeps, axis=axis, variants=variants: " | ".join(
                    f"{v}: {_points(_sweep_rows(sweeps, axis, v), axis)}" for v in sorted(variants)
                ),
                tolerance=tolerance,
                ok=None if not premise else (lambda check=check: check(sweeps)),
                why=why,
            )
        )
    return rows


def claims(evidence: Evidence) -> list[Row]:
    """Table 2, the OPT clipped-softmax result, Tables 5 and 10, and the ablations."""
    table = evidence.quant
    by = _rows_by(table)

    def why_missing(family: str, variant: str) -> str:
        if table is None:
            return f"no quant table of this scale in the build ({_LAB} makes it)"
        return f"no {family} {variant} row in the quant table ({_LAB} with that variant)"

    rows = [*_table2_rows(by, why_missing), *_opt_clipped_rows(by, why_missing)]
    rows += _table5_rows(by, why_missing) + _table10_rows(by, why_missing)
    return rows + _ablation_rows(table)


FIGURE = Figure(
    name="quant",
    order=9,
    builds={"quant": draw},
    title="Quantizable transformers",
    images=(
        "quant_attention_encoder.png",
        "quant_attention_decoder.png",
        "quant_outlier_dims_encoder.png",
        "quant_outlier_dims_decoder.png",
        *(f"quant_sweep_{axis}.png" for axis in ABLATION_CLAIMS),
    ),
    claims=claims,
)
