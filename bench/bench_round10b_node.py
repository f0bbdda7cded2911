"""What fresh round 10 b's node constructions cost (issue 27 §2): a node session start's budget check per
principal (`NodeQuota.grant`, the node's config read for the agent) against the gateway's own `Quota.grant`
over the same sessions; an event kept for its gateway's share (`Outbox.number`, with 1 and 64 gateways'
shares, and past the byte budget) against a plain bounded deque's append (the one outbox it replaced);
and a node's watch taken and freed per principal, against spawning `/bin/true`.

Usage: .venv/bin/python bench/bench_round10b_node.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import itertools
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.config.loader import load_config_text
from engine.nodes.wire import NodeEvent
from engine.sessions.quota import Quota
from runner.node import gateways
from runner.node.outbox import Outbox
from runner.node.quota import NodeQuota


def _per_call(fn: Any, n: int) -> float:
    """Seconds per call, the best of 5 batches of n."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _spawn_true() -> None:
    pid = os.posix_spawn("/bin/true", ["/bin/true"], {})
    os.waitpid(pid, 0)


def _session(scope: str, exited: bool) -> SimpleNamespace:
    spec = SimpleNamespace(scope_key=scope, operator=False)
    output = SimpleNamespace(log_cap=16 << 20, log_bytes=4096)
    return SimpleNamespace(spec=spec, exited=exited, output=output)


def _held(quota: Quota, scope: str, others: str) -> dict[str, Any]:
    registry: dict[str, Any] = {}
    sessions = [_session(scope, i % 2 == 0) for i in range(60)]  # this agent's own
    sessions += [_session(others.format(i % 7), False) for i in range(300)]  # other agents'
    for n, session in enumerate(sessions):
        session.id = f"s{n}"
        registry[session.id] = session
        quota.admit(session)  # type: ignore[arg-type]
    return registry


def _event(n: int) -> NodeEvent:
    return NodeEvent("exec.finished", {"sessionKey": f"fp{n % 64}/agent:main:s", "output": "x" * 200})


_ONE: collections.deque[NodeEvent] = collections.deque(maxlen=1000)


def _one_outbox(events: list[NodeEvent]) -> None:
    """What the one outbox did per event: number it, count a drop when full, append to one deque."""
    seqs = itertools.count(1)
    dropped = 0
    for e in events:
        numbered = NodeEvent(e.event, e.payload, seq=next(seqs))
        if len(_ONE) == _ONE.maxlen:
            dropped += 1
        _ONE.append(numbered)


def _past_budget(outbox: Outbox, events: list[NodeEvent]) -> None:
    for n, e in enumerate(events):
        outbox.number(f"fp{n % 64}/", e, 260)


async def _watch_cost(n: int) -> float:
    """A watch taken and unwatched, on a real SessionManager session (its forwarder started, cancelled)."""
    from engine.sessions import RunSpec, SessionManager
    from runner.node.output import NodeOutput

    async def emit(_event: NodeEvent) -> None:
        return None

    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"ehb-{os.getpid()}"
    state.mkdir(mode=0o700, exist_ok=True)
    manager = SessionManager(state, kill_grace_sec=0.2)
    out = NodeOutput(manager, emit)
    try:
        res = await manager.run(RunSpec(command="sleep 60", background=True, scope_key="fp/agent:main:s"))
        sid = str(res.details["sessionId"])
        t0 = time.perf_counter()
        for _ in range(n):
            out.watch(sid)
            out.unwatch(sid)
        return (time.perf_counter() - t0) / n
    finally:
        out.close()
        await manager.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    config = load_config_text('[tools.exec]\n[[agents.list]]\nid = "main"\n')
    for r in range(args.runs):
        spawn = _per_call(_spawn_true, 200)
        node_quota = NodeQuota(config=lambda: config)
        node_held = _held(node_quota, "fp/agent:main:s", "fp/agent:a{}:s")
        node = _per_call(functools.partial(node_quota.grant, "fp/agent:main:x", node_held, 64 << 20), 500)
        gw_quota = Quota()
        gw_held = _held(gw_quota, "agent:main:s", "agent:a{}:s")
        gateway = _per_call(functools.partial(gw_quota.grant, "agent:main:x", gw_held, 64 << 20), 500)
        record(
            f"node session-start budget check, 360 sessions held (vs the gateway's), run {r + 1}",
            f"{node * 1e6:.1f} µs",
            f"{gateway * 1e6:.1f} µs",
            ratio(node, gateway),
        )
        events = [_event(n) for n in range(1000)]
        base = _per_call(functools.partial(_one_outbox, events), 20) / len(events)
        for shares in (1, 64):
            outbox = Outbox()
            picked = [
                NodeEvent(e.event, {**e.payload, "sessionKey": f"fp{n % shares}/k"})
                for n, e in enumerate(events)
            ]

            def keep(outbox: Outbox = outbox, picked: list[NodeEvent] = picked) -> None:
                for e in picked:
                    outbox.number(str(e.payload["sessionKey"]).split("/")[0] + "/", e, 260)

            kept = _per_call(keep, 20) / len(events)
            record(
                f"node event kept for its gateway, {shares} gateways' shares (vs one deque), run {r + 1}",
                f"{kept * 1e9:.0f} ns",
                f"{base * 1e9:.0f} ns",
                ratio(kept, base),
            )
        full = Outbox(most_bytes=64 * 260)  # every event past the byte budget: the largest share loses one
        over = _per_call(functools.partial(_past_budget, full, events), 20)
        record(
            f"node event kept past the byte budget, 64 gateways' shares (vs one deque), run {r + 1}",
            f"{over / len(events) * 1e9:.0f} ns",
            f"{base * 1e9:.0f} ns",
            ratio(over / len(events), base),
        )
        watch = asyncio.run(_watch_cost(2_000))
        whose = _per_call(
            functools.partial(gateways.principal, "0123456789abcdef0123456789abcdef/agent:main:s"), 5000
        )
        record(
            f"a node watch's principal (vs the watch taken and freed: a forwarder task), run {r + 1}",
            f"{whose * 1e9:.0f} ns",
            f"{watch * 1e6:.1f} µs",
            ratio(whose, watch),
        )
        record(f"(spawning /bin/true, for scale), run {r + 1}", f"{spawn * 1e6:.0f} µs")


if __name__ == "__main__":
    main()
