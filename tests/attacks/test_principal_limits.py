"""Issue 27 §2: every limit is per principal and counts bytes.

- One agent held all 256 connections: the operator's CLI and console and every other agent got `too many
  connections`. Connections are capped per agent (credential or Unix account), and the last slots are the
  operator's alone.
- 300 requests on a connection that never reads, each answered with a 786 KB `sessions.output` frame, raised
  the gateway's RSS by 234 MB (the send queue counted frames, not bytes). The bytes waiting for one client,
  responses included, are capped; past a lower mark the gateway stops reading from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine import principals
from runner.gateway import limits
from runner.gateway.connection import Connection
from runner.gateway.server import GatewayServer
from tests.attacks.rawclient import RawClient
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config

# 128 KiB of \x01: one sessions.output answer is ~786 KB of escaped JSON.
BULKY = "head -c 131072 /dev/zero | tr '\\0' '\\1'"


async def _bulky_session(server: GatewayServer, state: Path, credential: str) -> str:
    agent = await connect(state, "setup", operator=False, credential=credential)
    try:
        started = await agent.request("exec", {"command": BULKY, "background": True})
    finally:
        await agent.close()
    sid = str(started["details"]["sessionId"])
    await wait_until(lambda: getattr(server.services.sessions.get(sid), "exited", False), timeout=30)
    return sid


def _of(server: GatewayServer, agent: str) -> list[Connection]:
    return [c for c in server.connections if c.agent == agent and not c.operator]


async def test_one_agent_cannot_take_every_connection(state_dir: Path) -> None:
    write_config(state_dir, FULL + listed("hog", "other"))
    async with gateway(state_dir):
        hog = principals.mint(state_dir, "hog")
        principals.mint(state_dir, "other")
        held: list[RawClient] = []
        refused: dict[str, object] = {}
        try:
            for _ in range(300):  # more than the gateway's whole table
                client, first = await RawClient.open(state_dir, credential=hog)
                held.append(client)
                if first["type"] != "welcome":
                    refused = first
                    break
            assert refused.get("code") == "overload", refused
            assert "agent hog" in str(refused.get("message")), refused
            # Everyone else still gets in: the operator (CLI, console) and another agent.
            operator = await connect(state_dir, "cli")
            assert (await operator.request("status", {}))["pid"]
            other = await connect(state_dir, "other", operator=False, agent="other")
            assert other.agent == "other"
            await other.close()
            await operator.close()
        finally:
            for client in held:
                client.close()


async def test_the_operator_keeps_slots_no_agent_can_take(state_dir: Path) -> None:
    """Many agents together cannot take the operator's last slots either: enough agents to fill the
    agents' shared slots and then the newcomers' (NEWCOMER_FLOOR each), one more to try past them."""
    shared = limits.MAX_CONNECTIONS - limits.OPERATOR_SLOTS - limits.NEWCOMER_SLOTS
    agents = [
        f"a{n}"
        for n in range(
            -(-shared // limits.MAX_PER_AGENT) + limits.NEWCOMER_SLOTS // limits.NEWCOMER_FLOOR + 1
        )
    ]
    write_config(state_dir, FULL + listed(*agents))
    async with gateway(state_dir):
        held: list[RawClient] = []
        welcomed = 0
        try:
            for agent in agents:
                cred = principals.mint(state_dir, agent)
                for _ in range(limits.MAX_PER_AGENT):
                    client, first = await RawClient.open(state_dir, credential=cred)
                    held.append(client)
                    if first["type"] != "welcome":
                        break
                    welcomed += 1
            # the agents tried them all, and got every slot but the operator's
            assert welcomed == limits.MAX_CONNECTIONS - limits.OPERATOR_SLOTS
            operators = [await connect(state_dir, f"op{i}") for i in range(limits.OPERATOR_SLOTS)]
            for op in operators:
                await op.close()
        finally:
            for client in held:
                client.close()


async def test_bytes_waiting_for_a_client_that_never_reads_are_capped(state_dir: Path) -> None:
    write_config(state_dir, FULL + listed("hoarder"))
    async with gateway(state_dir) as server:
        cred = principals.mint(state_dir, "hoarder")
        sid = await _bulky_session(server, state_dir, cred)
        client, first = await RawClient.open(state_dir, credential=cred)
        assert first["type"] == "welcome"
        try:
            await client.burst("sessions.output", {"sessionId": sid, "offset": 0, "limit": 131072}, 300)
            # Cut off once what waits for it passes the byte cap (it never reads): the frames were too few
            # for the old frame-count cap (2,048), so it used to be kept, with 234 MB queued for it.
            await wait_until(lambda: not _of(server, "hoarder"), timeout=60)
        finally:
            client.close()


async def test_the_gateway_stops_reading_a_client_that_does_not_drain(state_dir: Path) -> None:
    write_config(state_dir, FULL + listed("slow"))
    async with gateway(state_dir) as server:
        cred = principals.mint(state_dir, "slow")
        sid = await _bulky_session(server, state_dir, cred)
        client, first = await RawClient.open(state_dir, credential=cred)
        assert first["type"] == "welcome"
        try:
            for _ in range(limits.READ_PAUSE_BYTES // 700_000 + 3):  # past the pause mark, under the cap
                await client.request("sessions.output", {"sessionId": sid, "offset": 0, "limit": 131072})
            await wait_until(lambda: any(c.reading_paused for c in _of(server, "slow")), timeout=30)
            await client.request("exec", {"command": "echo read-later", "ask": "always"})
            operator = await connect(state_dir, "cli")
            await operator.request("status", {})  # a turn of the gateway's loop, for what it would read
            assert not [r for r in server.services.approvals.pending() if "read-later" in r.request.command]
            # It reads what waits for it: the gateway reads it again, and its request is acted upon.
            client.reading(True)

            async def drain() -> None:
                while await client.reader.read(1 << 20):
                    pass

            drained = asyncio.ensure_future(drain())
            await wait_until(
                lambda: [r for r in server.services.approvals.pending() if "read-later" in r.request.command],
                timeout=30,
            )
            drained.cancel()
            await operator.close()
        finally:
            client.close()


async def test_connections_that_never_say_hello_are_capped_per_account(state_dir: Path) -> None:
    """Before the hello nothing is known but the peer's uid: one account's silent connections are capped
    (and each one ends at the handshake timeout)."""
    write_config(state_dir, FULL)
    async with gateway(state_dir, handshake_timeout=30):
        silent = [
            await asyncio.open_unix_connection(str(state_dir / "gateway.sock"))
            for _ in range(limits.MAX_HANDSHAKING_PER_UID)
        ]
        reader, writer = await asyncio.open_unix_connection(str(state_dir / "gateway.sock"))
        first = await asyncio.wait_for(reader.readline(), 30)
        assert b"still saying hello" in first and b"overload" in first, first
        for _, w in [*silent, (reader, writer)]:
            w.close()


async def test_hundreds_of_waiting_polls_are_all_read_and_leave_room(state_dir: Path) -> None:
    """Each request in flight is charged its task's cost too (limits.REQUEST_OVERHEAD_BYTES), which bounds
    an agent's waiting requests by memory; a legitimate burst is not held back by it: one agent's 1,000
    polls waiting at once on four connections are all read and run, its next request (the kill that ends
    them) is read at once, and every poll is answered."""
    write_config(state_dir, FULL)
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        pollers = [await connect(state_dir, f"poller{i}", operator=False) for i in range(4)]
        try:
            started = await agent.request("exec", {"command": "sleep 600", "background": True})
            sid = started["details"]["sessionId"]
            poll = {"action": "poll", "sessionId": sid, "timeout": 120_000}
            polls = [asyncio.ensure_future(c.request("process", poll)) for c in pollers for _ in range(250)]
            await wait_until(lambda: sum(len(c.tasks) for c in _of(server, "main")) >= 1000, timeout=60)
            assert not any(c.intake_full for c in _of(server, "main"))
            await agent.request("process", {"action": "kill", "sessionId": sid})
            answers = await asyncio.gather(*polls)
            assert all(a["details"]["status"] != "running" for a in answers), answers[0]
            await wait_until(lambda: not server._intake.by_agent)  # every request's charge is given back
        finally:
            for client in [agent, *pollers]:
                await client.close()
