"""Egress decided under the agent's credential generation (fresh round 11 a, revoke12): what the check a
revoke relies on adds to each proxy decision. The hub's decision with the check (`EgressHub.decide`: the
generation compared before and after) against the same decision without it (`_decide`'s policy path), in the
same run, interleaved rounds of N decisions of an allowlisted name each (medians).

Run: .venv/bin/python bench/bench_revoke_egress.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.approvals.generations import Generations
from engine.approvals.grants import GrantStore
from engine.approvals.store import ApprovalsStore
from engine.config.loader import load_config_text
from engine.sandbox.egress.proxy import Decision, Request
from runner.egress import EgressHub

ROUNDS = 6
CONFIG = '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nallow = ["pypi.org"]\n'


async def _per_call_us(fn: Callable[[], Awaitable[Decision]], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        decision = await fn()
        assert decision.allowed, decision.rule
    return (time.perf_counter() - start) * 1e6 / calls


async def main_async(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        config = load_config_text(CONFIG)
        generations = Generations()
        services = SimpleNamespace(
            approvals=SimpleNamespace(generations=generations),
            store=ApprovalsStore(state / "exec-approvals.json"),
            grants=GrantStore(state / "exec-grants.json"),
            state_dir=state,
            config=lambda: config,
            broadcast=lambda *_a: None,
        )
        hub = EgressHub(services)  # type: ignore[arg-type]
        try:
            generations.bump("ops")  # a revoked-then-added agent: a generation to compare against
            req = Request("ops", "exechost-bench", "pypi.org", 443, "CONNECT", generations.current("ops"))
            await hub.decide(req)  # (warm: the store's first read, the thread pool)
            checked: list[float] = []
            bare: list[float] = []
            for n in range(ROUNDS):  # interleaved, each first in turn: a busy box's drift hits both alike
                pair = [(checked, hub.decide), (bare, hub._decide)]
                for into, fn in pair if n % 2 == 0 else pair[::-1]:
                    into.append(await _per_call_us(lambda fn=fn: fn(req), calls))
            with_check, without = statistics.median(checked), statistics.median(bare)
            record(
                "egress decision with the revoke's generation check, µs",
                f"{with_check:.1f}",
                f"{without:.1f}",
                ratio(with_check, without),
                "≤ 1.05×",
            )
        finally:
            await hub.proxy.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    asyncio.run(main_async(args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
