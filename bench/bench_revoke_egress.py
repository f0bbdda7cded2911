"""Egress decided under the agent's credential generation (fresh round 11 a, revoke12): what the check a
revoke relies on adds to each proxy decision. The hub's decision with the check (`EgressHub.decide`: the
generation compared before and after) against the same decision without it (`_decide`'s policy path), in the
same run, interleaved rounds of N decisions of an allowlisted name each (medians). And (fix15egress) the
same decision of a host run whose caller was main by the gateway token alone: its proof decided again
against the config now at each check (`Generations.proof_ended(live=True)` → `liveprincipal.proof_holds`).
And (fix16rot) a sandboxed exec's re-serving of its sandbox (`EgressHub.listen`, with the check that the
sandbox was not served under an ended generation) against the same call with that check short-circuited.

Run: .venv/bin/python bench/bench_revoke_egress.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
        os.environ["OPENCLAW_STATE_DIR"] = tmp  # (the sandbox's socket dir: forwarder.socket_dir)
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
            served = await _reserve_us(hub, generations, calls)
            record(
                "a sandboxed exec's re-serve (`EgressHub.listen`), with the ended-generation check, µs",
                f"{served[0]:.1f}",
                f"{served[1]:.1f}",
                ratio(served[0], served[1]),
                "≤ 1.10×",
            )
            record("the ended-generation check alone (`served_under` + `_outlived`), ns", f"{served[2]:.0f}")
            record(
                "egress decision with the revoke's generation check, µs",
                f"{with_check:.1f}",
                f"{without:.1f}",
                ratio(with_check, without),
                "≤ 1.05×",
            )
        finally:
            await hub.proxy.close()


async def _reserve_us(hub: EgressHub, generations: Generations, calls: int) -> tuple[float, float, float]:
    """Medians of hub.listen with and without its check, on a sandboxed already served (what each
    sandboxed exec does), µs; and the check alone, ns."""
    from engine.sandbox.egress import forwarder

    name = "exechost-bench-reserve"
    directory = forwarder.prepare_dir(name)
    assert not await hub.listen(name, "ops", None)
    generation = generations.current("ops")
    assert directory.is_dir() and generation == generations.current("ops")
    checked = hub.proxy.served_under
    hubs: list[float] = []
    raw: list[float] = []
    for n in range(ROUNDS):
        runs: list[tuple[list[float], Callable[[str, str], object]]] = [
            (hubs, checked),
            (raw, lambda _s, _a: None),  # the same path with the check short-circuited: the baseline
        ]
        for into, served_under in runs if n % 2 == 0 else runs[::-1]:
            hub.proxy.served_under = served_under  # type: ignore[method-assign, assignment]
            start = time.perf_counter()
            for _ in range(calls):
                assert not await hub.listen(name, "ops", None)
            into.append((time.perf_counter() - start) * 1e6 / calls)
    hub.proxy.served_under = checked  # type: ignore[method-assign]
    start = time.perf_counter()
    for _ in range(calls * 50):
        served = checked(name, "ops")
        assert served is not None and not hub._outlived("ops", served, generation)
    alone = (time.perf_counter() - start) * 1e9 / (calls * 50)
    return statistics.median(hubs), statistics.median(raw), alone


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    asyncio.run(main_async(args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
