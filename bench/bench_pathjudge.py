"""What judging a path the config names costs (engine.pathtrust.named_hold, engine.sandbox.rootfstrust)
against the raw open + fstat it guards, and what walking a whole rootfs tree's dirs would cost instead.

Usage: python bench/bench_pathjudge.py [--calls N] [--repeats R] [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.table import per_call_us, ratio, record  # noqa: E402
from engine import pathtrust  # noqa: E402
from engine.sandbox import rootfstrust  # noqa: E402


def _raw(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fstat(fd)
    finally:
        os.close(fd)


def _judged(path: str, own: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pathtrust.named_hold(path, own, os.fstat(fd)) == ""
    finally:
        os.close(fd)


def _whole_tree(tree: str) -> int:
    count = 0
    for _top, dirs, _files in os.walk(tree):
        count += len(dirs)
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", default="/", help="a rootfs tree to judge (default: the host's /)")
    args = parser.parse_args()
    own = os.geteuid()
    with tempfile.TemporaryDirectory(prefix="ehb-") as tmp:
        mine = Path(tmp) / "cfg-op"
        mine.mkdir(mode=0o700)
        (mine / "config.toml").write_text("")
        os.chmod(mine / "config.toml", 0o600)
        os.symlink(mine, Path(tmp) / "cfg")
        named = str(Path(tmp) / "cfg" / "config.toml")  # through a link, as round 18 c names it
        for rep in range(args.repeats):
            raw = per_call_us(lambda: _raw(named), args.calls, 3)
            judged = per_call_us(lambda: _judged(named, own), args.calls, 3)
            record(
                f"config path judged as named (through a link), run {rep + 1}",
                f"{judged:.1f} µs",
                f"{raw:.1f} µs (open + fstat)",
                ratio(judged, raw),
            )
    for rep in range(args.repeats):
        top = per_call_us(lambda: rootfstrust.refusal(args.tree, own), max(args.calls // 10, 10), 3)
        whole = per_call_us(lambda: _whole_tree(os.path.join(args.tree, "usr")), 1, 1)
        record(
            f"rootfs {args.tree}: top + PATH dirs judged, run {rep + 1}",
            f"{top:.1f} µs",
            f"{whole / 1000:.1f} ms (walking every dir under usr/)",
            f"1/{whole / top:,.0f}",
        )


if __name__ == "__main__":
    main()
