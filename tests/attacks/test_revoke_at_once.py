"""Issue 27 §1: a revoked agent kept acting. `agents revoke` closed the agent's live connections one after
another, waiting up to 2 s on each for a client that never reads: 8 such connections kept creating asks
for the whole 15 s after the revoke began. Revocation must stop reading every connection of that agent
at once, then flush them together; nothing the agent sends after the revoke is acted upon."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import pytest

from engine import principals
from engine.errors import ExecHostError
from runner.gateway.server import GatewayServer
from tests.attacks.rawclient import RawClient
from tests.helpers.gateway import FULL, cli, connect, gateway, listed, wait_until, write_config

CONNECTIONS = 8
# 128 KiB of \x01: one sessions.output answer is ~786 KB of escaped JSON, so a few back a connection up.
BULKY = "head -c 131072 /dev/zero | tr '\\0' '\\1'"


def _backed_up(server: GatewayServer, agent: str) -> bool:
    conns = [c for c in server.connections if c.agent == agent]
    return len(conns) == CONNECTIONS and all(c.writer.transport.get_write_buffer_size() > 0 for c in conns)


async def test_revoke_stops_every_connection_at_once(state_dir: Path) -> None:
    write_config(state_dir, FULL + listed("ops"))
    async with gateway(state_dir) as server:
        credential = principals.mint(state_dir, "ops")
        ops = await connect(state_dir, "ops", operator=False, credential=credential)
        started = await ops.request("exec", {"command": BULKY, "background": True})
        sid = started["details"]["sessionId"]
        await wait_until(lambda: getattr(server.services.sessions.get(sid), "exited", False), timeout=30)
        await ops.close()
        clients = []
        for _ in range(CONNECTIONS):
            client, welcome = await RawClient.open(state_dir, credential=credential)
            assert welcome["agent"] == "ops"
            clients.append(client)
            for _ in range(4):  # never read: the answers back up (4 each: 8 × 4 stay under the agent budget)
                await client.request("sessions.output", {"sessionId": sid, "offset": 0, "limit": 131072})
        await wait_until(lambda: _backed_up(server, "ops"), timeout=30)

        revoking = asyncio.ensure_future(asyncio.to_thread(cli, state_dir, "agents", "revoke", "ops"))
        await wait_until(lambda: principals.read_token(state_dir, "ops") is None, timeout=30)
        for i, client in enumerate(clients):  # after the revoke: none of this may be acted upon
            with contextlib.suppress(ConnectionError, OSError):
                await client.request("exec", {"command": f"echo after-revoke-{i}", "ask": "always"})
        assert (await revoking).returncode == 0
        late = [r for r in server.services.approvals.pending() if "after-revoke" in r.request.command]
        assert late == []
        assert [c for c in server.connections if c.agent == "ops"] == []
        for client in clients:
            client.close()


async def test_a_connection_made_while_the_revoke_runs_is_refused(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The credential file is removed in a thread; a handshake looking it up meanwhile still found it, and
    its connection would have outlived the revoke."""
    write_config(state_dir, FULL + listed("ops"))
    async with gateway(state_dir) as server:
        credential = principals.mint(state_dir, "ops")
        entered, gate = threading.Event(), threading.Event()
        real = principals.revoke

        def slow_revoke(state: Path, agent: str) -> bool:
            entered.set()
            gate.wait(30)
            return real(state, agent)

        monkeypatch.setattr(principals, "revoke", slow_revoke)
        revoking = asyncio.ensure_future(server.revoke_agent("ops"))
        await wait_until(entered.is_set)
        try:
            with pytest.raises(ExecHostError, match="invalid or revoked agent credential"):
                await connect(state_dir, "ops", operator=False, credential=credential)
        finally:
            gate.set()
        assert (await revoking) == (True, 0)
        assert [c for c in server.connections if c.agent == "ops"] == []
