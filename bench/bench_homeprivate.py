"""What finding the home's private paths costs the host view (engine.commands.homeprivate, fresh round 11
a), on a home of ~50k entries: the first walk (cold), a view with every listing cached (each walked
directory stat'ed), a view after one directory changed, the view's operations whole, making the kept view
(against the same for an empty home), and a run of `sh -c true` entering it; against a plain `sh -c true`
subprocess in the same run.
Three repeats, interleaved.

Usage: .venv/bin/python -P bench/bench_homeprivate.py [--dirs 2500] [--files 19] [--runs 30]
       [--private-dir-every 100] [--private-file-every 500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record


def make_home(home: Path, dirs: int, files: int, every_dir: int, every_file: int) -> int:
    """A home of `dirs` directories of `files` files each (4 levels), one in `every_dir` directories 0700
    and one in `every_file` files 0600, a browser-like profile of 2000 entries under ~/.config: the
    entries made."""
    made = 0
    profile = home / ".config" / "chromium" / "Default"
    profile.mkdir(parents=True)
    (home / ".config").chmod(0o700)
    for n in range(2000):
        (profile / f"f{n}").write_text("")
    made += 2003
    for d in range(dirs):
        where = home / f"p{d % 10}" / f"q{d % 100}" / f"r{d}"
        where.mkdir(parents=True, exist_ok=True)
        for f in range(files):
            path = where / f"f{f}"
            path.write_text("")
            if (d * files + f) % every_file == 0:
                path.chmod(0o600)
        if d % every_dir == 0:
            where.chmod(0o700)
        made += files + 1
    return made + 110


def timed(fn: Callable[[], object], n: int) -> float:
    """ms per call, over n calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) * 1000 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dirs", type=int, default=2500)
    parser.add_argument("--files", type=int, default=19)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--private-dir-every", type=int, default=100)
    parser.add_argument("--private-file-every", type=int, default=500)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehp-", dir="/tmp"))
    os.environ["OPENCLAW_STATE_DIR"] = str(root / "s")
    os.environ["HOME"] = str(root / "h")
    (root / "s").mkdir(mode=0o700)
    (root / "h").mkdir(mode=0o700)
    (root / "empty").mkdir(mode=0o700)
    from engine.commands import homeprivate, hostkeeper, hostoutside, hostroots, hostview
    from engine.commands.pinned import pinned_view

    state, home = str(root / "s"), root / "h"
    try:
        entries = make_home(home, args.dirs, args.files, args.private_dir_every, args.private_file_every)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        print(f"home of {entries} entries")
        true = ["/bin/sh", "-c", "true"]

        def keeper_made(which: Path) -> float:
            """ms to make the kept view (walk cached) for HOME=which: what a changed view costs once."""
            os.environ["HOME"] = str(which)
            try:
                hostview.view_args(state)  # the walk, cached
                hostkeeper.stop()
                t0 = time.perf_counter()
                pinned_view(None, host=True).close()
                return (time.perf_counter() - t0) * 1000
            finally:
                os.environ["HOME"] = str(home)

        def entered(n: int) -> float:
            view = pinned_view(None, host=True)
            try:
                return timed(lambda: subprocess.run(view.wrap(true), check=True, pass_fds=view.fds), n)
            finally:
                view.close()

        changing = home / "p3" / "q3" / "r3"
        turn = [0]

        def one_changed() -> None:
            turn[0] += 1
            (changing / f"new{turn[0]}").write_text("")
            hostroots.home_private(state, None, hostoutside.NOTHING_OUTSIDE, [], [])

        def private_now() -> homeprivate.Found:
            return hostroots.home_private(state, None, hostoutside.NOTHING_OUTSIDE, [], [])

        def cold() -> float:
            homeprivate.clear()
            return timed(private_now, 1)

        rows: dict[str, list[float]] = {}
        for _ in range(3):
            for name, ms in (
                ("plain", timed(lambda: subprocess.run(true, check=True), args.runs)),
                ("cold walk", cold()),
                ("cached", timed(private_now, args.runs)),
                ("one dir changed", timed(one_changed, args.runs)),
                ("view ops", timed(lambda: hostview.view_args(state), args.runs)),
                ("keeper made", statistics.median(keeper_made(home) for _ in range(3))),
                ("keeper made, empty home", statistics.median(keeper_made(root / "empty") for _ in range(3))),
                ("kept run", entered(args.runs)),
            ):
                rows.setdefault(name, []).append(ms)
        found = private_now()
        print(f"hidden: {len(found.dirs)} dirs, {len(found.files)} files")
        for name, values in rows.items():
            print(f"{name:<24} " + " · ".join(f"{v:.2f}" for v in values) + " ms")
        med = {name: statistics.median(v) for name, v in rows.items()}

        def three(name: str) -> str:
            return " · ".join(f"{v:.2f}" for v in rows[name]) + " ms"

        for what, name, base in (
            (
                f"home private paths, {entries} entries: first walk (vs plain `sh -c true`)",
                "cold walk",
                "plain",
            ),
            ("  per view, every listing cached (vs plain)", "cached", "plain"),
            ("  per view, one directory changed (vs plain)", "one dir changed", "plain"),
            ("  the view's operations whole (vs plain)", "view ops", "plain"),
            (
                "  making the kept view, once per change (vs an empty home's)",
                "keeper made",
                "keeper made, empty home",
            ),
            ("  a run of `sh -c true` entering the kept view (vs plain)", "kept run", "plain"),
        ):
            record(what, three(name), three(base), ratio(med[name], med[base]))
    finally:
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
