"""What a host run's own /dev costs (engine.commands.hostview.DEV_OPS, fresh round 13 b): the same bwrap
run with bwrap's minimal /dev mounted over the host's and the devpts bound back, against the host's /dev
as it was (`--dev-bind / /` alone), and against spawning `true` plainly. p50 per spawn, three rounds
interleaved, same run. (A kept view pays it once, when its keeper is made.)

Usage: .venv/bin/python bench/bench_devops.py [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, spawn_ms
from engine.commands.hostview import DEV_OPS


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
    res = interleaved(
        {name: functools.partial(spawn_ms, argv, args.runs // 3) for name, argv in argvs.items()}
    )
    compared("a run's own bwrap with its own /dev (DEV_OPS) vs the host's /dev", res, "own dev", "host dev")
    compared("a run's own bwrap with its own /dev (vs `true` spawned plainly)", res, "own dev", "plain")


if __name__ == "__main__":
    main()
