"""Pack a results store into a few size-capped archives, for copying runs between machines.

    python benchmarks/pack_results.py STORE OUT [--cap-mb 15] [--total-mb 60]

Writes OUT/summaries.tar.xz (every finished run's config.json and summary.json: small, and
all a table or a note needs), then one OUT/runs-GROUP.tar.xz per recipe group with whole
run directories (metric curves included), in priority order, keeping each archive under
--cap-mb and all of them under --total-mb; a group that does not fit is reported and left
out. Unpack with `tar -xJf ARCHIVE -C STORE_PARENT`: the runs land in the store layout
(`runs/HASH/...`), where `grokbench run` and `grokbench figures` find them as cached.
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


def _xz(files: list[tuple[pathlib.Path, str]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=6) as tar:
        for path, name in files:
            tar.add(path, arcname=name)
    return buf.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=pathlib.Path)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--cap-mb", type=float, default=15.0)
    parser.add_argument("--total-mb", type=float, default=60.0)
    args = parser.parse_args()
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
