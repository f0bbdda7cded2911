"""What fresh round 18 a's shares add to a start, each against the raw baseline in the same run, three runs:

- a bwrap sandbox's cpu group (hostcpu.sandbox_cpu_group, made and removed with the sandbox) and the
  kmem.tcp caps of its memory group (bwrapmemory.charge_tcp, three writes; a host run's memory group too),
  against one plain spawn of /bin/true (a bwrap start is tens of such);
- a Docker sandbox's capped /dev/pts (dockerpts.cap_terminals: setns and mount in a child of its own) and
  its TCP charge, against `docker restart` of the same container (what a start already costs).

Usage: .venv/bin/python bench/bench_round18a.py [--calls N] [--docker N]
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

from bench.table import per_call_us, ratio, record, spawn_ms

IMAGE = "exechost-debian-test:bookworm"


def groups(calls: int) -> None:
    from engine.sandbox import bwrapmemory, hostcpu, rambudget

    if not hostcpu.usable() or not bwrapmemory.usable():
        print("no writable v1 cpu or memory hierarchy: nothing to compare")
        return
    memory = bwrapmemory.memory_cgroup("bench", "agent-bench", None)
    assert memory is not None
    tcp = rambudget.tcp_max()
    caps = ((memory.parent.parent, tcp // 4), (memory.parent, tcp // 16), (memory, tcp // 16))

    def cpu_group() -> None:
        made = hostcpu.sandbox_cpu_group("agent-bench", "bench")
        assert made is not None
        hostcpu.remove_group(str(made))

    for run in (1, 2, 3):
        plain = spawn_ms(["/bin/true"], 50)
        cpu = per_call_us(cpu_group, calls, 3)
        charge = per_call_us(lambda: bwrapmemory.charge_tcp(caps), calls, 3)
        record(
            f"run {run}: bwrap sandbox's cpu group made and removed",
            f"{cpu:.0f} us",
            f"{plain * 1000:.0f} us",
        )
        record(
            f"run {run}: kmem.tcp caps (3 groups) per start or host run",
            f"{charge:.0f} us",
            f"{plain * 1000:.0f} us",
        )
    bwrapmemory.remove(str(memory))


def docker(rounds: int) -> None:
    from engine.sandbox import docker_ops, dockerpts

    try:
        api = docker_ops.client().api
        api.inspect_image(IMAGE)
    except Exception as exc:  # no engine, or no test image
        print(f"no Docker engine with {IMAGE}: {exc}")
        return
    container = api.create_container(IMAGE, command=["sleep", "infinity"], labels={"exechost.bench": "1"})
    cid = container["Id"]
    try:
        for run in (1, 2, 3):
            starts, caps = [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                api.restart(cid, timeout=0)
                t1 = time.perf_counter()
                pid = int(api.inspect_container(cid)["State"]["Pid"])
                why = dockerpts.cap_terminals(pid, cid)
                t2 = time.perf_counter()
                assert why is None, why
                starts.append((t1 - t0) * 1000)
                caps.append((t2 - t1) * 1000)
            s, c = statistics.median(starts), statistics.median(caps)
            record(
                f"run {run}: Docker start's capped /dev/pts (inspect + mount)",
                f"{c:.1f} ms",
                f"{s:.1f} ms",
                ratio(c, s),
            )
    finally:
        api.remove_container(cid, force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--docker", type=int, default=5)
    args = parser.parse_args()
    os.environ["OPENCLAW_STATE_DIR"] = tempfile.mkdtemp(prefix="eh18-", dir="/tmp")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
    groups(args.calls)
    docker(args.docker)


if __name__ == "__main__":
    main()
