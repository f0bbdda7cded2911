"""The operator's own run on a node is filed there as here (`system.run` scopeKey): agent main's `process`
on that node never lists, reads or types into it; the operator reaches it by id and ends it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.principals import OPERATOR_SCOPE
from engine.protocol.frames import RemoteError
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sshd import SshdNode
from tests.runner.node.test_node_asks import setup

FULL_NODE = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'


def _ids(result: dict[str, Any]) -> set[str]:
    return {str(s["sessionId"]) for s in result["details"].get("sessions") or []}


async def test_the_operators_node_run_is_no_agents(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    setup(state_dir, sshd_nodes, FULL_NODE)
    (sshd_nodes[0].state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    async with gateway(state_dir):
        operator = await connect(state_dir, "op")
        agent = await connect(state_dir, "agent", operator=False)
        try:
            ran = await operator.request(
                "exec", {"command": "echo OP-NODE; sleep 30", "node": "alpha", "background": True}
            )
            sid = str(ran["details"]["sessionId"])
            assert sid.startswith("node:alpha:"), ran
            assert sid not in _ids(await agent.request("process", {"action": "list"}))
            seen = await agent.request("process", {"action": "log", "sessionId": sid})
            assert "OP-NODE" not in str(seen.get("text")), seen
            wrote = await agent.request("process", {"action": "write", "sessionId": sid, "data": "x\n"})
            assert wrote["details"].get("status") == "failed", wrote
            rows = {r["sessionId"]: r for r in await operator.list_sessions()}
            assert rows[sid]["scopeKey"] == OPERATOR_SCOPE, rows[sid]
            assert sid in _ids(await operator.request("process", {"action": "list"}))

            async def logged() -> bool:
                got = await operator.request("process", {"action": "log", "sessionId": sid})
                return "OP-NODE" in str(got.get("text"))

            await wait_until(logged)
            ended = await operator.request("process", {"action": "kill", "sessionId": sid})
            assert ended["details"].get("terminationRequested") is True, ended
        finally:
            await agent.close()
            await operator.close()


async def test_the_operators_node_ask_is_not_the_named_agents(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """The node relays an ask for the operator's run (its own policy asks); agent main, which the run named
    for policy, is never shown it by `approvals.status`."""
    setup(state_dir, sshd_nodes)  # the node asks on a miss
    async with gateway(state_dir):
        operator = await connect(state_dir, "op")
        agent = await connect(state_dir, "agent", operator=False)
        try:
            asked = await operator.request("exec", {"command": "echo OP-NODE-ASK", "node": "alpha"})
            assert asked["details"]["status"] == "approval-pending", asked
            approval = str(asked["details"]["approvalId"])
            got = await operator.request("approvals.status", {"approvalId": approval})
            assert got["details"]["approval"]["operator"] is True, got
            for wanted in (approval, approval[:8]):
                with pytest.raises(RemoteError, match="unknown or expired approval id"):
                    await agent.request("approvals.status", {"approvalId": wanted})
        finally:
            await agent.close()
            await operator.close()
