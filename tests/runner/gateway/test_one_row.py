"""Issue 21 "one row per question": the same ask from several sessions waits as one record, one decision
answers every requester (each runs once), and the history names each requester."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config


async def test_same_question_from_three_sessions_is_one_row_answered_once(
    state_dir: Path, tmp_path: Path
) -> None:
    write_config(state_dir, ALLOWLIST)
    log = tmp_path / "ran.log"
    command = f"echo ran >> {log}"
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)

        def ask(session: str, cmd: str = command) -> asyncio.Future[dict[str, Any]]:
            params = {"command": cmd, "agentId": "main", "sessionKey": session}
            return asyncio.ensure_future(agent.request("exec", params))

        calls = [ask("agent:main:one"), ask("agent:main:two"), ask("agent:main:three")]
        other = ask("agent:main:one", f"echo other >> {log}")  # a different question: its own row
        await wait_until(lambda: len(server.services.approvals.pending()) == 2)
        # (the other question may be registered first: its row is not the coalesced one)
        await wait_until(lambda: any(r.count == 3 for r in server.services.approvals.pending()))
        page = await operator.request("approvals.pending")
        row = next(v for v in page["approvals"] if v["command"] == command)
        assert row["count"] == 3
        # the three requests are decided concurrently, so arrival order is not theirs to promise
        assert sorted(r["sessionKey"] for r in row["requesters"]) == [
            "agent:main:one",
            "agent:main:three",
            "agent:main:two",
        ]
        await operator.request("approve", {"id": row["slug"], "decision": "allow-once"})
        results = await asyncio.wait_for(asyncio.gather(*calls), 20)
        assert [r["details"]["status"] for r in results] == ["completed"] * 3
        assert log.read_text().splitlines() == ["ran"] * 3  # one decision, each requester ran once
        assert len(server.services.approvals.pending()) == 1  # the other question still waits
        await operator.request(
            "approve", {"id": server.services.approvals.pending()[0].id, "decision": "deny"}
        )
        assert (await asyncio.wait_for(other, 10))["details"]["status"] == "denied"
        history = (await operator.request("approvals.history"))["approvals"]
        decided = next(h for h in history if h["command"] == command)
        assert decided["status"] == "allow-once" and len(decided["requesters"]) == 3
        await agent.close()
        await operator.close()


async def test_a_repeat_from_the_same_session_does_not_run_twice(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    log = tmp_path / "ran.log"
    command = f"echo ran >> {log}"
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        params = {"command": command, "agentId": "main", "sessionKey": "agent:main:one"}
        first = await agent.request("exec", params)
        again = await agent.request("exec", params)  # no approver: two-phase, a pending result each
        assert first["details"]["approvalId"] == again["details"]["approvalId"]
        operator = await connect(state_dir, "op")
        await operator.request("approve", {"id": first["details"]["approvalId"], "decision": "allow-once"})
        await wait_until(lambda: log.exists() and log.read_text())
        # Every detached run (a wrong second one included) has finished once the tool holds none.
        await wait_until(lambda: not server.services.exec_tool._background)
        assert log.read_text().splitlines() == ["ran"]
        await agent.close()
        await operator.close()


async def test_cli_pending_and_history_name_every_requester(state_dir: Path, tmp_path: Path) -> None:
    from tests.helpers.gateway import cli

    write_config(state_dir, ALLOWLIST)
    command = f"echo ran >> {tmp_path / 'log'}"
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        for session in ("agent:main:one", "agent:main:two"):
            await agent.request("exec", {"command": command, "agentId": "main", "sessionKey": session})
        pending = await asyncio.to_thread(cli, state_dir, "approvals", "pending")
        assert pending.returncode == 0 and "x2: agent:main:one, agent:main:two" in pending.stdout
        slug = pending.stdout.split()[0]
        done = await asyncio.to_thread(cli, state_dir, "approve", slug, "deny")
        assert done.returncode == 0, done.stderr
        history = await asyncio.to_thread(cli, state_dir, "approvals", "history")
        assert "asked by agent:main:one" in history.stdout and "asked by agent:main:two" in history.stdout
        await agent.close()
