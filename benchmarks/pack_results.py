"""Pack a results store into a few size-capped archives, for copying runs between machines.

    python benchmarks/pack_results.py STORE OUT [--cap-mb 15] [--total-mb 60] [--quant]

Writes OUT/summaries.tar.xz (every finished run's config.json and summary.json: small, and
all a table or a note needs), then one OUT/runs-GROUP.tar.xz per recipe group with whole
run directories (metric curves included), in priority order, keeping each archive under
--cap-mb and all of them under --total-mb; a group that does not fit is reported and left
out. Unpack with `tar -xJf ARCHIVE -C STORE_PARENT`: the runs land in the store layout
(`runs/HASH/...`), where `grokbench run` and `grokbench figures` find them as cached.

`--quant` packs the quantization lab's records instead (`pack_quant`): OUT/quant_records.tar.xz
with every record but the trained parameters, then one OUT/quant_params-HASH.tar.xz per
trained model while under the caps.
"""

from __future__ import annotations

import argparse
import io
import os
import pathlib
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from grokbench import recipes
from grokbench.store import Store

GROUPS: dict[str, tuple[str, ...]] = {
    "fig2": ("fig2-top", "fig2-bottom"),
    "fig4": ("fig4",),
    "fig6": ("fig6-mod31", "fig6-sq", "fig6-cube", "fig6-mod113"),
    "table1": ("table1",),
}


def _xz(files: list[tuple[pathlib.Path, str]], preset: int = 6) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=preset) as tar:
        for path, name in files:
            tar.add(path, arcname=name)
    return buf.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=pathlib.Path)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--cap-mb", type=float, default=15.0)
    parser.add_argument("--total-mb", type=float, default=60.0)
    parser.add_argument("--quant", action="store_true", help="the quant lab's records")
    args = parser.parse_args()
    if args.quant:
        pack_quant(args.store, args.out, args.cap_mb, args.total_mb)
        return 0
    store = Store(args.store)
    top = args.store.name
    args.out.mkdir(parents=True, exist_ok=True)

    finished = sorted(p.parent for p in (args.store / "runs").glob("*/summary.json"))
    names = ("config.json", "summary.json")
    small = [(d / f, f"{top}/runs/{d.name}/{f}") for d in finished for f in names]
    data = _xz(small)
    (args.out / "summaries.tar.xz").write_bytes(data)
    used = len(data)
    print(f"summaries.tar.xz: {len(finished)} runs, {len(data) / 1e6:.2f} MB")

    for group, names in GROUPS.items():
        dirs = [
            store.run_dir(cfg)
            for name in names
            for quick in (False,)
            for cfg in recipes.expand(recipes.get_recipe(name), quick=quick)
        ]
        dirs = [d for d in dict.fromkeys(dirs) if (d / "summary.json").is_file()]
        if not dirs:
            print(f"runs-{group}: no finished runs")
            continue
        used = _write(args, top, group, dirs, used)
    return 0


def pack_quant(
    store: pathlib.Path, out: pathlib.Path, cap_mb: float = 15.0, total_mb: float = 60.0
) -> None:
    """The quant lab's records of `store` (ROOT/quant/{train,eval}/HASH) into `out`:
    quant_records.tar.xz (every finished record's files but params.npz: configs, summaries,
    loss curves, the evaluations' arrays), then quant_params-HASH.tar.xz per trained model,
    newest first, each under `cap_mb` and all under `total_mb`. The records' archive is
    rewritten on every call and a model's parameters packed once, so a script can call it
    after each model and keep what finished."""
    store, out = pathlib.Path(store), pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    top = store.name
    finished = sorted(p.parent for p in (store / "quant").glob("*/*/summary.json"))
    files = [
        (f, f"{top}/{f.relative_to(store)}")
        for d in finished
        for f in sorted(d.iterdir())
        if f.name != "params.npz" and not f.name.startswith(".")
    ]
    data = _xz(files)
    _atomic_bytes(out / "quant_records.tar.xz", data)
    used = len(data)
    print(f"quant_records.tar.xz: {len(finished)} records, {len(data) / 1e6:.2f} MB")
    trained = [d for d in finished if (d / "params.npz").is_file()]
    for d in sorted(trained, key=lambda d: -(d / "summary.json").stat().st_mtime):
        name = f"quant_params-{d.name}.tar.xz"
        if (out / name).is_file():  # a finished model's parameters never change
            used += (out / name).stat().st_size
            continue
        # float32 parameters hardly compress: the fastest preset, seconds not minutes.
        data = _xz([(d / "params.npz", f"{top}/{(d / 'params.npz').relative_to(store)}")], 0)
        if len(data) > cap_mb * 1e6 or used + len(data) > total_mb * 1e6:
            print(f"{name}: {len(data) / 1e6:.1f} MB: over the cap, left out")
            continue
        _atomic_bytes(out / name, data)
        used += len(data)
        print(f"{name}: {len(data) / 1e6:.1f} MB")


def _atomic_bytes(path: pathlib.Path, data: bytes) -> None:
    """Write through a temporary file, so a kill mid-write leaves the previous archive."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write(args: argparse.Namespace, top: str, name: str, dirs: list, used: int) -> int:
    """Archive `dirs` as runs-NAME.tar.xz, halving into NAME-1, NAME-2 while over the cap."""
    files = [(d / f.name, f"{top}/runs/{d.name}/{f.name}") for d in dirs for f in d.iterdir()]
    data = _xz(files)
    mb = len(data) / 1e6
    if len(data) > args.cap_mb * 1e6 and len(dirs) > 1:
        half = len(dirs) // 2
        used = _write(args, top, f"{name}-1", dirs[:half], used)
        return _write(args, top, f"{name}-2", dirs[half:], used)
    if len(data) > args.cap_mb * 1e6 or used + len(data) > args.total_mb * 1e6:
        print(f"runs-{name}: {len(dirs)} runs, {mb:.1f} MB: over the cap, left out")
        return used
    (args.out / f"runs-{name}.tar.xz").write_bytes(data)
    print(f"runs-{name}.tar.xz: {len(dirs)} runs, {mb:.1f} MB")
    return used + len(data)


if __name__ == "__main__":
    sys.exit(main())
