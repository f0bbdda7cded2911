"""engine.sessions.hosts: a host keeps its reserve of open files however many spawns arrive at once, the next
host takes what the first has no room for, and with every host full the exec says why and what to do."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.sessions import LocalLauncher, RunSpec, SessionManager
from engine.sessions.host import HOLDERS_DIR
from engine.sessions.hostlink import FD_RESERVE
from engine.sessions.hosts import SessionHosts
from tests.helpers.gateway import wait_until

ROOM = 6  # sessions of 2 fds the first host has room for once its limit is lowered
LIMIT = FD_RESERVE + 2 * ROOM


async def _hosts(state_dir: Path, max_hosts: int) -> tuple[SessionManager, SessionHosts]:
    """Hosts whose first can hold ROOM pipe sessions: its limit lowered, then learnt at a new hello."""
    first = SessionHosts(state_dir / HOLDERS_DIR, fallback=LocalLauncher())
    link = await first.connect()
    assert link is not None, first.problem
    resource.prlimit(link.host_pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
    await first.close(bye=False)
    hosts = SessionHosts(state_dir / HOLDERS_DIR, fallback=LocalLauncher(), max_hosts=max_hosts)
    link = await hosts.connect()
    assert link is not None and link.fd_limit == LIMIT
    return SessionManager(state_dir, kill_grace_sec=1.0, launcher=hosts), hosts


@pytest.fixture
async def two(state_dir: Path) -> AsyncIterator[tuple[SessionManager, SessionHosts]]:
    manager, hosts = await _hosts(state_dir, 2)
    yield manager, hosts
    await manager.close()
    await hosts.close()


@pytest.fixture
async def one(state_dir: Path) -> AsyncIterator[tuple[SessionManager, SessionHosts]]:
    manager, hosts = await _hosts(state_dir, 1)
    yield manager, hosts
    await manager.close()
    await hosts.close()


def _spec() -> RunSpec:
    return RunSpec(command="exec sleep 3600", background=True, scope_key="s")


async def test_concurrent_spawns_never_overcommit_a_host(two: tuple[SessionManager, SessionHosts]) -> None:
    manager, hosts = two
    results = await asyncio.gather(*(manager.run(_spec()) for _ in range(3 * ROOM)))
    assert all(r.details["status"] == "running" for r in results), [r.text for r in results]
    first, second = hosts.hosts
    assert first.link is not None and second.link is not None
    assert len(first.link.chans) == ROOM and len(second.link.chans) == 2 * ROOM
    assert first.link.fds_used + FD_RESERVE <= LIMIT
    assert second.directory == hosts.directory / "h1" and second.link.host_pid != first.link.host_pid
    # The room comes back as sessions end: the next one goes to the first host again.
    sid = str(results[0].details["sessionId"])
    await manager.process("kill", {"sessionId": sid}, "s")
    await wait_until(lambda: len(first.link.chans) < ROOM, timeout=30)
    res = await manager.run(_spec())
    assert res.details["status"] == "running"
    assert len(first.link.chans) == ROOM


async def test_every_host_full_is_a_clear_failed_result(one: tuple[SessionManager, SessionHosts]) -> None:
    manager, hosts = one
    for _ in range(ROOM):
        assert (await manager.run(_spec())).details["status"] == "running"
    res = await manager.run(_spec())
    assert res.details["status"] == "failed"
    assert f"Too many open files: 1 session host(s), each limited to {LIMIT} open files" in res.text
    assert "process remove" in res.text and "Traceback" not in res.text
    assert len(hosts.hosts) == 1
