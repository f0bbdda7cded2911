"""The sandbox verbs' fair pool (fresh round 8 o): what a call costs in `engine.fairpool.sandbox` against
`asyncio.to_thread` (where `sandbox.list|explain|recreate` ran before), in the same run, for a call that
does nothing (the hop itself) and for a burst of 64 calls from 4 principals.

Run: .venv/bin/python bench/bench_fair_sandbox_verbs.py [--calls 2000] [--bursts 50]
(A real `sandbox.list` is a Docker API round trip, milliseconds; the hop is what the pool adds.)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine import fairpool


def _nothing() -> int:
    return 0


async def run(calls: int, bursts: int) -> None:
    pool = fairpool.sandbox
    one: list[float] = []
    one_base: list[float] = []
    for _ in range(calls):
        t = time.perf_counter()
        await asyncio.to_thread(_nothing)
        one_base.append(time.perf_counter() - t)
        t = time.perf_counter()
        await pool.run("agent", _nothing, "conn")
        one.append(time.perf_counter() - t)
    a, b = statistics.median(one) * 1e6, statistics.median(one_base) * 1e6
    record("sandbox verb hop, one call, p50", f"{a:.0f} µs", f"{b:.0f} µs", ratio(a, b))
    many: list[float] = []
    many_base: list[float] = []
    for _ in range(bursts):
        t = time.perf_counter()
        await asyncio.gather(*(asyncio.to_thread(_nothing) for _ in range(64)))
        many_base.append(time.perf_counter() - t)
        t = time.perf_counter()
        await asyncio.gather(*(pool.run(f"agent{i % 4}", _nothing, f"c{i % 8}") for i in range(64)))
        many.append(time.perf_counter() - t)
    a, b = statistics.median(many) * 1e3, statistics.median(many_base) * 1e3
    record("sandbox verb hops, 64 at once from 4 principals, p50", f"{a:.2f} ms", f"{b:.2f} ms", ratio(a, b))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--bursts", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(run(args.calls, args.bursts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
