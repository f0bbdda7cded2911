"""What running the egress forwarder from the gateway's own sealed build (engine.sandbox.egress.heldcopy)
costs, against running sandbox-bin's file as before: making an agent's network namespace with its forwarder
(`netkeep`, once per agent, generation and gateway; a host run that joins it pays nothing new), and the
forwarder's exec alone (from a path vs from a passed fd); plus the one build per process. Same run, three
rounds interleaved; the middle round's median.

Usage: .venv/bin/python bench/bench_heldcopy.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record, scratch_state


def median_ms(action: Callable[[], object], runs: int) -> float:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        action()
        walls.append(time.perf_counter() - t0)
    return sorted(walls)[len(walls) // 2] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    root = scratch_state("ehh-")
    from engine.commands import hostkeeper, hostnet
    from engine.sandbox.egress import forwarder, heldcopy

    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        helper = hostkeeper.helper_path()
        if helper is None:
            print("exechost-hostenter is not built (bash scripts/setup.sh): nothing to compare")
            return
        t0 = time.perf_counter()
        held = heldcopy.held_fd()
        build = (time.perf_counter() - t0) * 1000
        path = str(forwarder.ensure_binary())
        sock = str(root / "s" / "none.sock")
        ways = {
            "sandbox-bin file": hostnet.Egress(path, forwarder.PORT, sock),
            "held memfd": hostnet.Egress(heldcopy.exec_path(held), forwarder.PORT, sock, fd=held),
        }
        state = str(root / "s")
        count = [0]

        def make(way: hostnet.Egress) -> Callable[[], object]:
            def one() -> None:
                count[0] += 1
                hostnet.EGRESS = lambda _agent, _authority: way
                if hostnet.ensure(state, f"a{count[0]}", helper) is None:
                    raise SystemExit("netkeep failed")
                hostnet.stop(state)

            return one

        def run(way: hostnet.Egress) -> Callable[[], object]:
            fds = (way.fd,) if way.fd >= 0 else ()
            return lambda: subprocess.run([way.forwarder], pass_fds=fds, capture_output=True, check=False)

        rows: dict[str, list[float]] = {}
        for _ in range(3):  # interleaved, so a change in load falls on both alike
            for name, way in ways.items():
                for kind, action in (("netns", make(way)), ("exec", run(way))):
                    rows.setdefault(f"{kind}: {name}", []).append(median_ms(action, args.runs // 3))
        for name, values in rows.items():
            print(f"{name:<28} median per round " + " · ".join(f"{v:.2f}" for v in values) + " ms")
        print(f"building the held copy (once per process): {build:.0f} ms")
        mid = {name: sorted(v)[1] for name, v in rows.items()}
        for kind, what in (
            ("netns", "making an agent's netns with its forwarder"),
            ("exec", "forwarder exec"),
        ):
            new, old = mid[f"{kind}: held memfd"], mid[f"{kind}: sandbox-bin file"]
            record(
                f"{what}: from the held memfd (vs sandbox-bin's file)",
                f"{new:.2f} ms",
                f"{old:.2f} ms",
                ratio(new, old),
            )
    finally:
        hostnet.EGRESS = None
        hostnet.stop()
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
