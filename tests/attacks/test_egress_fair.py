"""Class 3 (limits per principal): one agent's DNS lookups that never answer take nothing from another's.

The first test is attacker o's (round 8, tests/attacks/test_fresh_round8_o.py,
`test_class3_one_agents_hanging_lookups_refuse_another_agents_names`), which now holds. The system resolver
cannot be pointed at a silent server from a test (glibc reads only /etc/resolv.conf), so `system_lookup`,
the one place the proxy calls getaddrinfo, stands in for it: names in `.hang.test` wait on an Event as
getaddrinfo waits on a server that reads and never replies; the test sets it at the end. No sleeps."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.sandbox.egress import addresses, forwarder
from engine.sandbox.egress.proxy import Connection, Decision, EgressProxy, Request
from tests.helpers.egress import host_forwarder
from tests.helpers.gateway import wait_until


@pytest.fixture
def silent(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """A DNS that never answers `*.hang.test` (until the test ends); registry.ops.test answers 127.0.0.1."""
    never = threading.Event()
    real = addresses.system_lookup

    def lookup(name: str, port: int) -> list[tuple[Any, ...]]:
        if name.endswith(".hang.test"):
            never.wait(60)  # (set when the test ends: the threads are free again)
            return []
        if name == "registry.ops.test":
            return [(2, 1, 6, "", ("127.0.0.1", port))]
        return real(name, port)

    monkeypatch.setattr(addresses, "system_lookup", lookup)
    # The proxy stops waiting after RESOLVE_TIMEOUT_SEC while the thread stays held; never let the clock
    # decide what these tests see (the places are counted until the thread is free either way).
    monkeypatch.setattr(addresses, "RESOLVE_TIMEOUT_SEC", 600.0)
    try:
        yield never
    finally:
        never.set()


async def test_one_agents_hanging_lookups_never_refuse_another_agents_name(
    tmp_path: Path, silent: threading.Event
) -> None:
    """Agent evil's sandbox holds every place it has (64 lookups that never answer: any name under
    `mode = "open"`, or a wildcard allow over a zone it controls). Agent ops's sandbox then asks for its
    name: it is looked up at once, on ops's own threads (the answer, 127.0.0.1, is then refused as not
    public: what matters is that it was looked up, not refused unlooked)."""
    records: list[Connection] = []

    async def decide(req: Request) -> Decision:
        return Decision(True, "mode open (every public name)")

    proxy = EgressProxy(decide, records.append)
    dirs = {}
    for sandbox, agent in (("sb-evil", "evil"), ("sb-ops", "ops")):
        dirs[sandbox] = forwarder.socket_dir(sandbox)
        dirs[sandbox].mkdir(parents=True, mode=0o700)
        await proxy.listen(sandbox, agent, dirs[sandbox])
    writers: list[asyncio.StreamWriter] = []
    try:
        with host_forwarder(dirs["sb-evil"]) as evil_port, host_forwarder(dirs["sb-ops"]) as ops_port:
            for i in range(addresses.MAX_LOOKUPS_IN_FLIGHT + 1):
                _r, w = await asyncio.open_connection("127.0.0.1", evil_port)
                w.write(f"GET http://n{i}.hang.test/ HTTP/1.1\r\nHost: n{i}.hang.test\r\n\r\n".encode())
                writers.append(w)
            await wait_until(
                lambda: addresses.in_flight("evil") >= addresses.MAX_LOOKUPS_IN_FLIGHT, timeout=30
            )
            # evil's 65th is refused at once, by its own cap, saying whose lookups wait.
            await wait_until(lambda: any(r.agentId == "evil" and r.rule for r in records), timeout=30)
            [over] = [r for r in records if r.agentId == "evil"]
            assert "lookups of evil are still waiting for DNS" in over.rule, over
            assert addresses.in_flight("ops") == 0
            reader, writer = await asyncio.open_connection("127.0.0.1", ops_port)
            writers.append(writer)
            writer.write(b"GET http://registry.ops.test/ HTTP/1.1\r\nHost: registry.ops.test\r\n\r\n")
            await writer.drain()
            await asyncio.wait_for(reader.read(), 30)
            ops = [r for r in records if r.agentId == "ops"]
            assert ops, records
            said = [f"{r.rule} {r.error or ''} {r.detail or ''}" for r in ops]
            assert not any("lookups" in text and "waiting" in text for text in said), said
            assert any("not public" in text for text in said), said  # looked up: its answer was judged
            assert addresses.in_flight("evil") == addresses.MAX_LOOKUPS_IN_FLIGHT  # still held, by evil
    finally:
        silent.set()
        for w in writers:
            w.close()
        await proxy.close()
    # Once the silent server's lookups end, every place and thread is given back.
    await wait_until(lambda: addresses.in_flight("evil") == 0 and addresses._in_flight == 0, timeout=30)


async def test_a_principals_lane_has_its_own_threads_and_ends_when_idle(
    silent: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the proxy: 2 × RESOLVER_THREADS hung lookups of one principal fill its threads only; another
    principal's name resolves meanwhile (no queueing behind them). A lane is kept while it is used (a burst
    reuses its threads) and dropped, its threads ended, once idle for LANE_IDLE_SEC."""
    hung = [
        asyncio.ensure_future(addresses.resolve(f"h{i}.hang.test", 80, {}, principal="evil"))
        for i in range(addresses.RESOLVER_THREADS * 2)
    ]
    await wait_until(lambda: addresses.in_flight("evil") == addresses.RESOLVER_THREADS * 2, timeout=30)
    with pytest.raises(addresses.Refused, match="non-public address"):
        await addresses.resolve("registry.ops.test", 80, {}, principal="ops")
    ops_lane = addresses._lanes["ops"]
    with pytest.raises(addresses.Refused, match="non-public address"):
        await addresses.resolve("registry.ops.test", 80, {}, principal="ops")
    assert addresses._lanes["ops"] is ops_lane  # used again within LANE_IDLE_SEC: the same threads
    evil_lane = addresses._lanes["evil"]
    assert len(evil_lane.pool._threads) == addresses.RESOLVER_THREADS  # its own, no more
    silent.set()
    for task in hung:
        with pytest.raises(addresses.Refused, match="has no address"):
            await task  # (each returns no address once the server "answers")
    await wait_until(lambda: addresses._in_flight == 0, timeout=30)
    # Idle long enough (0 s here): the next lookup, of anyone, ends both lanes; ops gets a fresh one.
    monkeypatch.setattr(addresses, "LANE_IDLE_SEC", 0.0)
    with pytest.raises(addresses.Refused, match="non-public address"):
        await addresses.resolve("registry.ops.test", 80, {}, principal="ops")
    assert "evil" not in addresses._lanes and addresses._lanes["ops"] is not ops_lane
    assert evil_lane.pool._shutdown and ops_lane.pool._shutdown


async def test_a_lookup_whose_caller_gave_up_before_it_started_never_runs(
    silent: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy stops waiting after RESOLVE_TIMEOUT_SEC; the lookups still queued behind a lane's hung
    threads then end without calling the resolver, so they give their places back as soon as a thread
    takes them, instead of each hanging again. (The caller giving up is a cancel here, as the timeout's.)"""
    asked: list[str] = []
    hang = addresses.system_lookup

    def counting(name: str, port: int) -> list[tuple[Any, ...]]:
        asked.append(name)
        return hang(name, port)

    monkeypatch.setattr(addresses, "system_lookup", counting)
    running = [
        asyncio.ensure_future(addresses.resolve(f"r{i}.hang.test", 80, {}, principal="evil"))
        for i in range(addresses.RESOLVER_THREADS)
    ]
    await wait_until(lambda: len(asked) == addresses.RESOLVER_THREADS, timeout=30)
    queued = [
        asyncio.ensure_future(addresses.resolve(f"q{i}.hang.test", 80, {}, principal="evil"))
        for i in range(8)
    ]
    await wait_until(lambda: addresses.in_flight("evil") == addresses.RESOLVER_THREADS + 8, timeout=30)
    for task in queued:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    silent.set()
    await asyncio.gather(*running, return_exceptions=True)
    await wait_until(lambda: addresses.in_flight("evil") == 0, timeout=30)
    assert not any(name.startswith("q") for name in asked), asked  # none of the abandoned ones was asked
