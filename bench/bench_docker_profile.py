"""What our seccomp profile and RAM limits cost a Docker sandbox: container create + start, and `docker exec
<c> true`, with exechost's hardening (our profile, memory limit, sized tmpfs, owner cgroups as the manager
makes them) against the same container with Docker's builtin profile and no limits (the raw baseline).

Run: PYTHONPATH=$PWD .venv/bin/python bench/bench_docker_profile.py [--starts N] [--execs N] [--repeats N]
Uses the busybox test image; removes its containers by label.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record

LABEL = f"bench-docker-profile-{os.getpid()}"


def kwargs(image: str, ours: bool, n: int) -> dict[str, Any]:
    from engine.sandbox import docker_ops
    from engine.sandbox.settings import DockerSettings

    d = DockerSettings(image=image)
    kw = docker_ops.hardening_kwargs(d, None)
    if not ours:  # Docker's own: builtin profile, no memory limit, tmpfs with the kernel's default size
        kw["security_opt"] = [o for o in kw["security_opt"] if not o.startswith("seccomp=")]
        kw.pop("mem_limit")
        kw["tmpfs"] = {path: "" for path in kw["tmpfs"]}
    kw.update(image=image, name=f"{LABEL}-{'ours' if ours else 'raw'}-{n}", command=["sleep", "600"])
    kw.update(labels={"exechost.test": LABEL}, network_mode="none")
    return kw


def start(kw: dict[str, Any], ours: bool) -> float:
    from engine.sandbox import docker_ops, dockercg

    if ours:
        kw["cgroup_parent"] = dockercg.parent_for("agent-bench")
    t0 = time.perf_counter()
    docker_ops.create_and_start(kw)
    return time.perf_counter() - t0


def exec_true(name: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["docker", "exec", name, "true"], check=True)
    return time.perf_counter() - t0


LOOP = (
    "read -r s _ < /proc/uptime; i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done; "
    'read -r e _ < /proc/uptime; echo "$s $e"'
)


def exec_loop(name: str) -> float:
    """Seconds per fork+exec of /bin/true inside the container (each a few hundred filtered syscalls)."""
    out = subprocess.run(
        ["docker", "exec", name, "sh", "-c", LOOP], check=True, capture_output=True, text=True
    )
    s, e = (float(x) for x in out.stdout.split())
    return (e - s) / 300


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--execs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from engine.sandbox import docker_ops, dockercg
    from tests.helpers.sandbox import build_test_image

    image = build_test_image()
    try:
        for repeat in range(args.repeats):
            starts: dict[bool, list[float]] = {True: [], False: []}
            execs: dict[bool, list[float]] = {True: [], False: []}
            loops: dict[bool, list[float]] = {True: [], False: []}
            for n in range(args.starts):
                for ours in (False, True):  # alternating: the machine's load hits both alike
                    kw = kwargs(image, ours, repeat * 100 + n)
                    starts[ours].append(start(kw, ours))
                    for _ in range(args.execs // args.starts or 1):
                        execs[ours].append(exec_true(kw["name"]))
                    loops[ours].append(exec_loop(kw["name"]))
                    docker_ops.remove(kw["name"])
            for what, samples in (
                ("create + start", starts),
                ("docker exec true", execs),
                ("fork+exec inside", loops),
            ):
                raw, ours_ms = (statistics.median(samples[k]) * 1000 for k in (False, True))
                print(f"run {repeat + 1}: {what:<18} ours {ours_ms:8.2f} ms  Docker's own {raw:8.2f} ms")
                record(
                    f"docker sandbox {what} (our profile, limits)",
                    f"{ours_ms:.2f} ms",
                    f"{raw:.2f} ms",
                    ratio(ours_ms, raw),
                    "≤ 1.1×",
                )
    finally:
        for c in docker_ops.client().api.containers(all=True, filters={"label": f"exechost.test={LABEL}"}):
            docker_ops.remove(c["Id"])
        dockercg.sweep()


if __name__ == "__main__":
    main()
