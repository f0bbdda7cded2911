"""Egress DNS lanes (fresh round 8 o): what a lookup in its principal's own lane costs against the same
getaddrinfo on one shared pool (what the proxy did before), in the same run: one lookup at a time (the worst
case for lanes: each lookup finds its lane dropped, so it makes a pool and a thread), and bursts of lookups
from several principals at once.

Run: .venv/bin/python bench/bench_egress_dns.py [--lookups 300] [--bursts 30]
The name is `localhost` (answered from /etc/hosts: no traffic leaves the machine), so what is timed is the
thread hop and the lane's bookkeeping, not a DNS server.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.sandbox.egress import addresses

NAME, PORT = "localhost", 80


async def _one_at_a_time(n: int, shared: concurrent.futures.ThreadPoolExecutor) -> tuple[float, float]:
    """p50 µs of a lane lookup and of a shared-pool lookup, interleaved."""
    loop = asyncio.get_running_loop()
    lane: list[float] = []
    base: list[float] = []
    for i in range(n):
        t = time.perf_counter()
        await loop.run_in_executor(shared, addresses.system_lookup, NAME, PORT)
        base.append(time.perf_counter() - t)
        t = time.perf_counter()
        await addresses._lookup(loop, NAME, PORT, f"agent{i % 4}")
        lane.append(time.perf_counter() - t)
    return statistics.median(lane) * 1e6, statistics.median(base) * 1e6


async def _bursts(n: int, shared: concurrent.futures.ThreadPoolExecutor) -> tuple[float, float]:
    """p50 ms of 4 principals × 16 lookups at once, in lanes and on the shared pool."""
    loop = asyncio.get_running_loop()
    lane: list[float] = []
    base: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        await asyncio.gather(
            *(loop.run_in_executor(shared, addresses.system_lookup, NAME, PORT) for _ in range(64))
        )
        base.append(time.perf_counter() - t)
        t = time.perf_counter()
        await asyncio.gather(*(addresses._lookup(loop, NAME, PORT, f"agent{i % 4}") for i in range(64)))
        lane.append(time.perf_counter() - t)
    return statistics.median(lane) * 1e3, statistics.median(base) * 1e3


async def run(lookups: int, bursts: int) -> None:
    shared = concurrent.futures.ThreadPoolExecutor(addresses.RESOLVER_THREADS, thread_name_prefix="base-dns")
    try:
        await _one_at_a_time(20, shared)  # warm the resolver (nss modules, /etc/hosts)
        one, one_base = await _one_at_a_time(lookups, shared)
        record(
            "egress DNS lookup, one at a time, p50",
            f"{one:.0f} µs",
            f"{one_base:.0f} µs",
            ratio(one, one_base),
        )
        many, many_base = await _bursts(bursts, shared)
        record(
            "egress DNS, 64 lookups at once from 4 principals, p50",
            f"{many:.1f} ms",
            f"{many_base:.1f} ms",
            ratio(many, many_base),
        )
    finally:
        shared.shutdown()
    assert addresses._in_flight == 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lookups", type=int, default=300)
    parser.add_argument("--bursts", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(run(args.lookups, args.bursts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
