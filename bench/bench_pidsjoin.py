"""What joining the agent's pids cgroup costs a gateway-host run (exechost-hostenter `join`, fresh round 8
o): `/bin/true` spawned plainly against the same through `join`, wall p50 per spawn, same run; and making
the group (`host_pids_group`, every host run) against one plain spawn. Then its memory group too (fresh
round 17 a): the second `join` after the pids one against the pids one alone, and `host_memory_group`.

Usage: .venv/bin/python bench/bench_pidsjoin.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record, spawn_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    os.environ["OPENCLAW_STATE_DIR"] = tempfile.mkdtemp(prefix="ehj-", dir="/tmp")
    from engine.commands import hostkeeper
    from engine.sandbox import bwraplimits

    helper = hostkeeper.helper_path()
    group = bwraplimits.host_pids_group("bench")
    if helper is None or group is None:
        print("no exechost-hostenter (scripts/setup.sh) or no writable v1 pids cgroup: nothing to compare")
        return
    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        plain = spawn_ms(["/bin/true"], args.runs)
        joined = spawn_ms([helper, "join", str(group / "tasks"), "--", "/bin/true"], args.runs)
        record(
            "host run: joining the agent's pids cgroup first, p50 per spawn (vs /bin/true plainly)",
            f"{joined:.2f} ms",
            f"{plain:.2f} ms",
            ratio(joined, plain),
        )
        made = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            bwraplimits.host_pids_group("bench")  # made (and its caps set) on every host run
            made.append((time.perf_counter() - t0) * 1000)
        record(
            "host run: making the agent's pids cgroup (host_pids_group), p50 per run (vs one spawn)",
            f"{statistics.median(made):.3f} ms",
            f"{plain:.2f} ms",
            ratio(statistics.median(made), plain),
        )
        memory = bwraplimits.host_memory_group("bench")
        if memory is None:
            print("no writable v1 memory hierarchy: no memory rows")
            return
        pids_only = [helper, "join", str(group / "tasks"), "--", "/bin/true"]
        both = [helper, "join", str(group / "tasks"), "--", helper, "join", str(memory / "tasks"), "--"]
        for _ in range(3):  # interleaved: the load moves between rows, not within one
            one = spawn_ms(pids_only, args.runs)
            two = spawn_ms([*both, "/bin/true"], args.runs)
            record(
                "host run: joining the memory cgroup after the pids one, p50 per spawn (vs pids alone)",
                f"{two:.2f} ms",
                f"{one:.2f} ms",
                ratio(two, one),
            )
        made = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            bwraplimits.host_memory_group("bench")  # made (and its caps set) on every host run
            made.append((time.perf_counter() - t0) * 1000)
        record(
            "host run: making the agent's memory cgroup (host_memory_group), p50 per run (vs one spawn)",
            f"{statistics.median(made):.3f} ms",
            f"{plain:.2f} ms",
            ratio(statistics.median(made), plain),
        )
    finally:
        bwraplimits.drop_host_groups()


if __name__ == "__main__":
    main()
