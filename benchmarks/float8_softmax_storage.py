"""The mass a softmax row loses when its probabilities P are stored in float8.

    python benchmarks/float8_softmax_storage.py [--out docs/float8-storage.md]
        [--png docs/img/float8_softmax_storage.png] [--rows 64]

Attention kernels store P = softmax(S) in float8 before the P V product (flashinfer scales
P by 2^8 first; others do not). Each row here has K logits: K - 1 drawn from N(0, 1) and
one planted at a margin m over the log-sum-exp of the others (m = "flat": every logit 0,
P = 1/K). P is computed exactly (float64), rounded once to float8_e4m3fn or float8_e5m2
(round to nearest even, as ml_dtypes and the hardware casts do), with no scale or times
the largest power of two that keeps 1 finite (2^8 for e4m3fn, max 448; 2^15 for e5m2,
max 57344) and divided by it again when read. Two numbers per setting, means over
`--rows` rows: the mass of the entries that rounded to 0 (lost to underflow), and
|1 - sum P_stored| (the whole error, rounding of the kept entries included).

Writes the Markdown page OUT (table, figure, the command) and the figure PNG.
"""

from __future__ import annotations

import argparse
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np

FORMATS = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
LENGTHS = (16, 128, 1024, 8192, 65536)
MARGINS = ("flat", 0.0, 2.0, 5.0, 10.0)


def scale_of(dtype) -> float:
    """The largest power of two s with 1 * s finite in `dtype` (flashinfer's 2^8 for e4m3fn)."""
    return 2.0 ** math.floor(math.log2(float(ml_dtypes.finfo(dtype).max)))


def rows(k: int, margin, count: int, seed: int) -> np.ndarray:
    """`count` exact softmax rows (float64) of length k with the planted margin."""
    if margin == "flat":
        return np.full((count, k), 1.0 / k)
    rng = np.random.default_rng([seed, k, int(10 * margin)])
    z = rng.standard_normal((count, k))
    others = z[:, 1:]
    top = others.max(-1, keepdims=True)
    z[:, :1] = top + np.log(np.exp(others - top).sum(-1, keepdims=True)) + margin
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def stored(p: np.ndarray, dtype, scale: float) -> np.ndarray:
    """P rounded once to `dtype` (times `scale`), read back as float64 divided by it."""
    return (p * scale).astype(dtype).astype(np.float64) / scale


def measure(count: int = 64, seed: int = 0) -> list[dict]:
    """One record per (format, scaled, K, margin): mean underflow loss and mean |1 - sum|."""
    out = []
    for name, dtype in FORMATS.items():
        for scaled in (False, True):
            scale = scale_of(dtype) if scaled else 1.0
            for k in LENGTHS:
                for margin in MARGINS:
                    p = rows(k, margin, count, seed)
                    q = stored(p, dtype, scale)
                    underflow = np.where(q == 0, p, 0.0).sum(-1)
                    error = np.abs(1.0 - q.sum(-1))
                    out.append(
                        {
                            "format": name,
                            "scale": scale,
                            "k": k,
                            "margin": margin,
                            "underflow": float(underflow.mean()),
                            "error": float(error.mean()),
                            "error_max": float(error.max()),
                        }
                    )
    return out


def _pct(x: float) -> str:
    return "0" if x == 0 else f"{100 * x:.3g}"


def table(records: list[dict]) -> str:
    """Markdown: per format and scale, rows = margin, columns = K; 'lost % / error %'."""
    lines = []
    for name in FORMATS:
        for scaled in (False, True):
            group = [r for r in records if r["format"] == name and (r["scale"] > 1) == scaled]
            scale = group[0]["scale"]
            title = f"{name}, " + (f"scaled by 2^{int(math.log2(scale))}" if scaled else "no scale")
            lines += [f"**{title}** (lost to underflow % / total error |1 - sum| %)", ""]
            lines.append("| margin | " + " | ".join(f"K = {k:,}" for k in LENGTHS) + " |")
            lines.append("| --- |" + " --- |" * len(LENGTHS))
            for margin in MARGINS:
                cells = []
                for k in LENGTHS:
                    (r,) = [g for g in group if g["k"] == k and g["margin"] == margin]
                    cells.append(f"{_pct(r['underflow'])} / {_pct(r['error'])}")
                lines.append(f"| {margin} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def figure(records: list[dict], path: pathlib.Path) -> None:
    """Mass lost to underflow against K, per format; solid: no scale, dashed: scaled."""
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.2), sharey=True, constrained_layout=True)
    colors = dict(
        zip(MARGINS, ("0.2", "tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True)
    )
    floor = 1e-7
    for ax, name in zip(axes, FORMATS, strict=True):
        for scaled, style in ((False, "-"), (True, "--")):
            for margin in MARGINS:
                pts = [
                    r
                    for r in records
                    if r["format"] == name and (r["scale"] > 1) == scaled and r["margin"] == margin
                ]
                y = [max(100 * r["underflow"], floor) for r in pts]
                label = f"m = {margin}" if not scaled else None
                ax.plot(LENGTHS, y, style, color=colors[margin], marker="o", ms=3, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(floor / 2, 200)
        ax.set_title(f"P stored in float8_{name}")
        ax.annotate(
            "bottom edge: exactly 0 lost",
            (0.35, 0.075),
            xycoords="axes fraction",
            fontsize=7,
            color="0.3",
        )
        ax.set_xlabel("row length K")
    axes[0].set_ylabel("mass lost to underflow (%)")
    axes[0].legend(fontsize=7, title="solid: no scale\ndashed: 2^s scale", title_fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def page(records: list[dict], png: pathlib.Path, out: pathlib.Path, count: int) -> str:
    rel = png.resolve().relative_to(out.resolve().parent)
    return "\n".join(
        [
            "# float8 softmax storage: the mass a row loses",
            "",
            "Generated by `python benchmarks/float8_softmax_storage.py` (numpy and ml_dtypes "
            f"only, a second); means over {count} rows. How the rows are made and what is "
            "measured: the script's docstring and [numerics.md](numerics.md#float8).",
            "",
            f"![Mass lost to underflow when P is stored in float8, by row length]({rel})",
            "",
            table(records),
        ]
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("docs/float8-storage.md"))
    parser.add_argument(
        "--png", type=pathlib.Path, default=pathlib.Path("docs/img/float8_softmax_storage.png")
    )
    parser.add_argument("--rows", type=int, default=64, help="random rows per setting")
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be >= 1")
    records = measure(args.rows)
    figure(records, args.png)
    args.out.write_text(page(records, args.png, args.out, args.rows) + "\n")
    print(table(records))
    print(f"wrote {args.out} and {args.png}")


if __name__ == "__main__":
    main()
