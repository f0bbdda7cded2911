"""Round 18 b: the decision of an ordinary `sh x.sh` with the content-binding cap, against its raw work."""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# The tree to measure is the one on PYTHONPATH (run once from main's, once from this branch's).
sys.path.insert(0, os.environ.get("BENCH_TREE", str(Path(__file__).resolve().parent.parent)))

from engine.config.loader import load_config_text
from engine.policy.decision import evaluate

CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'


def micros(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = load_config_text(CONFIG)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OPENCLAW_STATE_DIR"] = str(Path(tmp, "state"))
        script = Path(tmp, "x.sh")
        script.write_text("echo hi\n" * 100)

        def raw() -> object:
            # The least any binding of x.sh does: stat it, read it, hash it.
            os.stat(script)
            return hashlib.sha256(script.read_bytes()).hexdigest()

        def decide() -> object:
            return evaluate("sh x.sh", config=config, cwd=tmp)

        decide()
        for i in range(args.repeats):
            r = micros(raw, args.runs)
            d = micros(decide, args.runs)
            print(f"repeat {i + 1}: raw stat+read+sha256 p50 {r:6.1f} µs   decide `sh x.sh` p50 {d:7.1f} µs")
        _unmount_under(tmp)


def _unmount_under(top: str) -> None:
    """A decision mounts the agent's private-dir tmpfs under the state dir: taken down before the dir goes."""
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(top + "/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", point], check=False)


if __name__ == "__main__":
    main()
