"""What judging each `hostWritable` root as the gateway's own costs a host run (fresh round 16 a): by name
when the run's Outside is made (engine.commands.hostroots.trusted_writable: one lstat per directory from
the root up to `/`), and on the fds the bind walks (engine.commands.bindsource.by_fd with the roots
owned: one fstat per directory walked), against the same opens unjudged, in the same run. Three repeats,
interleaved.

Usage: .venv/bin/python -P bench/bench_rootowner.py [--runs 2000] [--roots 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
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
    return (time.perf_counter() - t0) * 1e6 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--roots", type=int, default=4)
    args = parser.parse_args()
    from engine.commands import bindsource, hostroots

    base = Path(tempfile.mkdtemp(prefix="ehr-", dir="/tmp"))
    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        roots = []
        for n in range(args.roots):  # as deep as a project dir: /tmp/ehr-x/srv/team/agentN/work
            root = base / "srv" / "team" / f"agent{n}" / "work"
            root.mkdir(parents=True)
            roots.append(str(root))
        ops = [w for r in roots for w in ("--bind", r, r)]
        owned = frozenset(roots)

        def opened(judged: bool) -> None:
            bindsource.close(bindsource.by_fd(ops, owned if judged else frozenset())[1])

        name: list[float] = []
        judged: list[float] = []
        plain: list[float] = []
        for _ in range(3):  # interleaved: a change in load falls on all alike
            name.append(per_call(lambda: hostroots.trusted_writable(roots), args.runs))
            judged.append(per_call(lambda: opened(True), args.runs))
            plain.append(per_call(lambda: opened(False), args.runs))
        print(f"{args.roots} hostWritable roots, 7 directories deep:")
        for label, data in (("by name", name), ("by fd, judged", judged), ("by fd, unjudged", plain)):
            print(f"  {label:<18} " + " · ".join(f"{v:.1f}" for v in data) + " µs")
        mid_name, mid_judged, mid_plain = (sorted(d)[1] for d in (name, judged, plain))
        record(
            f"host view: {args.roots} hostWritable roots opened by fd and judged ours (vs opened unjudged)",
            f"{mid_judged:.1f} µs",
            f"{mid_plain:.1f} µs",
            ratio(mid_judged, mid_plain),
        )
        record(
            f"host view: {args.roots} hostWritable roots judged ours by name per run (vs opening them by fd)",
            f"{mid_name:.1f} µs",
            f"{mid_plain:.1f} µs",
            ratio(mid_name, mid_plain),
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
