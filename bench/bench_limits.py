"""What the per-principal limits of issue 27 cost: the checks each request now passes (revoked? reading
paused?), the admission of a connection by who it proved to be, and the per-agent quota check at each
session start, against a raw baseline in the same run (posix_spawn of /bin/true: what starting any
session costs at least). Round-4 e: a loopback connection's pre-auth slot (taken and given back), and a
node key given to a full node (each owner's share found by a scan, then the file written as before).

Usage: .venv/bin/python bench/bench_limits.py [--repeats R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.table import ratio, record  # noqa: E402
from engine.sessions.quota import Quota  # noqa: E402
from runner.gateway import limits  # noqa: E402


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


def _session(owner: str, operator: bool, exited: bool) -> SimpleNamespace:
    spec = SimpleNamespace(scope_key=f"agent:{owner}:main" if owner else "", operator=operator)
    output = SimpleNamespace(log_cap=64 << 20, log_bytes=4096)
    return SimpleNamespace(spec=spec, exited=exited, output=output)


async def _request_checks() -> float:
    """The two checks every request now passes, on a real Connection."""
    from runner.gateway.connection import Connection

    _reader, writer = await asyncio.open_connection(sock=_pair()[0])
    conn = Connection(writer, SimpleNamespace(client="b", name="b", operator=""), 0, lambda c: None)  # type: ignore[arg-type]

    def checks() -> None:
        if conn.revoked or conn.reading_paused:
            raise AssertionError

    try:
        return _per_call(checks, 200_000)
    finally:
        conn.abort(hard=True)


async def _preauth() -> float:
    """engine.preauth: a connection takes a slot (a timer armed) and shows its token (the timer cancelled)."""
    from engine.preauth import PreAuth

    gate = PreAuth()
    keys = [object() for _ in range(1000)]

    def one() -> None:
        for key in keys:
            gate.arrived(key, lambda: None)
            gate.admitted(key)

    return _per_call(one, 20) / len(keys)


def _node_key(held: int) -> tuple[float, float]:
    """(seconds per new key given to a node holding `held` keys of 8 owners, the same with the share scan
    skipped: the file write alone)."""
    import tempfile

    from runner.gateway import node_keys

    with tempfile.TemporaryDirectory() as tmp:
        keys = node_keys.NodeKeys(Path(tmp))
        for i in range(held):
            keys.give("n", f"agent:a{i % 8}:{'k' * 40}{i}")
        n = iter(range(10**9))

        def give() -> None:
            keys.give("n", f"agent:a1:{'k' * 40}new{next(n)}")

        whole = _per_call(give, 20)
        keys._save()
        t0 = time.perf_counter()
        for _ in range(20):
            keys._save()
        return whole, (time.perf_counter() - t0) / 20


def _pair() -> tuple[Any, Any]:
    import socket

    return socket.socketpair()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    admitted = [(False, f"agent{i % 20}") for i in range(limits.MAX_CONNECTIONS - limits.OPERATOR_SLOTS - 1)]
    from engine.config.loader import load_config_text

    text = '[[agents.list]]\nid = "agent1"\n[agents.list.tools.exec]\nmaxSessionsPerAgent = 8\n'
    config = load_config_text(text)

    def limits_from_config() -> None:
        os.stat(__file__)  # the gateway's config() stats its file on every call
        cfg = config.exec_for("agent1")
        assert cfg.max_sessions_per_agent == 8

    for r in range(args.repeats):
        spawn = _per_call(_spawn_true, 200)
        from_config = _per_call(limits_from_config, 2_000)
        record(
            f"session-start quota limits read from the config (stat + the agent's exec), run {r + 1}",
            f"{from_config * 1e6:.1f} µs",
            f"{spawn * 1e6:.0f} µs spawn",
            ratio(from_config, spawn),
        )
        checks = asyncio.run(_request_checks())
        record(
            f"per-request checks (revoked, reading paused), run {r + 1}",
            f"{checks * 1e9:.0f} ns",
            f"{spawn * 1e6:.0f} µs spawn",
            ratio(checks, spawn),
        )
        admit = _per_call(lambda: limits.refusal(False, "agent3", admitted), 2_000)
        record(
            f"connection admission, {len(admitted)} admitted, run {r + 1}",
            f"{admit * 1e6:.1f} µs",
            f"{spawn * 1e6:.0f} µs spawn",
            ratio(admit, spawn),
        )
        slot = asyncio.run(_preauth())
        record(
            f"pre-auth slot of a loopback connection (taken, then admitted), run {r + 1}",
            f"{slot * 1e6:.2f} µs",
            f"{spawn * 1e6:.0f} µs spawn",
            ratio(slot, spawn),
        )
        for held in (1_023, 4_095):
            give, write = _node_key(held)
            record(
                f"node key given, node holding {held} keys (of which the file write), run {r + 1}",
                f"{give * 1e3:.2f} ms ({write * 1e3:.2f} ms)",
                f"{spawn * 1e6:.0f} µs spawn",
                ratio(give, spawn),
            )
        for others in (0, 1_000, 10_000):
            quota = Quota()
            registry: dict[str, Any] = {}
            sessions = [_session("", True, False) for _ in range(others)]  # the operator's, not counted
            sessions += [_session("agent1", False, i % 2 == 0) for i in range(60)]  # this agent's own
            sessions += [_session(f"agent{i % 7 + 2}", False, False) for i in range(300)]  # other agents'
            for n, session in enumerate(sessions):
                session.id = f"s{n}"
                registry[session.id] = session
                quota.admit(session)  # type: ignore[arg-type]
            held = registry

            def check(held: dict[str, Any] = held, quota: Quota = quota) -> None:
                quota.grant("agent:agent1:main", held, 64 << 20)

            grant = _per_call(check, 200)
            record(
                f"session-start quota check, {len(held)} sessions held, run {r + 1}",
                f"{grant * 1e6:.1f} µs",
                f"{spawn * 1e6:.0f} µs spawn",
                ratio(grant, spawn),
            )


if __name__ == "__main__":
    main()
