"""What a root gateway's host run pays at its start for keeping only the listed capabilities and a UTS
namespace of its own (fresh round 18 a): the same kept view's `/bin/true` entered by this tree's
exechost-hostenter and by another build (main's, before the change), interleaved, against a raw `/bin/true`
in the same run. Wall p50 per run and the children's CPU per run (less moved by other load), three rounds.

Usage: .venv/bin/python bench/bench_rootcaps.py --before /tmp/old-hostenter [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import scratch_state, spawn_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", required=True, help="the other exechost-hostenter build")
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    root = scratch_state("erc-")
    from engine.commands import hostkeeper
    from engine.commands.pinned import pinned_view

    helper = hostkeeper.helper_path()
    if helper is None:
        print("exechost-hostenter is not built: nothing to compare")
        return
    before = os.path.realpath(args.before)
    print(f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}, euid {os.geteuid()}, now {helper}")
    view = pinned_view(None, host=True)
    try:
        now = view.wrap(["/bin/true"])
        old = [before if w == helper else w for w in now]  # the same view and words, the other build
        rows: dict[str, list[tuple[float, float]]] = {
            "listed caps + UTS (now)": [],
            "before": [],
            "raw /bin/true": [],
        }
        for _ in range(3):  # interleaved: a change in load falls on all of them alike
            rows["listed caps + UTS (now)"].append(spawn_cost(now, view.fds, args.runs))
            rows["before"].append(spawn_cost(old, view.fds, args.runs))
            rows["raw /bin/true"].append(spawn_cost(["/bin/true"], (), args.runs))
    finally:
        view.close()
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    for name, got in rows.items():
        walls = " · ".join(f"{w:.2f}" for w, _ in got)
        cpus = " · ".join(f"{c:.2f}" for _, c in got)
        print(f"{name:<26} wall p50 per round: {walls} ms; children's CPU per run: {cpus} ms")


if __name__ == "__main__":
    main()
