"""The generation stamp checked at the spawn (fresh round 14 a): what the two checks a revoke relies on
(before the process is made and after) add to a session's start. `SessionManager.run` of `true` under an
agent's stamp against the same run with no stamp (the operator's, which skips both), in the same run,
interleaved rounds of N runs each (medians); and the check alone per call against an empty call.

Run: .venv/bin/python bench/bench_generation_stamp.py [--runs 60]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, per_call_us, ratio, record
from engine.approvals import generations
from engine.approvals.generations import Generations, Stamp
from engine.sessions import RunSpec, SessionManager


async def _runs_ms(mgr: SessionManager, runs: int, stamp: Stamp | None) -> float:
    token = generations.authorize(stamp)
    try:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            result = await mgr.run(RunSpec(command="true", scope_key="agent:ops"))
            times.append((time.perf_counter() - start) * 1000)
            assert result.details.get("status") == "completed", result.details
        return statistics.median(times)
    finally:
        generations.reset(token)


async def main_async(runs: int) -> None:
    owner = Generations()
    owner.bump("ops")  # a rotated agent: a generation to compare against
    stamp = Stamp("ops", owner.current("ops"), owner)
    with tempfile.TemporaryDirectory() as tmp:
        mgr = SessionManager(Path(tmp))
        try:
            await _runs_ms(mgr, 5, stamp)  # (warm)
            res: dict[str, list[float]] = {}
            for _ in range(3):
                for name, way in (("stamped", stamp), ("unstamped", None)):
                    res.setdefault(name, []).append(await _runs_ms(mgr, runs, way))
            compared(
                "SessionManager.run `true` p50 under an agent's stamp (vs no stamp)",
                res,
                "stamped",
                "unstamped",
            )
        finally:
            await mgr.close()
    token = generations.authorize(stamp)
    try:
        check = [
            per_call_us(lambda: generations.stamped() is not None and stamp.stale(), 100_000, 5)
            for _ in range(3)
        ]
        empty = [per_call_us(lambda: None, 100_000, 5) for _ in range(3)]
    finally:
        generations.reset(token)
    record(
        "generation check at a spawn (stamped() + stale()), per call",
        " · ".join(f"{v:.3f}" for v in check) + " µs",
        " · ".join(f"{v:.3f}" for v in empty) + " µs (an empty call)",
        ratio(statistics.median(check), statistics.median(empty)),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    asyncio.run(main_async(args.runs))


if __name__ == "__main__":
    main()
