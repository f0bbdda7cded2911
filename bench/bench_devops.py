"""What a host run's own /dev costs (engine.commands.hostview.DEV_OPS, fresh round 13 b): the same bwrap
run with bwrap's minimal /dev mounted over the host's and the devpts bound back, against the host's /dev
as it was (`--dev-bind / /` alone), and against spawning `true` plainly. p50 per spawn, three rounds
interleaved, same run. (A kept view pays it once, when its keeper is made.)

Usage: .venv/bin/python bench/bench_devops.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.commands.hostview import DEV_OPS


def p50(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        print("needs bwrap")
        return
    tail = ["--unshare-pid", "--proc", "/proc", "--", "/bin/true"]
    argvs = {
        "own dev": [bwrap, "--dev-bind", "/", "/", *DEV_OPS, *tail],
        "host dev": [bwrap, "--dev-bind", "/", "/", *tail],
        "plain": ["/bin/true"],
    }
    res: dict[str, list[float]] = {}
    for _ in range(3):  # interleaved: a change in load falls on all alike
        for name, argv in argvs.items():
            res.setdefault(name, []).append(p50(argv, args.runs // 3))

    def rounds(name: str) -> str:
        return " · ".join(f"{v:.2f}" for v in res[name]) + " ms"

    m = {k: sorted(v)[1] for k, v in res.items()}
    record(
        "a run's own bwrap with its own /dev (DEV_OPS) vs the host's /dev",
        rounds("own dev"), rounds("host dev"), ratio(m["own dev"], m["host dev"]),
    )  # fmt: skip
    record(
        "a run's own bwrap with its own /dev (vs `true` spawned plainly)",
        rounds("own dev"), rounds("plain"), ratio(m["own dev"], m["plain"]),
    )  # fmt: skip


if __name__ == "__main__":
    main()
