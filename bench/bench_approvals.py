"""Approval-queue benchmark: gateway memory under a flood of huge asks, and paging the pending list.

Issue 9 item 14 measured 2,000 asks of 200 KB taking the gateway from 28 MB to 1.1 GB. This runs a real
`exechost gateway run` daemon in a throwaway state dir and reports its RSS (from /proc) idle, after the
same flood (refused at submission now), and with the approval queue full of maximum-size asks; then the
time to read the full pending list page by page, against one `status` round trip as the baseline.
Usage: .venv/bin/python bench/bench_approvals.py [--flood N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_gateway import connect, line, start_daemon  # noqa: E402
from engine.approvals.room import MAX_PENDING, MAX_PENDING_PER_AGENT  # noqa: E402
from engine.errors import ExecHostError  # noqa: E402
from engine.tools.exec import COMMAND_MAX_BYTES  # noqa: E402

AGENTS = MAX_PENDING // MAX_PENDING_PER_AGENT
CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n' + "".join(
    f'\n[[agents.list]]\nid = "a{i}"\n' for i in range(AGENTS)
)


def rss_mb(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def run(state: Path, flood: int) -> None:
    proc = start_daemon(state, CONFIG)
    try:
        agent = await connect(state, "agent")
        await agent.request("status")
        idle = rss_mb(proc.pid)
        refused = 0
        for i in range(flood):
            try:
                await agent.request("exec", {"command": f"echo {i} " + "x" * 200_000})
            except ExecHostError:
                refused += 1
        after_flood = rss_mb(proc.pid)
        queued = 0
        for i in range(MAX_PENDING):
            command = f"echo {i} " + "y" * (COMMAND_MAX_BYTES - 64)
            res = await agent.request("exec", {"command": command, "agentId": f"a{i % AGENTS}"})
            queued += res["details"]["status"] == "approval-pending"
        full = rss_mb(proc.pid)
        operator = await connect(state, "operator")
        paging: list[float] = []
        status: list[float] = []
        for _ in range(20):
            t0 = time.perf_counter()
            rows = await operator.pending_approvals()
            paging.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await operator.request("status")
            status.append(time.perf_counter() - t0)
        assert len(rows) == queued
        for label, mb in (
            ("gateway RSS idle", idle),
            (f"after {flood} asks of 200 KB ({refused} refused at submission)", after_flood),
            (f"with the queue full: {queued} asks of {COMMAND_MAX_BYTES // 1024} KiB", full),
        ):
            print(f"{label:<58} {mb:7.1f} MB")
        print(line(f"read all {len(rows)} pending approvals, page by page", paging))
        print(line("baseline: one `status` round trip", status))
        await agent.close()
        await operator.close()
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flood", type=int, default=2000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="eh-bench-"))
    try:
        state = tmp / "s"
        state.mkdir(mode=0o700)
        asyncio.run(run(state, args.flood))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
