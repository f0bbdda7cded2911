"""What covering every other agent's `hostWritable` dirs costs an agent's host view (engine.commands.
otherroots, fresh round 12 a): the view's operations per run, making the kept view, and a run of `sh -c
true` entering it, with AGENTS other agents' dirs covered (one nested in this agent's own, its way
bound over itself; one outside the home) against the same view with none, in the same run. Three
repeats, interleaved.

Usage: .venv/bin/python -P bench/bench_otherroots.py [--runs 60] [--agents 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record


def per_call(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) * 1000 / n


def spawn_p50(argv: list[str], fds: tuple[int, ...], runs: int) -> float:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, pass_fds=fds)
        walls.append(time.perf_counter() - t0)
    return sorted(walls)[len(walls) // 2] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--agents", type=int, default=8)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="eho-", dir="/tmp"))
    state, home = root / "s", root / "h"
    os.environ["OPENCLAW_STATE_DIR"], os.environ["HOME"] = str(state), str(home)
    state.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    from engine.commands import hostkeeper, hostoutside, hostview
    from engine.commands.pinned import pinned_view

    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        own = home / "main-work"
        (own / "a" / "ops-inner").mkdir(parents=True)
        others = [str(own / "a" / "ops-inner")]
        (root / "srv" / "ops").mkdir(parents=True)  # one outside the home: what every run needs is asked
        others.append(str(root / "srv" / "ops"))
        for n in range(args.agents - 2):
            (home / f"agent{n}-work").mkdir()
            (home / f"agent{n}-work" / "notes").write_text("x\n")
            others.append(str(home / f"agent{n}-work"))
        alone = hostoutside.Outside(writable=(str(own),), writable_anywhere=(str(own),))
        covered = hostoutside.Outside(writable=(str(own),), writable_anywhere=(str(own), *others))
        views = {"none": alone, "covered": covered}
        ops: dict[str, list[float]] = {k: [] for k in views}
        made: dict[str, list[float]] = {k: [] for k in views}
        runs: dict[str, list[float]] = {k: [] for k in views}
        true = ["/bin/sh", "-c", "true"]
        for _ in range(3):  # interleaved: a change in load falls on both alike
            for name, outside in views.items():
                ops[name].append(
                    per_call(lambda o=outside: hostview.view_args(str(state), None, o), args.runs)
                )
                times = []
                for _ in range(5):
                    hostkeeper.stop()
                    t0 = time.perf_counter()
                    pinned_view(None, host=True, outside=outside).close()
                    times.append((time.perf_counter() - t0) * 1000)
                made[name].append(sorted(times)[2])
                view = pinned_view(None, host=True, outside=outside)
                try:
                    runs[name].append(spawn_p50(view.wrap(true), tuple(view.fds), args.runs))
                finally:
                    view.close()
        print(f"{args.agents} other agents' roots covered (one nested in the own, one outside the home):")
        for label, data, unit in (
            ("view ops per run", ops, "ms"),
            ("making the kept view", made, "ms"),
            ("`sh -c true` in the kept view, p50", runs, "ms"),
        ):
            cov = " · ".join(f"{v:.2f}" for v in data["covered"])
            base = " · ".join(f"{v:.2f}" for v in data["none"])
            print(f"  {label:<38} covered {cov} {unit}   none {base} {unit}")
        mid = {
            k: {n: sorted(v)[1] for n, v in d.items()}
            for k, d in (("ops", ops), ("made", made), ("run", runs))
        }
        record(
            f"host view: its operations per run, {args.agents} other agents' hostWritable covered (vs none)",
            f"{mid['ops']['covered']:.2f} ms",
            f"{mid['ops']['none']:.2f} ms",
            ratio(mid["ops"]["covered"], mid["ops"]["none"]),
        )
        record(
            f"host view: `sh -c true` in the kept view, {args.agents} other agents' dirs covered (vs none)",
            f"{mid['run']['covered']:.2f} ms",
            f"{mid['run']['none']:.2f} ms",
            ratio(mid["run"]["covered"], mid["run"]["none"]),
        )
    finally:
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
