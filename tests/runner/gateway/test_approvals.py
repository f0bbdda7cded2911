"""The `approvals.*` verbs and approval events: coalescing and the gateway's own analysis."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine import principals
from engine.approvals.store import ApprovalsStore
from engine.errors import ExecHostError
from tests.helpers.gateway import ALLOWLIST, connect, gateway, listed, wait_until, write_config
from tests.helpers.peers import collect


async def test_coalesced_ask_broadcasts_approval_updated(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        watcher = await connect(state_dir, "watcher")
        agent = await connect(state_dir, "agent")
        seen = collect(watcher)
        await watcher.subscribe(["approvals"])
        params = {"command": "uname -s", "sessionKey": "k"}
        first = await agent.request("exec", params)
        second = await agent.request("exec", params)
        approval_id = first["details"]["approvalId"]
        assert second["details"]["approvalId"] == approval_id
        await wait_until(lambda: any(e.event == "approval.updated" for e in seen))
        updates = [e.data for e in seen if e.event == "approval.updated"]
        assert updates == [{"id": approval_id, "count": 2, "requesterGone": False}]
        assert [e.data["count"] for e in seen if e.event == "approval.requested"] == [1]
        pending = (await watcher.request("approvals.pending"))["approvals"]
        assert [(p["id"], p["count"]) for p in pending] == [(approval_id, 2)]
        await watcher.close()
        await agent.close()


async def test_approval_view_carries_the_exec_tools_own_analysis(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    ls, uname = shutil.which("ls"), shutil.which("uname")
    assert ls and uname
    ApprovalsStore().add_allowlist("main", os.path.realpath(ls))
    async with gateway(state_dir):
        watcher = await connect(state_dir, "watcher")
        seen = collect(watcher)
        await watcher.subscribe(["approvals"])
        command = "ls /tmp; uname -s"
        await watcher.request("exec", {"command": command, "sessionKey": "k"})
        await wait_until(lambda: any(e.event == "approval.requested" for e in seen))
        view = next(e.data for e in seen if e.event == "approval.requested")
        check = await watcher.request("policy.check", {"command": command, "sessionKey": "k"})
        hit, miss = view["segments"]
        assert hit["argv"] == ["ls", "/tmp"] and hit["satisfiedBy"] == "allowlist"
        assert hit["matchedPattern"] == os.path.realpath(ls) and hit["resolvedPath"] == os.path.realpath(ls)
        assert (
            miss["argv"] == ["uname", "-s"] and miss["satisfiedBy"] is None and miss["matchedPattern"] is None
        )
        assert miss["resolvedPath"] == os.path.realpath(uname)
        assert view["allowAlwaysPatterns"] == check["allowAlwaysPatterns"] and view["allowAlwaysPatterns"]
        assert os.path.realpath(uname) in view["allowAlwaysPatterns"]
        assert view["analysisOk"] is True and view["resolvedPath"] == os.path.realpath(ls)
        assert view["decision"]["trail"] == check["trail"]
        await watcher.close()


async def test_status_links_a_detached_run_to_its_approval(state_dir: Path) -> None:
    """Issue 10: an agent without a console learns what became of its ask, and of the run it started."""
    write_config(state_dir, ALLOWLIST + listed("ops"))
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        res = await agent.request("exec", {"command": "echo later; exit 4", "agentId": "main"})
        slug = res["details"]["approvalSlug"]
        first = await agent.request("approvals.status", {"approvalId": slug, "agentId": "main"})
        assert first["details"]["status"] == "approval-pending" and first["details"]["run"] is None
        principals.mint(state_dir, "ops")
        ops = await connect(state_dir, "ops", operator=False, agent="ops")
        with pytest.raises(ExecHostError, match="unknown or expired approval id"):
            await ops.request("approvals.status", {"approvalId": slug})  # another agent's ask
        await ops.close()
        with pytest.raises(ExecHostError, match="not this connection's agent"):
            await agent.request("approvals.status", {"approvalId": slug, "agentId": "ops"})
        operator = await connect(state_dir, "console")
        await operator.request("approve", {"id": slug, "decision": "allow-once"})

        async def ran() -> dict:
            out = await agent.request("approvals.status", {"approvalId": slug, "agentId": "main"})
            run = out["details"]["run"] or {}
            return out if run.get("exitCode") is not None else {}

        done = await wait_until(ran)
        assert done["details"]["status"] == "approval-allow-once"
        run = done["details"]["run"]
        if run["exitCode"] != 4:  # say what the run said (it failed once by chance on a loaded machine)
            log = await operator.request("process", {"action": "log", "sessionId": run["sessionId"]})
            raise AssertionError((run, log))
        assert run["sessionId"]
        assert f"Ran as session {done['details']['run']['sessionId']}" in done["text"]
        history = await operator.request("approvals.history")
        assert [h["slug"] for h in history["approvals"]] == [slug]
        with pytest.raises(ExecHostError, match="needs the operator role"):
            await agent.request("approvals.history")
        await agent.close()
        await operator.close()


async def test_agent_wide_overrides_cover_calls_without_a_session(state_dir: Path) -> None:
    """Issue 10: `/exec` on agent:main covers agent main's CLI/MCP calls and sessions without their own."""
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        operator = await connect(state_dir, "console")
        await operator.request(
            "policy.override", {"sessionKey": "agent:main", "directive": "/exec security=deny"}
        )
        for key in ("", "some-session"):
            res = await operator.request(
                "policy.check", {"command": "ls", "agentId": "main", "sessionKey": key}
            )
            assert res["security"] == "deny", key
        await operator.request("policy.override", {"sessionKey": "own", "directive": "/exec ask=always"})
        own = await operator.request(
            "policy.check", {"command": "ls", "agentId": "main", "sessionKey": "own"}
        )
        assert own["security"] == "deny" and own["ask"] == "always"  # its own on top of the agent's
        other = await operator.request("policy.check", {"command": "ls", "agentId": "ops", "sessionKey": ""})
        assert other["security"] != "deny"
        await operator.close()
