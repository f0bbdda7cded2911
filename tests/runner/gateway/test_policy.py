"""`policy.agents` and `approvals.allowlist.add|remove`: the console's Policy pane, served by the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.errors import ExecHostError
from tests.helpers.gateway import ALLOWLIST, connect, gateway, write_config


async def test_policy_agents_reports_what_the_gateway_enforces(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST + '\n[[agents.list]]\nid = "ops"\ntools.exec.ask = "always"\n')
    async with gateway(state_dir):
        operator = await connect(state_dir)
        await operator.request(
            "policy.override", {"sessionKey": "agent:main", "directive": "/exec ask=always"}
        )
        added = await operator.request("approvals.allowlist.add", {"agentId": "ops", "pattern": "ls"})
        assert added["pattern"].endswith("/ls") and "/" in added["pattern"]  # a bare name is resolved
        rows = {r["agentId"]: r for r in (await operator.request("policy.agents"))["agents"]}
        assert rows["ops"]["policy"]["ask"] == "always"
        assert rows["main"]["policy"]["ask"] == "always" and rows["main"]["overrides"]["agent:main"]["ask"]
        assert [e["pattern"] for e in rows["ops"]["allowlist"]] == [added["pattern"]]
        assert any(step["key"].endswith("ask") for step in rows["ops"]["trail"])
        removed = await operator.request(
            "approvals.allowlist.remove", {"agentId": "ops", "pattern": added["pattern"]}
        )
        assert removed["removed"] is True
        assert ApprovalsStore(state_dir / "exec-approvals.json").entries("ops") == []
        await operator.close()


async def test_agents_cannot_read_or_edit_the_allowlist(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        for method, params in (
            ("policy.agents", {}),
            ("approvals.allowlist.add", {"agentId": "main", "pattern": "/usr/bin/id"}),
            ("approvals.allowlist.remove", {"agentId": "main", "pattern": "/usr/bin/id"}),
        ):
            with pytest.raises(ExecHostError, match="needs the operator role"):
                await agent.request(method, params)
        await agent.close()
    assert (
        not (state_dir / "exec-approvals.json").exists()
        or ApprovalsStore(state_dir / "exec-approvals.json").entries("main") == []
    )
