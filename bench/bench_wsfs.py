"""What a sandbox workspace of its own costs (engine.sandbox.wsfs): made (a sparse ext4 image, mkfs, loop
device, mount), checked again at a sandbox's next start (already mounted), and mounted again after a reboot,
each against the plain dir it was before (workspace.ensure_dir), in the same run, three runs (root only)."""

from __future__ import annotations

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

from engine.sandbox import wsfs
from engine.sandbox.workspace import ensure_dir

N = 20


def timed(make: Callable[[int], object], undo: Callable[[int], object]) -> float:
    """Median ms of `make(i)` over N, each undone (untimed) before the next."""
    samples = []
    for i in range(N):
        t0 = time.perf_counter_ns()
        make(i)
        samples.append((time.perf_counter_ns() - t0) / 1e6)
        undo(i)
    return statistics.median(samples)


def main() -> None:
    if os.geteuid() != 0:
        print("root only: a non-root gateway keeps plain dirs (nothing to measure)")
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/tmp")) as root:
        ws = [os.path.join(root, f"agent-main-{i:04x}") for i in range(N)]

        def unmount(i: int) -> None:
            subprocess.run(["umount", ws[i]], check=True)

        def gone(i: int) -> None:
            wsfs.remove(root, ws[i])
            shutil.rmtree(ws[i])

        for run in range(3):
            plain = timed(lambda i: ensure_dir(root, ws[i]), lambda i: os.rmdir(ws[i]))
            made = timed(lambda i: wsfs.ensure(root, ws[i]), lambda i: None)
            again = timed(lambda i: wsfs.ensure(root, ws[i]), unmount)
            reboot = timed(lambda i: wsfs.ensure(root, ws[i]), lambda i: None)
            for i in range(N):
                gone(i)
            print(
                f"run {run + 1}: plain dir {plain:.3f} ms | own filesystem made {made:.2f} ms | "
                f"checked when mounted {again:.3f} ms | mounted again (reboot) {reboot:.2f} ms"
            )


if __name__ == "__main__":
    main()
