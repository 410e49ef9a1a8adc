"""The report's Quantizable Transformers claims, from the quant lab's table (`grokbench quant`).

The rows read `Evidence.quant`: the table `grokbench.quant.run_quant` writes (its rows per
family and variant), and in the full build its `"ablations"` (`grokbench.quant.run_ablations`,
the sweeps the build stores as `ABLATIONS_FILE`, `figures.build`). The numbers and
tolerances are `figures.report.paper`'s; a claim whose row or sweep point is missing is
`not tested` with the reason.
Claim names are fixed strings (never a table's label), so a row is the same with or without
data. The drawing of the lab's figures is `figures.quant`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from figures._common import ABLATIONS_FILE, CONSTANT_LR_FILE
from figures.registry import Claims
from figures.report import paper
from figures.report.claims import Evidence, Row, claim_row
from grokbench.quant.recipes import TRANSFER_SEQ_LENS

__all__ = [
    "ABLATIONS_BY_AXIS",
    "ABLATIONS_FILE",
    "ABLATION_CLAIMS",
    "CLAIMS",
    "CONSTANT_LR_FILE",
    "CONSTANT_LR_SUFFIX",
    "claims",
]

CONSTANT_LR_SUFFIX = " (constant lr, Gu et al.'s setting)"
"""Appended to the Table 2 encoder claims read on the constant-lr table."""

_LAB = "`grokbench figures quant` (or `grokbench quant`)"

NAMES = {
    "vanilla": "vanilla",
    "clipped": "clipped softmax",
    "gated": "gated attention (linear)",
    "gated_mlp": "gated attention (MLP)",
    "gated_all_heads": "gated attention (all-heads linear)",
}
"""The variants' names in the claims (fixed: the table's labels carry swept values)."""

_AFTER_THE_RESULT = (
    "; this premise was added after results it turned from fails into not tested (vanilla "
    "had no outliers at any setting tried): a cut needs outliers to cut, and the 'vanilla "
    "develops activation outliers' row carries that failure"
)


def _rows_by(table) -> dict[tuple[str, str], dict]:
    return {(r["family"], r["variant"]): r for r in table["rows"]} if table else {}


def _gap(r: dict, bits: str = "w8a8") -> float:
    return r[f"{bits}_perplexity"] / r["fp_perplexity"] - 1


def _fp_to_w8a8(r: dict) -> str:
    """A row's FP and W8A8 perplexities and the relative gap, as the report prints them."""
    return f"FP {r['fp_perplexity']:.2f} -> W8A8 {r['w8a8_perplexity']:.2f} ({100 * _gap(r):+.1f}%)"


def _pi_init_note(family: str, variant: str, r: dict | None) -> str:
    """Where a gate's pi_init differs from the paper's, say so (in `ours`, not the claim)."""
    want = paper.QUANT_PAPER_PI_INIT.get(family)
    have = r.get("pi_init") if r else None
    if have is not None and want is not None and variant.startswith("gated") and have != want:
        return f" [pi_init {have:g}; the paper's {want:g}]"
    return ""


def _has_outliers(van: dict | None) -> bool:
    return van is not None and van["max_inf_norm"] >= paper.OUTLIER_MIN_INF_NORM


def _table2_rows(by, why_missing, families=None, suffix: str = "") -> list[Row]:
    """Table 2's rows of `families` (every family by default), each claim ending in `suffix`
    (the constant-lr table's rows say which table they read)."""
    rows = []
    for family, variants in paper.QUANT_TABLE2.items():
        if families is not None and family not in families:
            continue
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
                claim=f"{family}: vanilla attention develops activation outliers{suffix}",
                source=paper.QUANT_WHERE,
                paper=f"max inf-norm {p_inf}, kurtosis {p_kurt}",
                ours=lambda van=van: (
                    f"max inf-norm {van['max_inf_norm']:.1f}, kurtosis {van['avg_kurtosis']:.1f}"
                ),
                tolerance=f"max inf-norm >= {paper.OUTLIER_MIN_INF_NORM:g} (above every fixed "
                "model of Table 2, below every vanilla one)",
                ok=None if van is None else _has_outliers(van),
                why=why,
            ),
            claim_row(
                claim=f"{family}: vanilla W8A8 loses against floating point{suffix}",
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
            name, note = NAMES[variant], _pi_init_note(family, variant, r)
            why = why_missing(family, variant) if r is None else why_missing(family, "vanilla")
            both = r is not None and van is not None
            no_outliers = (
                f"premise not met: {family} vanilla has no outliers here (max inf-norm below "
                f"{paper.OUTLIER_MIN_INF_NORM:g}), so there are none to cut{_AFTER_THE_RESULT}"
            )
            paper_gap = f_w8 / f_fp - 1
            rows += [
                claim_row(
                    claim=f"{family}: {name} cuts the {what}{suffix}",
                    source=paper.QUANT_WHERE,
                    paper=f"{p_val} -> {f_val} ({p_val / f_val:.0f}x lower)",
                    ours=lambda r=r, van=van, key=key, note=note: (
                        f"{van[key]:.1f} -> {r[key]:.1f} ({van[key] / r[key]:.2g}x lower){note}"
                    ),
                    tolerance=f"at least {paper.REDUCTION:g}x lower ('1-3 orders of magnitude')",
                    ok=None
                    if not (both and _has_outliers(van))
                    else r[key] * paper.REDUCTION <= van[key],
                    why=why if not both else no_outliers,
                )
                for what, key, p_val, f_val in (
                    ("max inf-norm", "max_inf_norm", p_inf, f_inf),
                    ("average kurtosis", "avg_kurtosis", p_kurt, f_kurt),
                )
            ]
            rows += [
                claim_row(
                    claim=f"{family}: {name} keeps FP perplexity level with vanilla{suffix}",
                    source=paper.QUANT_WHERE,
                    paper=f"FP {p_fp} -> {f_fp}",
                    ours=lambda r=r, van=van, note=note: (
                        f"FP {van['fp_perplexity']:.2f} -> {r['fp_perplexity']:.2f}{note}"
                    ),
                    tolerance=f"at most {paper.FP_LEVEL:.0%} above vanilla ('maintain or "
                    "slightly improve')",
                    ok=None
                    if not both
                    else r["fp_perplexity"] <= (1 + paper.FP_LEVEL) * van["fp_perplexity"],
                    why=why,
                ),
                claim_row(
                    claim=f"{family}: {name} quantizes to W8A8 close to FP, where vanilla "
                    f"loses{suffix}",
                    source=paper.QUANT_WHERE,
                    paper=f"FP {f_fp} -> W8A8 {f_w8} ({100 * paper_gap:+.1f}%)",
                    ours=lambda r=r, note=note: _fp_to_w8a8(r) + note,
                    tolerance=f"within the paper's own gap for it, {100 * paper_gap:+.1f}%",
                    ok=None if not both or not loses else _gap(r) <= paper_gap,
                    why=why if not both else premise,
                ),
            ]
    return rows


def _opt_clipped_row(by, why_missing) -> Row:
    """Table 6's negative result as the paper states it: clipped softmax on the decoder has a
    higher kurtosis and a worse W8A8 perplexity than vanilla, two criteria of one row (the
    W8A8 half was split off behind 'where vanilla loses' after results in which it failed;
    it is back as the paper words it). Like every other row about cutting outliers, it needs
    a vanilla decoder with outliers: the paper's clipped softmax fails to remove outliers that
    are there, which a vanilla without them cannot show."""
    van, r = by.get(("decoder", "vanilla")), by.get(("decoder", "clipped"))
    _, p_kurt, p_fp, p_w8 = paper.OPT_CLIPPED
    _, v_kurt, v_fp, v_w8 = paper.QUANT_TABLE2["decoder"]["vanilla"]
    both = van is not None and r is not None
    no_outliers = (
        f"premise not met: decoder vanilla has no outliers here (max inf-norm "
        f"{van['max_inf_norm']:.1f}, below {paper.OUTLIER_MIN_INF_NORM:g}); this premise was "
        "stated on 2026-12-04 (issue 43), after quick builds in which the row held on such a "
        "vanilla, and applies to every build"
        if van is not None
        else ""
    )
    return claim_row(
        claim="decoder: clipped softmax fails (kurtosis and W8A8 both worse than vanilla)",
        source=f"{paper.QT}, Table 6, Sec. 5.4",
        paper=f"kurtosis {v_kurt} -> {p_kurt}; W8A8 {v_w8} (FP {v_fp}) -> {p_w8} (FP {p_fp})",
        ours=lambda: (
            f"kurtosis {van['avg_kurtosis']:.1f} -> {r['avg_kurtosis']:.1f}; vanilla "
            f"{_fp_to_w8a8(van)}; clipped {_fp_to_w8a8(r)}"
        ),
        tolerance="kurtosis and W8A8 perplexity both higher than vanilla's",
        ok=None
        if not (both and _has_outliers(van))
        else {
            "kurtosis higher": r["avg_kurtosis"] > van["avg_kurtosis"],
            "W8A8 perplexity higher": r["w8a8_perplexity"] > van["w8a8_perplexity"],
        },
        why=why_missing("decoder", "clipped" if r is None else "vanilla")
        if not both
        else no_outliers,
    )


def _table5_rows(by, why_missing) -> list[Row]:
    van = by.get(("encoder", "vanilla"))
    loses = van is not None and _gap(van) >= paper.VANILLA_LOSS
    rows = []
    for variant, stated in paper.TABLE5_GATES.items():
        r = by.get(("encoder", variant))
        rows.append(
            claim_row(
                claim=f"encoder: {NAMES[variant]} reduces outliers and improves W8A8 against "
                "vanilla, where vanilla loses",
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
                    claim=f"encoder {bits}: {NAMES[variant]} beats vanilla",
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


def _delimiter_rows(by, why_missing) -> list[Row]:
    """Sec. 3 / Figs. 1-2: vanilla's outliers sit on delimiter tokens, through heads that park
    their attention there, whose values on those tokens are small (the encoder: the paper's
    BERT)."""
    van = by.get(("encoder", "vanilla"))
    shares = [s for s in van["outlier_share_on_delimiters"] if s is not None] if van else []
    share, head, values = paper.DELIMITER_SHARE, paper.DELIMITER_HEAD, paper.DELIMITER_VALUES
    why = why_missing("encoder", "vanilla")

    def where_they_sit() -> str:
        return (
            "share of the > 6 sigma entries on delimiters per layer with any: "
            + ", ".join(f"{s:.0%}" for s in shares)
            + f" (delimiters are {van['delimiter_share_of_tokens']:.0%} of the tokens)"
        )

    parks = van is not None and head.holds(van["max_head_delimiter_attention"])
    ratio = van.get("parking_head_value_ratio") if van is not None else None
    values_why = why
    if van is not None and ratio is None:
        values_why = (
            "no value-norm measure in this evaluation (evaluations before QUANT_EVAL_VERSION 2)"
            if "parking_head_value_ratio" not in van
            else "no delimiter or special token in the evaluation batches"
        )
    elif van is not None and not parks:
        values_why = (
            f"premise not met: no vanilla head parks on delimiters (largest mass "
            f"{van['max_head_delimiter_attention']:.2f}, not above {head.value:g})"
        )
    return [
        claim_row(
            claim="encoder: vanilla's outliers sit on delimiter tokens",
            source=share.where,
            paper=share.stated,
            ours=where_they_sit,
            tolerance=share.tolerance,
            ok=None if not shares else all(share.holds(s) for s in shares),
            why=why if van is None else "no entry beyond 6 sigma in any layer",
        ),
        claim_row(
            claim="encoder: a vanilla head parks its attention on delimiter tokens",
            source=head.where,
            paper=head.stated,
            ours=lambda: (
                f"largest mean attention mass of a head on delimiter and special tokens: "
                f"{van['max_head_delimiter_attention']:.2f}"
            ),
            tolerance=head.tolerance,
            ok=None if van is None else head.holds(van["max_head_delimiter_attention"]),
            why=why,
        ),
        claim_row(
            claim="encoder: the parking head's delimiter tokens carry small values",
            source=values.where,
            paper=values.stated,
            ours=lambda: (
                f"layer {van['parking_head'][0]} head {van['parking_head'][1]}: mean value-vector "
                f"norm on delimiter and special tokens / on the others = {ratio:.2f} (each "
                "layer's parking head: "
                + ", ".join(f"{r:.2f}" for r in van["delimiter_value_ratio_by_layer"])
                + ")"
            ),
            tolerance=values.tolerance,
            ok=None if ratio is None or not parks else values.holds(ratio),
            why=values_why,
        ),
    ]


# --- the ablations (the full build's sweeps, at the quick scale) ------------------------------


def _sweep_rows(sweeps: dict, axis: str, variant: str) -> list[dict]:
    """The sweep's rows of `variant` in order of the swept value (T first where the sweep
    varies it); rows that do not set the axis (the gamma sweep's vanilla) come first."""

    def key(r: dict) -> tuple:
        value = r["sweep"].get(axis)
        return (r["sweep"].get("seq_len", 0), value is not None, float(value or 0.0))

    return sorted((r for r in sweeps[axis]["rows"] if r["variant"] == variant), key=key)


def _vanilla(sweeps: dict, family: str) -> dict | None:
    return _rows_by(sweeps["vanilla"]).get((family, "vanilla"))


def _cuts(r: dict, van: dict) -> bool:
    """Table 2's test of a fix: max inf-norm `REDUCTION` x lower, FP within `FP_LEVEL`."""
    return r["max_inf_norm"] * paper.REDUCTION <= van["max_inf_norm"] and _fp_level(r, van)


def _fp_level(r: dict, van: dict) -> bool:
    """FP perplexity at most `FP_LEVEL` above vanilla's ('maintain or slightly improve')."""
    return r["fp_perplexity"] <= (1 + paper.FP_LEVEL) * van["fp_perplexity"]


def _point(rows: list[dict], axis: str, value: float) -> dict | None:
    """The sweep row at `value` of `axis` (to 1e-9 relative), or None."""
    return next(
        (r for r in rows if abs(float(r["sweep"][axis]) - value) <= 1e-9 * max(1.0, abs(value))),
        None,
    )


def _recipe_seq_len(sweeps: dict) -> int | None:
    """The encoder recipe's T: the first encoder config of the gamma sweep (its first grid)."""
    configs = [c for c in sweeps["gamma"].get("configs", []) if c.get("family") == "encoder"]
    return configs[0]["seq_len"] if configs else None


def _at_seq_len(sweeps: dict, variant: str, seq_len: int) -> list[dict]:
    """The gamma sweep's rows of `variant` at T = `seq_len` (a row without a swept T has the
    recipe's)."""
    default = _recipe_seq_len(sweeps)
    rows = [r for r in sweeps["gamma"]["rows"] if r["variant"] == variant]
    return [r for r in rows if r["sweep"].get("seq_len", default) == seq_len]


def _alpha(sweeps: dict, alpha: float, seq_len: int | None = None) -> dict | None:
    """The clipped-softmax sweep point at gamma = -alpha / T, T = `seq_len` (default: the
    recipe's)."""
    seq_len = seq_len or _recipe_seq_len(sweeps)
    if seq_len is None:
        return None
    return _point(_at_seq_len(sweeps, "clipped", seq_len), "gamma", -alpha / seq_len)


def _check_gamma(s: dict, van: dict) -> bool | None:  # alpha 2: the recommended range
    r = _alpha(s, 2.0)
    return None if r is None else _cuts(r, van)


def _check_alpha_weak(s: dict, van: dict) -> bool | None:
    r = _alpha(s, 0.5)
    return None if r is None else r["max_inf_norm"] * paper.REDUCTION > van["max_inf_norm"]


def _check_alpha_strong(s: dict, van: dict) -> bool | None:
    r = _alpha(s, 8.0)
    return None if r is None else not _fp_level(r, van)


def _check_transfer(s: dict, van: dict) -> bool | None:
    """alpha 2 at the shorter T against vanilla at that T (which must have outliers)."""
    del van  # the recipe's T; this row reads the shorter T's own vanilla
    short = min(TRANSFER_SEQ_LENS)
    r, vans = _alpha(s, 2.0, short), _at_seq_len(s, "vanilla", short)
    if r is None or not vans or not _has_outliers(vans[0]):
        return None
    return _cuts(r, vans[0])


def _robust(s: dict) -> list[dict]:
    """The linear gate's sweep points in the range the paper calls robust, [0.25, 0.9]."""
    return [r for r in _sweep_rows(s, "pi_init", "gated") if 0.25 <= r["sweep"]["pi_init"] <= 0.9]


def _check_pi_init(s: dict, van: dict) -> bool | None:
    rows = _robust(s)
    return None if not rows else all(_cuts(r, van) for r in rows)


def _check_pi_init_w8a8(s: dict, van: dict) -> bool | None:
    rows = _robust(s)
    if not rows or _gap(van) < paper.VANILLA_LOSS:
        return None
    return all(_gap(r) * paper.REDUCTION <= _gap(van) for r in rows)


def _check_pi_init_low(s: dict, van: dict) -> bool | None:
    r = _point(_sweep_rows(s, "pi_init", "gated"), "pi_init", 0.12)
    return None if r is None else not _fp_level(r, van)


def _zeta_pair(s: dict, gamma_zero: bool) -> tuple[dict, dict] | None:
    """(zeta 1, zeta 1.03) clipped rows of the zeta sweep at gamma = 0 or gamma < 0."""
    rows = [r for r in _sweep_rows(s, "zeta", "clipped") if (r.get("gamma") == 0) == gamma_zero]
    one, up = _point(rows, "zeta", 1.0), _point(rows, "zeta", 1.03)
    return None if one is None or up is None else (one, up)


def _check_zeta(s: dict, van: dict) -> bool | None:
    pair = _zeta_pair(s, gamma_zero=False)
    if pair is None:
        return None
    one, up = pair
    return abs(up["max_inf_norm"] / one["max_inf_norm"] - 1) <= 0.25


def _check_zeta_alone(s: dict, van: dict) -> bool | None:
    rows = [r for r in _sweep_rows(s, "zeta", "clipped") if r.get("gamma") == 0]
    up = _point(rows, "zeta", 1.03)
    return None if up is None else abs(up["max_inf_norm"] / van["max_inf_norm"] - 1) <= 0.25


def _check_ln_weight_decay(s: dict, van: dict) -> bool | None:
    rows = [r for r in s["ln_weight_decay"]["rows"] if r["variant"] == "vanilla"]
    on = [r for r in rows if r["sweep"]["ln_weight_decay"] is True]
    off = [r for r in rows if r["sweep"]["ln_weight_decay"] is False]
    if not on or not off:
        return None
    return on[0]["max_inf_norm"] * 2 <= off[0]["max_inf_norm"]


@dataclasses.dataclass(frozen=True)
class Ablation:
    """One ablation claim: its sweep (`grokbench.quant.ABLATIONS` axis), what the paper says,
    the tolerance, the family of its vanilla reference, whether it needs vanilla to have
    outliers, the check (None: the sweep lacks the point it needs) and that point's name."""

    axis: str
    claim: str
    where: str
    paper: str
    tolerance: str
    family: str
    outliers: bool
    check: Callable[[dict, dict], bool | None]
    needs: str


ABLATION_CLAIMS: tuple[Ablation, ...] = (
    Ablation(
        "gamma",
        "clipped softmax with alpha = 2 (gamma = -2/T) cuts outliers at level FP perplexity",
        "Fig. 6",
        "alpha in [2, 4]: max inf-norm ~10-100x below vanilla, FP log-ppl close to vanilla's",
        "at least 10x lower max inf-norm than vanilla, FP within 1 % (Table 2's test)",
        "encoder",
        True,
        _check_gamma,
        "an alpha = 2 point",
    ),
    Ablation(
        "gamma",
        "clipped softmax with alpha = 1/2 is too weak to cut outliers",
        "Fig. 6",
        "alpha in {1/4, 1/2}: max inf-norm stays within roughly an order of magnitude of vanilla",
        "max inf-norm less than 10x below vanilla's",
        "encoder",
        True,
        _check_alpha_weak,
        "an alpha = 1/2 point",
    ),
    Ablation(
        "gamma",
        "clipped softmax with alpha = 8 hurts FP perplexity",
        "Fig. 6",
        "alpha = 8 consistently degrades FP log-perplexity relative to vanilla",
        "FP perplexity more than 1 % above vanilla's (the converse of Table 2's level)",
        "encoder",
        False,
        _check_alpha_strong,
        "an alpha = 8 point",
    ),
    Ablation(
        "gamma",
        "clipped softmax with alpha = 2 also cuts outliers at level FP at half the sequence "
        "length (gamma = -alpha/T transfers)",
        "Fig. 6",
        "alpha in [2, 4] dampens outliers at good FP perplexity 'across all explored sequence "
        "lengths' (T 32-256)",
        "at T = 32: at least 10x lower max inf-norm than vanilla at T = 32, FP within 1 % of "
        "it (Table 2's test)",
        "encoder",
        True,
        _check_transfer,
        "alpha = 2 and vanilla points at T = 32, that vanilla with outliers (max inf-norm >= 100)",
    ),
    Ablation(
        "pi_init",
        "the linear gate cuts outliers at level FP perplexity for every pi_init in [0.25, 0.9]",
        "Fig. 7",
        "pi_init 0.25-0.9: FP close to vanilla's and outliers far lower (BERT-6L)",
        "each pi_init in [0.25, 0.9]: at least 10x lower max inf-norm than vanilla, FP within 1 %",
        "encoder",
        True,
        _check_pi_init,
        "a pi_init point in [0.25, 0.9]",
    ),
    Ablation(
        "pi_init",
        "the linear gate quantizes far better than vanilla for every pi_init in [0.25, 0.9]",
        "Fig. 7",
        "pi_init 0.25-0.9: W8A8 log-perplexity 1-2 orders of magnitude better than vanilla's",
        "each pi_init in [0.25, 0.9]: W8A8 gap over FP at least 10x smaller than vanilla's, where "
        "vanilla loses >= 10 %",
        "encoder",
        True,
        _check_pi_init_w8a8,
        "a pi_init point in [0.25, 0.9] and a vanilla that loses >= 10 % at W8A8",
    ),
    Ablation(
        "pi_init",
        "the linear gate with pi_init 0.12 degrades FP perplexity",
        "Fig. 7",
        "pi_init = 0.12 (gates mostly closed): FP performance degrades noticeably",
        "FP perplexity more than 1 % above vanilla's",
        "encoder",
        False,
        _check_pi_init_low,
        "a pi_init = 0.12 point",
    ),
    Ablation(
        "zeta",
        "with gamma < 0, zeta > 1 (upper clipping) changes nothing",
        "Table 1",
        "gamma -0.03: max inf-norm 20 +- 1 (zeta 1), 22 +- 3 (zeta 1.03)",
        "max inf-norm at zeta 1.03 within 25 % of zeta 1's (the paper: 20 +- 1 vs 22 +- 3)",
        "encoder",
        True,
        _check_zeta,
        "zeta 1 and 1.03 points at gamma < 0",
    ),
    Ablation(
        "zeta",
        "zeta > 1 alone (gamma = 0) leaves the outliers: only gamma < 0 matters",
        "Table 1",
        "gamma 0: max inf-norm 735 +- 55 (zeta 1), 741 +- 66 (zeta 1.03)",
        "max inf-norm at gamma 0, zeta 1.03 within 25 % of vanilla's",
        "encoder",
        True,
        _check_zeta_alone,
        "a gamma = 0, zeta 1.03 point",
    ),
    Ablation(
        "ln_weight_decay",
        "weight decay on LayerNorm gamma cuts vanilla OPT's outliers (max inf-norm 340 -> 87.7)",
        "Table 6",
        "vanilla OPT-125m: max inf-norm 340 +- 47 -> 87.7 +- 31.9 with LN-gamma decay",
        "vanilla max inf-norm at least 2x lower with the decay ('a strong effect'; 3.9x there)",
        "decoder",
        True,
        _check_ln_weight_decay,
        "vanilla with and without the decay",
    ),
)
"""The ablation claims, each on one `grokbench.quant.ABLATIONS` sweep, in the report's order."""

ABLATIONS_BY_AXIS: dict[str, tuple[Ablation, ...]] = {
    axis: tuple(a for a in ABLATION_CLAIMS if a.axis == axis)
    for axis in dict.fromkeys(a.axis for a in ABLATION_CLAIMS)
}
"""The ablation claims per sweep axis (the report shows one quant_sweep_AXIS.png each)."""


def _points(rows: list[dict], axis: str) -> str:
    def name(r: dict) -> str:
        value = r["sweep"].get(axis)
        where = f"T {r['sweep']['seq_len']}" if "seq_len" in r["sweep"] else ""
        at = f"{axis} {value:g}" if value is not None else ""
        return ", ".join(x for x in (where, at) if x) or r["variant"]

    return "; ".join(
        f"{name(r)}: FP {r['fp_perplexity']:.2f}, max inf-norm {r['max_inf_norm']:.1f}"
        + (f", W8A8 {r['w8a8_perplexity']:.2f}" if "w8a8_perplexity" in r else "")
        for r in rows
    )


def _ablation_rows(table) -> list[Row]:
    sweeps = (table or {}).get("ablations")
    rows = []
    for a in ABLATION_CLAIMS:
        van = _vanilla(sweeps, a.family) if sweeps else None
        verdict = None
        if sweeps is None:
            why = f"the full build runs it (`grokbench figures quant`; {ABLATIONS_FILE})"
        elif a.axis not in sweeps or van is None:
            why = f"no {a.axis} sweep or no {a.family} vanilla row in {ABLATIONS_FILE}"
        elif a.outliers and not _has_outliers(van):
            why = (
                f"premise not met: {a.family} vanilla at the sweep's scale has max "
                f"inf-norm {van['max_inf_norm']:.1f}, below {paper.OUTLIER_MIN_INF_NORM:g}"
            )
        else:
            verdict = a.check(sweeps, van)
            why = f"the {a.axis} sweep lacks {a.needs}"
        variants = (
            sorted({r["variant"] for r in sweeps[a.axis]["rows"]})
            if sweeps and a.axis in sweeps
            else []
        )
        rows.append(
            claim_row(
                claim=a.claim,
                source=f"{paper.QT}, {a.where}",
                paper=a.paper,
                ours=lambda a=a, van=van, variants=variants: (
                    f"vanilla FP {van['fp_perplexity']:.2f}, max inf-norm "
                    f"{van['max_inf_norm']:.1f} | "
                    + " | ".join(
                        f"{v}: {_points(_sweep_rows(sweeps, a.axis, v), a.axis)}" for v in variants
                    )
                ),
                tolerance=a.tolerance,
                ok=verdict,
                why=why,
            )
        )
    return rows


def claims(evidence: Evidence) -> list[Row]:
    """Table 2, Sec. 3's delimiters, the OPT clipped-softmax result, Tables 5 and 10, Table
    2's encoder rows at a constant lr, and the ablations (last)."""
    table = evidence.quant
    by = _rows_by(table)

    def why_missing(family: str, variant: str) -> str:
        if table is None:
            return f"no quant table of this scale in the build ({_LAB} makes it)"
        return f"no {family} {variant} row in the quant table ({_LAB} with that variant)"

    rows = [*_table2_rows(by, why_missing), *_delimiter_rows(by, why_missing)]
    rows += [_opt_clipped_row(by, why_missing)]
    rows += _table5_rows(by, why_missing) + _table10_rows(by, why_missing)
    return rows + _constant_lr_rows(table) + _ablation_rows(table)


def _constant_lr_rows(table) -> list[Row]:
    """Table 2's encoder rows again on the full build's constant-lr table (issue 44: the
    schedule's ablation, run A's setting), reported beside the recipe's whatever they show."""
    constant = (table or {}).get("constant_lr")
    by = _rows_by(constant)

    def why_missing(family: str, variant: str) -> str:
        if constant is None:
            return f"the full build runs it (`grokbench figures quant`; {CONSTANT_LR_FILE})"
        return f"no {family} {variant} row in {CONSTANT_LR_FILE}"

    return _table2_rows(by, why_missing, families=("encoder",), suffix=CONSTANT_LR_SUFFIX)


CLAIMS = Claims(figure="quant", claims=claims)
