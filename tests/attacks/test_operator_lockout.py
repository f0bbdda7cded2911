"""Issue 9 item 14: one agent locking the operator out with huge or countless asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.approvals.room import MAX_PENDING_PER_AGENT
from engine.errors import ExecHostError
from engine.protocol.frames import MAX_FRAME_BYTES
from engine.tools.exec import COMMAND_MAX_BYTES
from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import connect, gateway, write_config

AGENTS = ALLOWLIST + "".join(f'\n[[agents.list]]\nid = "a{i}"\n' for i in range(12))


async def as_agents(state: Path) -> dict[str, Any]:
    """One connection per configured agent, each with its own credential (the gateway takes the agent
    from the connection, never from a request's agentId)."""
    clients = {}
    for i in range(12):
        principals.mint(state, f"a{i}")
        clients[f"a{i}"] = await connect(state, f"a{i}", operator=False, agent=f"a{i}")
    return clients


async def all_pending(client: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await client.request("approvals.pending", {"cursor": cursor} if cursor else {})
        rows += page["approvals"]
        cursor = page.get("next")
        if not cursor:
            return rows


async def test_a_huge_command_is_refused_at_submission(state_dir: Path) -> None:
    """A 600 KB command made the pending list 2 MB, over the frame cap: the console looped "unreachable"."""
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        for params in (
            {"command": "echo " + "x" * 600_000},
            {"command": "echo " + "é" * (COMMAND_MAX_BYTES // 2)},  # counted in bytes, not characters
            {"command": "true", "env": {"X": "y" * 200_000}},
            {"command": "true", "workdir": "/" + "d" * 10_000},
        ):
            with pytest.raises(ExecHostError, match="limit"):
                await agent.request("exec", params)
        operator = await connect(state_dir, "console")
        assert await all_pending(operator) == []
        await agent.close()
        await operator.close()


async def test_asks_are_capped_per_agent_and_the_list_is_paged(state_dir: Path) -> None:
    """2,000 asks of 200 KB took the gateway from 28 MB to 1.1 GB; one agent must not crowd out others."""
    write_config(state_dir, AGENTS)
    big = COMMAND_MAX_BYTES - 100
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        accepted = 0
        with pytest.raises(ExecHostError, match="waiting for the operator"):
            for i in range(MAX_PENDING_PER_AGENT + 5):
                res = await agent.request("exec", {"command": f"echo {i} " + "x" * big, "agentId": "main"})
                assert res["details"]["status"] == "approval-pending"
                accepted += 1
        assert accepted == MAX_PENDING_PER_AGENT
        # Another agent still gets its asks through.
        principals.mint(state_dir, "a1")
        other = await connect(state_dir, "a1", operator=False, agent="a1")
        res = await other.request("exec", {"command": "rm -rf /tmp/nothing"})
        assert res["details"]["status"] == "approval-pending"
        await other.close()
        # The operator sees every one of them, in frames under the cap, oldest first.
        operator = await connect(state_dir, "console")
        rows = await all_pending(operator)
        assert len(rows) == MAX_PENDING_PER_AGENT + 1
        assert sum(len(r["command"]) for r in rows) > MAX_FRAME_BYTES  # paging was needed
        assert len({r["id"] for r in rows}) == len(rows)
        assert [r["createdAtMs"] for r in rows] == sorted(r["createdAtMs"] for r in rows)
        # ...and can still decide.
        res = await operator.request("approve", {"id": rows[-1]["id"], "decision": "deny"})
        assert res["details"]["decision"] == "deny"
        await agent.close()
        await operator.close()


async def test_the_total_cap_holds_across_agents(state_dir: Path) -> None:
    from engine.approvals.room import MAX_PENDING

    write_config(state_dir, AGENTS)
    async with gateway(state_dir) as server:
        server.services.approvals.max_total = 30  # the same rule as MAX_PENDING, at a test's scale
        assert MAX_PENDING >= 30
        agents = await as_agents(state_dir)
        accepted = 0
        with pytest.raises(ExecHostError, match="waiting for the operator"):
            for i in range(40):
                await agents[f"a{i % 12}"].request("exec", {"command": f"echo {i} && id"})
                accepted += 1
        assert accepted == 30
        for client in agents.values():
            await client.close()
