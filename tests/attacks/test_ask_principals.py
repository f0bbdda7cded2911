"""Whose an ask is, decided by construction: a relayed exec-approvals.sock ask is the principal its socket
token proved, and a relay that names no token is nobody's (refused), never the operator's own; a node's ask
counts in the share of the principal whose run it is (the operator's own run apart from agent main's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine import principals
from engine.approvals.socket.principal import socket_token_id
from engine.approvals.store import ApprovalsStore
from engine.protocol.frames import RemoteError
from tests.attacks.test_hostile_node import _setup
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.hostile_node import ask
from tests.helpers.sshd import SshdNode


async def test_a_relayed_socket_ask_naming_no_socket_token_is_refused_not_the_operators(
    state_dir: Path,
) -> None:
    """An ask relayed without `socketToken` was filed as agent main under the gateway token (the operator's
    own relay): replacing the socket token never settled it, and an allow-always saved for it. Only the
    console relays, and every ask its socket takes proved a token: one naming none is refused."""
    # A policy that asks (the default refuses host=gateway, and the relay answers such a principal deny
    # without filing anything: fresh round 18 b).
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n')
    async with gateway(state_dir) as server:
        manager = server.services.approvals
        console = await connect(state_dir, client="console")
        try:
            unnamed = asyncio.ensure_future(
                console.request("approvals.relay", {"id": "s1", "command": "true"})
            )
            await wait_until(lambda: unnamed.done() or manager.pending())
            assert unnamed.done() and not manager.pending(), [r.request.command for r in manager.pending()]
            with pytest.raises(RemoteError, match="socketToken"):
                unnamed.result()
            # The console's own relay, naming the token its socket's frame proved, is filed as before.
            _, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
            named = {"id": "s2", "command": "true", "socketToken": socket_token_id(token)}
            relayed = asyncio.ensure_future(console.request("approvals.relay", named))
            rows = await wait_until(lambda: manager.pending() or None)
            assert [r.request.agent_id for r in rows] == ["main"]
            await console.request("approve", {"id": rows[0].id, "decision": "deny"})
            assert (await asyncio.wait_for(relayed, 30))["decision"] == "deny"
        finally:
            await console.close()


async def test_the_operators_own_node_asks_leave_agent_main_its_share(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """A node's pending asks were capped per (node, agent), and the operator's own run is agent main's by
    name: the operator's asks filled main's share, and main's next ask on that node was refused (the
    node's askFallback). Each principal has its own share."""
    from runner.gateway.node_asks import MAX_PENDING_PER_NODE_AGENT

    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir) as server:
        manager = server.services.approvals
        operator = await connect(state_dir, "op")
        main = await connect(state_dir, "main", operator=False, credential=principals.mint(state_dir, "main"))
        calls, runs = [], []
        try:
            for i in range(2):
                params = {"command": "echo hi", "node": "alpha", "sessionKey": f"s{i}"}
                calls.append(asyncio.ensure_future(operator.request("exec", params)))
                runs.append(await hostile.next_run())
            frames = [
                ask(f"op{n}-{k}", run["params"]["runId"], command=f"echo op-{n}-{k}")
                for n, run in enumerate(runs)
                for k in range(MAX_PENDING_PER_NODE_AGENT // 2)
            ]
            await hostile.inject(*frames)
            await wait_until(lambda: len(manager.pending()) >= len(frames) or None, timeout=30)
            calls.append(
                asyncio.ensure_future(main.request("exec", {"command": "echo mine", "node": "alpha"}))
            )
            own = await hostile.next_run()
            await hostile.inject(ask("mine", own["params"]["runId"], command="echo mine"))
            theirs = await wait_until(
                lambda: (
                    [r.request.command for r in manager.pending() if r.request.command == "echo mine"]
                    or [a for a in hostile.answers() if a["id"] == "mine"]
                    or None
                ),
                timeout=30,
            )
            assert theirs == ["echo mine"], theirs  # pending, not refused (too-many-pending)
            for run in [*runs, own]:
                await hostile.answer(run)
            await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 60)
        finally:
            for client in (operator, main):
                await client.close()
