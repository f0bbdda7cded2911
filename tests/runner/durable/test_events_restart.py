"""Issue 20: system events not yet drained survive a SIGKILLed gateway; drained ones are not sent twice."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, connect, wait_until, write_config


async def test_undelivered_events_survive_a_crash(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    with Daemon(state_dir) as daemon:
        agent = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir, "operator")
        res = await agent.request("exec", {"command": "echo spooled", "agentId": "main", "sessionKey": "k1"})
        await operator.request("approve", {"id": res["details"]["approvalSlug"], "decision": "deny"})

        async def denied() -> list:
            return (await agent.request("events", {"sessionKey": "k1"}))["events"]

        before = await wait_until(denied)
        assert "Exec denied" in before[0]["text"]
        await agent.close()
        await operator.close()
        daemon.restart()  # SIGKILL, then a new daemon
        agent = await connect(state_dir, "agent", operator=False)
        after = await agent.request("events", {"sessionKey": "k1", "drain": True})
        assert after["events"] == before
        await agent.close()
        daemon.restart()
        agent = await connect(state_dir, "agent", operator=False)
        assert (await agent.request("events", {"sessionKey": "k1"}))["events"] == []
        await agent.close()
