"""Issue 27 §2: there was no per-agent cap on sessions or on the bytes their output takes on disk, so one
agent could fill the disk (and the session table) that the operator and every other agent share. Each agent
now has a number of sessions and a budget of output bytes; past either, a clear error, and the others
still run."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import principals
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from engine.sessions.quota import Quota
from runner.gateway.server import GatewayServer
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config

MIB = 1 << 20


async def _agent(server: GatewayServer, state: Path, name: str) -> ControlClient:
    return await connect(state, name, operator=False, credential=principals.mint(state, name))


async def _start(client: ControlClient, command: str) -> dict:
    return await client.request("exec", {"command": command, "background": True})


async def test_one_agent_cannot_hold_every_session(state_dir: Path) -> None:
    write_config(state_dir, FULL + listed("greedy", "other"))
    async with gateway(state_dir) as server:
        server.services.sessions.quota = Quota(sessions=3, output_bytes=1 << 40)
        greedy = await _agent(server, state_dir, "greedy")
        started = [await _start(greedy, "sleep 60") for _ in range(3)]
        assert all(r["details"]["status"] == "running" for r in started)
        with pytest.raises(RemoteError, match="agent greedy has 3 sessions, the most one agent may keep"):
            await _start(greedy, "sleep 60")
        # The others are not affected: another agent, and the operator.
        other = await _agent(server, state_dir, "other")
        assert (await _start(other, "sleep 60"))["details"]["status"] == "running"
        operator = await connect(state_dir, "cli")
        assert (await _start(operator, "sleep 60"))["details"]["status"] == "running"
        for client in (greedy, other, operator):
            await client.close()
        for session in list(server.services.sessions.registry):
            server.services.sessions.request_kill(session)


async def test_one_agent_cannot_fill_the_disk_with_output(state_dir: Path) -> None:
    write_config(state_dir, FULL + listed("filler", "other"))
    async with gateway(state_dir) as server:
        server.services.sessions.quota = Quota(sessions=64, output_bytes=3 * MIB)
        filler = await _agent(server, state_dir, "filler")
        big = await _start(filler, "head -c 8388608 /dev/zero | tr '\\0' x; sleep 60")
        sid = big["details"]["sessionId"]
        session = server.services.sessions.get(sid)
        assert session is not None
        await wait_until(lambda: session.output.log_capped, timeout=30)
        logs = state_dir / "sessions"
        assert sum(p.stat().st_size for p in logs.iterdir()) <= 3 * MIB  # its budget, not 8 MiB
        # Its budget is spent (the running session holds it): the next one is refused, clearly.
        with pytest.raises(RemoteError, match="agent filler's sessions hold 3 MiB of output on disk"):
            await _start(filler, "echo more")
        other = await _agent(server, state_dir, "other")
        assert (await _start(other, "sleep 60"))["details"]["status"] == "running"
        for client in (filler, other):
            await client.close()
        for s in list(server.services.sessions.registry):
            server.services.sessions.request_kill(s)


async def test_the_caps_come_from_the_config_per_agent(state_dir: Path) -> None:
    config = (
        listed("other") + '[[agents.list]]\nid = "tight"\n[agents.list.tools.exec]\nmaxSessionsPerAgent = 1\n'
    )
    config = FULL + config
    write_config(state_dir, config)
    async with gateway(state_dir) as server:
        tight = await _agent(server, state_dir, "tight")
        other = await _agent(server, state_dir, "other")
        assert (await _start(tight, "sleep 60"))["details"]["status"] == "running"
        with pytest.raises(RemoteError, match="agent tight has 1 sessions"):
            await _start(tight, "sleep 60")
        for _ in range(2):  # the global default (64) for the others
            assert (await _start(other, "sleep 60"))["details"]["status"] == "running"
        write_config(state_dir, config.replace("= 1\n", "= 2\n"))  # an edit applies to the next start
        assert (await _start(tight, "sleep 60"))["details"]["status"] == "running"
        for client in (tight, other):
            await client.close()
        for s in list(server.services.sessions.registry):
            server.services.sessions.request_kill(s)
