"""Sandbox exec latency: warm `true` via the in-container supervisor vs `docker exec` and docker-py exec_run;
a new agent's first command (create + start + exec) with the pool of ready containers warmed, and without.

Run: .venv/bin/python bench/bench_sandbox.py [--warm N] [--baseline N] [--cold N] [--breakdown]
Builds the default image under a bench tag, uses a throwaway state dir, removes its containers by label.
`--breakdown` adds where a warm command's time goes: which slot it found (ready, still starting, none),
the CPU each command costs in the container and here, and the container's own floors (a fork, a fork+exec
of the login shell each command execs), all in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record

IMAGE = "exechost-sbxbench:latest"
LABEL_VALUE = f"bench-{os.getpid()}"


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def report(name: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    print(
        f"{name:<44} n={len(ms):<4} p50={pct(ms, 50):8.2f} ms  p90={pct(ms, 90):8.2f} ms  "
        f"mean={statistics.fmean(ms):8.2f} ms"
    )


async def timed(n: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t0)
    return out


CONTAINER_FLOORS = """
t() { read -r up _ < /proc/uptime; echo "$up"; }
n=$1; i=0; s=$(t); while [ $i -lt $n ]; do /bin/sh -lc true; i=$((i+1)); done; e=$(t); echo "exec $s $e"
i=0; s=$(t); while [ $i -lt $n ]; do (:); i=$((i+1)); done; e=$(t); echo "fork $s $e"
"""


def container_cpu_ns(name: str) -> int:
    from engine.sandbox import docker_ops

    stats = docker_ops.client().api.stats(name, stream=False, one_shot=True)
    return int(stats["cpu_stats"]["cpu_usage"]["total_usage"])


def container_floors(name: str, n: int) -> dict[str, float]:
    """ms per fork+exec of `/bin/sh -lc true` and per bare fork, timed by a loop inside the container."""
    out = subprocess.run(
        ["docker", "exec", name, "/bin/sh", "-c", CONTAINER_FLOORS, "floors", str(n)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    floors = {}
    for line in out.splitlines():
        what, start, end = line.split()
        floors[what] = (float(end) - float(start)) * 1000 / n
    return floors


async def breakdown(sx: object, name: str, n: int, run_true: Callable[[object], Awaitable[None]]) -> None:
    """Warm commands sorted by the slot each found, and the CPU one costs (container and this process)."""
    from engine.sandbox import slots
    from engine.sandbox import supervisor as sv

    pool = slots.pool_for(sv.Channel(name))
    kinds: dict[str, list[float]] = {"ready slot": [], "slot still starting": [], "no slot (made for it)": []}
    cpu0, here0 = container_cpu_ns(name), time.process_time()
    for _ in range(n):
        ready, starting = pool.counts
        kind = "ready slot" if ready else "slot still starting" if starting else "no slot (made for it)"
        kinds[kind].extend(await timed(1, lambda: run_true(sx)))
    container_ms = (container_cpu_ns(name) - cpu0) / 1e6 / n
    here_ms = (time.process_time() - here0) * 1000 / n
    print("# breakdown: back-to-back warm `true` (launcher spawn only) by the slot each command found")
    for kind, samples in kinds.items():
        if samples:
            report(f"  {kind}", samples)
    print(
        f"  CPU per command: container {container_ms:.2f} ms (the command, its slot's refill), "
        f"this process {here_ms:.2f} ms (all threads), {os.cpu_count()} CPUs"
    )
    floors = container_floors(name, 300)
    print(
        f"  in-container floors: fork+exec `/bin/sh -lc true` {floors['exec']:.2f} ms, "
        f"fork {floors['fork']:.2f} ms"
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm", type=int, default=300)
    ap.add_argument("--baseline", type=int, default=30)
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--paced", type=int, default=100, help="warm commands issued 20 ms apart (0: skip)")
    ap.add_argument("--breakdown", action="store_true", help="where a warm command's time goes (see above)")
    ap.add_argument(
        "--debian", action="store_true", help="the Debian image (mmdebstrap; built once, reused) not busybox"
    )
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="eh-bench-", dir="/tmp")
    os.environ["OPENCLAW_STATE_DIR"] = os.path.join(root, "s")

    from engine.config.loader import load_config_text
    from engine.sandbox import SandboxManager, docker_ops, prepare_exec
    from engine.sessions import RunSpec

    global IMAGE
    if args.debian:
        from engine.sandbox.images import DEBIAN_FLAVOUR, IMAGE_LABEL, build_debian_image

        IMAGE = "exechost-debian-test:bookworm"  # the test suite's image: built once per machine
        try:
            labels = (docker_ops.client().images.get(IMAGE).attrs.get("Config") or {}).get("Labels") or {}
        except docker_ops.not_found_type():
            labels = {}
        if labels.get(IMAGE_LABEL) != DEBIAN_FLAVOUR:
            started = time.perf_counter()
            build_debian_image(IMAGE, lambda _line: None)
            print(f"# Debian image built in {time.perf_counter() - started:.1f} s (mmdebstrap, import)")
    else:
        docker_ops.build_image([IMAGE], lambda _line: None)
    config = load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )
    mgr = SandboxManager(extra_labels={"exechost.bench": LABEL_VALUE})
    agent = "bench" + secrets.token_hex(3)

    async def run_true(sx: object) -> None:
        handle = await sx.launcher.spawn(RunSpec(command="true", cwd=sx.cwd, env={}))  # type: ignore[attr-defined]
        while await handle.read() is not None:
            pass
        code = await handle.wait()
        handle.close()
        assert code == (0, None), code

    async def first_command(manager: SandboxManager, who: str) -> float:
        t0 = time.perf_counter()
        sx = await prepare_exec(config, who, "s", None, manager=manager)
        await run_true(sx)
        took = time.perf_counter() - t0
        assert sx.created, "not a cold start"
        docker_ops.remove(sx.container)
        return took

    # Without the pool: Docker's create + start on the request path (a manager whose pool is off).
    plain = SandboxManager(extra_labels={"exechost.bench": LABEL_VALUE})
    try:
        cold_plain = [await first_command(plain, f"{agent}n{i}") for i in range(args.cold)]
        # With the pool (as the gateway runs it): each new agent claims a ready container; the pool
        # refills between samples, off the measured path.
        await mgr.start_pool(config)
        cold: list[float] = []
        for i in range(args.cold):
            await mgr.pool.settle()
            cold.append(await first_command(mgr, f"{agent}c{i}"))
        await mgr.pool.settle()
        sx = await prepare_exec(config, agent, "s", None, manager=mgr)
        await run_true(sx)
        name = sx.container

        async def warm_full() -> None:
            await run_true(await prepare_exec(config, agent, "s", None, manager=mgr))

        warm = await timed(args.warm, warm_full)
        spawn_only = await timed(args.warm, lambda: run_true(sx))
        paced: list[float] = []
        for _ in range(args.paced):
            # Back to back, every command also competes with the refill of the slot it took; an agent
            # issues its next command after a model turn, by when that refill is long done.
            await asyncio.sleep(0.02)
            paced.extend(await timed(1, warm_full))

        async def pty_true() -> None:
            h = await sx.launcher.spawn(RunSpec(command="true", cwd=sx.cwd, env={}, pty=True))
            while await h.read() is not None:
                pass
            await h.wait()
            h.close()

        pty = await timed(max(5, args.baseline // 2), pty_true)
        if args.breakdown:
            await breakdown(sx, name, args.warm, run_true)

        def cli() -> None:
            subprocess.run(["docker", "exec", name, "true"], check=True)

        api = docker_ops.client().containers.get(name)

        def exec_run() -> None:
            assert api.exec_run(["true"]).exit_code == 0

        cli_t = await timed(args.baseline, lambda: asyncio.to_thread(cli))
        py_t = await timed(args.baseline, lambda: asyncio.to_thread(exec_run))

        print(f"# sandbox exec latency, image {IMAGE}, {os.cpu_count()} CPUs")
        report("docker exec CLI `true` (baseline)", cli_t)
        report("docker-py exec_run `true` (baseline)", py_t)
        report("exechost warm `true` (prepare_exec + run)", warm)
        report("exechost warm `true` (launcher spawn only)", spawn_only)
        if paced:
            report("exechost warm `true` (prepare+run, 20 ms apart)", paced)
        report("exechost PTY `true` (Engine API exec -t)", pty)
        report("exechost cold, no pool (create+start+exec)", cold_plain)
        report("exechost cold, pool warmed (claim+exec)", cold)
        ms = lambda xs: pct([x * 1000 for x in xs], 50)  # noqa: E731
        record(
            "sandbox warm exec `true` p50 (vs docker-py exec_run)",
            f"{ms(warm):.2f} ms",
            f"{ms(py_t):.1f} ms",
            ratio(ms(warm), ms(py_t)),
            "≤ 1.5 ms",
        )
        record(
            "sandbox cold first command p50 (pool warmed vs no pool)",
            f"{ms(cold):.0f} ms",
            f"{ms(cold_plain):.0f} ms",
            ratio(ms(cold), ms(cold_plain)),
            "≤ 150 ms",
        )
    finally:
        await mgr.stop_pool()
        for c in docker_ops.list_sandboxes(f"exechost.bench={LABEL_VALUE}"):
            docker_ops.remove(c["Id"])


if __name__ == "__main__":
    asyncio.run(main())
