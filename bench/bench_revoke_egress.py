"""Egress decided under the agent's credential generation (fresh round 11 a, revoke12): what the check a
revoke relies on adds to each proxy decision. The hub's decision with the check (`EgressHub.decide`: the
generation compared before and after) against the same decision without it (`_decide`'s policy path), in the
same run, interleaved rounds of N decisions of an allowlisted name each (medians). And (fix15egress) the
same decision of a host run whose caller was main by the gateway token alone: its proof decided again
against the config now at each check (`Generations.proof_ended(live=True)` → `liveprincipal.proof_holds`).

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
from runner.gateway.liveprincipal import proof_holds

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
        generations.holds = lambda key: proof_holds(key, config)  # as the gateway sets it
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
            proof = "anonymous>main"
            anon = Request(
                "main",
                "hostnet.main~x",
                "pypi.org",
                443,
                "CONNECT",
                0,
                proof,
                generations.proof(proof, "main"),
            )
            await hub.decide(req)  # (warm: the store's first read, the thread pool)
            checked: list[float] = []
            bare: list[float] = []
            proved: list[float] = []
            for n in range(ROUNDS):  # interleaved, each first in turn: a busy box's drift hits all alike
                runs = [(checked, hub.decide, req), (bare, hub._decide, req), (proved, hub.decide, anon)]
                for into, fn, r in runs if n % 2 == 0 else runs[::-1]:
                    into.append(await _per_call_us(lambda fn=fn, r=r: fn(r), calls))
            with_check, without = statistics.median(checked), statistics.median(bare)
            with_proof = statistics.median(proved)
            check_ns = {}
            for name, r in (("proof", anon), ("credential", req)):
                start = time.perf_counter()
                for _ in range(calls * 50):
                    hub._revoked(r)
                check_ns[name] = (time.perf_counter() - start) * 1e9 / (calls * 50)
            record(
                "the staleness check alone (`EgressHub._revoked`), a proof's vs a credential's request, ns",
                f"{check_ns['proof']:.0f}",
                f"{check_ns['credential']:.0f}",
                ratio(check_ns["proof"], check_ns["credential"]),
            )
            record(
                "egress decision with the generation and the proof's check (a gateway-token run), µs",
                f"{with_proof:.1f}",
                f"{without:.1f}",
                ratio(with_proof, without),
                "≤ 1.05×",
            )
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
