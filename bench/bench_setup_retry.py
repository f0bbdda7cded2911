"""What own-pts' setup retry costs a run's own bwrap (exechost-hostenter setup_retried): the same bwrap
run with a `status` slot (own-pts stays bwrap's parent, its stderr read until the run's pid 1 says its
setup is done) against one without (own-pts execs bwrap, as before), and against spawning `true` plainly.
p50 per spawn, three rounds interleaved, same run.

Usage: .venv/bin/python bench/bench_setup_retry.py [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, spawn_ms

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
    bwrap = shutil.which("bwrap")
    if bwrap is None or shutil.which("cc") is None:
        print("needs bwrap and cc")
        return
    root = Path(tempfile.mkdtemp(prefix="esr-", dir="/tmp"))
    try:
        helper = str(root / "hostenter")
        sources = sorted(str(c) for c in (ROOT / "engine" / "commands" / "hostenter").glob("*.c"))
        subprocess.run(["cc", "-O2", "-Wall", "-o", helper, *sources], check=True)
        check = [helper, "check-cwd", "-", "--", "/bin/true"]
        # the same words but for the check-cwd helper's name (a link to it): own-pts finds no `status`
        # slot and execs bwrap, as before the retry
        other = str(root / "hostenter-link")
        os.symlink(helper, other)
        view = [bwrap, "--dev-bind", "/", "/", "--unshare-pid", "--as-pid-1", "--proc", "/proc", "--"]
        status = [helper, "status", "-", "--"]
        argvs = {
            "retried": [helper, "own-pts", "-", "--", *view, *status, *check],
            "exec": [helper, "own-pts", "-", "--", *view, *status, other, *check[1:]],
            "plain": ["/bin/true"],
        }
        n = args.runs // 3
        res = interleaved(
            {name: functools.partial(spawn_ms, argv, n, quiet=True) for name, argv in argvs.items()}
        )
        compared(
            "a run's own bwrap with setup retry (own-pts its parent, stderr held to the NUL) vs own-pts exec",
            res, "retried", "exec",
        )  # fmt: skip
        compared("a run's own bwrap with setup retry (vs `true` spawned plainly)", res, "retried", "plain")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
