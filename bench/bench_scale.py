"""Scale: `status` flat in the session count, `process list` paged, and 10,000 idle background sessions.

A real `exechost gateway run` daemon in a throwaway state dir; sessions are `sleep 600` started with
`exec background=true` over kept control connections. Each session holds 4 fds (3 pipes and a pidfd), so
10,000 need ~40,000: the daemon raises its soft RLIMIT_NOFILE to the hard limit itself, and this bench, when
it may (root), starts it with a hard limit of 65,536 (this machine's default hard limit is 20,000).
Usage: .venv/bin/python bench/bench_scale.py [--sessions N]  (default: what the fd limit allows, ≤ 10,000)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_gateway import FULL, connect, pct  # noqa: E402
from bench.table import record  # noqa: E402
from engine.protocol.client import ControlClient  # noqa: E402

HARD = 65536


def start_daemon(state: Path) -> subprocess.Popen[bytes]:
    (state / "config.toml").write_text(FULL)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}

    def more_fds() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        with contextlib.suppress(ValueError, OSError):  # unprivileged: the daemon's soft limit = the hard one
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, max(hard, HARD)))

    return subprocess.Popen(
        [sys.executable, "-m", "runner", "gateway", "run"],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=more_fds,
    )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def nofile(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return "/".join(line.split()[3:5])
    return "?"


async def timed(
    client: ControlClient, method: str, params: dict | None = None, runs: int = 200
) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await client.request(method, params or {})
        out.append(time.perf_counter() - t0)
    return out


async def spawn(clients: list[ControlClient], count: int) -> int:
    failures = 0

    async def one(client: ControlClient) -> None:
        nonlocal failures
        result = await client.request("exec", {"command": "sleep 600", "background": True})
        if result["details"]["status"] != "running":
            failures += 1
            if failures == 1:
                print("first refusal:", result["text"][:300])

    batch = 64
    for start in range(0, count, batch):
        await asyncio.gather(
            *(one(clients[i % len(clients)]) for i in range(start, min(count, start + batch)))
        )
    return failures


async def list_all(client: ControlClient) -> tuple[float, float, int, int]:
    """(first page s, whole walk s, biggest frame bytes, rows)."""
    params: dict = {"action": "list"}
    t0 = time.perf_counter()
    first = 0.0
    biggest = 0
    rows = 0
    while True:
        result = await client.request("process", params)
        first = first or time.perf_counter() - t0
        biggest = max(biggest, len(json.dumps(result, ensure_ascii=False).encode()))
        rows += len(result["details"]["sessions"])
        if not result["details"].get("next"):
            return first, time.perf_counter() - t0, biggest, rows
        params = {"action": "list", "cursor": result["details"]["next"]}


async def run(state: Path, sessions: int) -> None:
    proc = start_daemon(state)
    try:
        client = await connect(state, "scale")
        spawners = [client] + [await connect(state, f"spawn{i}") for i in range(3)]
        print(f"gateway pid {proc.pid}, open files soft/hard {nofile(proc.pid)}")
        status0 = await timed(client, "status")
        rss0 = rss_kib(proc.pid)
        t0 = time.perf_counter()
        mark = min(2000, sessions)
        failed = await spawn(spawners, mark)
        status2k = await timed(client, "status")
        failed += await spawn(spawners, sessions - mark)
        took = time.perf_counter() - t0
        rss = rss_kib(proc.pid)
        status_all = await timed(client, "status")
        info = await client.request("status")
        pages = [await list_all(client) for _ in range(3)]
        for c in spawners:
            await c.close()
    finally:
        t1 = time.perf_counter()
        proc.terminate()
        proc.wait()
        stop = time.perf_counter() - t1
    running = info["runningSessions"]
    per = (rss - rss0) / max(1, running)
    print(f"spawned {sessions} in {took:.1f} s ({failed} refused); running {running}; stop {stop:.1f} s")
    print(
        f"status p50: none {pct(status0, 0.5):.2f} ms, {mark} {pct(status2k, 0.5):.2f} ms, "
        f"{running} {pct(status_all, 0.5):.2f} ms"
    )
    print(f"gateway RSS {rss0} KiB -> {rss} KiB: {per:.1f} KiB per session")
    for first, whole, biggest, rows in pages:
        print(
            f"process list: first page {first * 1000:.1f} ms, all {rows} rows {whole * 1000:.0f} ms, "
            f"biggest frame {biggest / 1024:.0f} KiB"
        )
    record(
        f"`status` p50 with {mark} idle sessions (baseline: none)",
        f"{pct(status2k, 0.5):.2f} ms",
        f"{pct(status0, 0.5):.2f} ms",
        f"{pct(status2k, 0.5) / pct(status0, 0.5):.2f}×",
        "≤ 1 ms, flat",
    )
    record(
        f"idle background sessions running (of {sessions}), gateway RSS each",
        f"{running}, {per:.1f} KiB",
        "—",
        "—",
        "10,000, ≤ 100 KB",
    )
    firsts = sorted(p[0] for p in pages)
    record(
        f"`process list` over {running} sessions: first page p50 (3 runs), biggest frame",
        f"{firsts[1] * 1000:.1f} ms, {max(p[2] for p in pages) / 1024:.0f} KiB",
        f"`status` {pct(status_all, 0.5):.2f} ms",
        "—",
        "≤ 50 ms, < 1 MiB",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=0)
    args = parser.parse_args()
    if not args.sessions:
        # 4 fds a session, and room for the daemon's own: the hard limit it can raise its soft limit to.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        with contextlib.suppress(ValueError, OSError):  # what start_daemon's child will get too
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, max(hard, HARD)))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        args.sessions = min(10_000, (hard - 300) // 4)
        print(f"sessions: {args.sessions} (hard open-file limit {hard})")
    root = Path(tempfile.mkdtemp(prefix="ehs-", dir="/tmp"))
    state = root / "s"
    state.mkdir(mode=0o700)
    try:
        asyncio.run(run(state, args.sessions))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
