"""The operator's own runs are the operator's (principals.operator_key): it lists, reads, types into and
ends them, and every agent's as before; no agent, agent main on the gateway token included, sees them, and
a restart that adopts them keeps them the operator's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.principals import OPERATOR_SCOPE, operator_key, owns_key
from engine.protocol.frames import RemoteError
from engine.sessions.adopt import _spec
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config


def _ids(result: dict[str, Any]) -> set[str]:
    return {str(s["sessionId"]) for s in result["details"].get("sessions") or []}


def test_an_operators_key_is_no_agents() -> None:
    for key in ("", "s1", "agent:main", "agent:main:s1", "agent:ops:x", "operator:agent:main"):
        filed = operator_key(key)
        assert not any(owns_key(agent, filed) for agent in ("main", "ops")), (key, filed)
        assert operator_key(filed) == filed  # idempotent: a restart re-filing it changes nothing
    assert operator_key("") == OPERATOR_SCOPE


def test_an_operators_session_kept_by_an_older_gateway_is_refiled_as_it_is_adopted() -> None:
    spec = _spec({"operator": True, "scopeKey": "agent:main", "sessionKey": "agent:main", "command": "sh"})
    assert spec.scope_key == "operator:agent:main" and spec.session_key is None
    agents = _spec({"scopeKey": "agent:main:s1", "sessionKey": "agent:main:s1", "command": "sh"})
    assert agents.scope_key == "agent:main:s1" and agents.session_key == "agent:main:s1"


async def test_the_operator_keeps_its_own_sessions_and_sees_every_agents(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir, "op")
        agent = await connect(state_dir, "agent", operator=False)
        try:
            shell = (await operator.request("exec", {"command": "sh", "background": True}))["details"]
            mine = str(shell["sessionId"])
            theirs = (await agent.request("exec", {"command": "sleep 30", "background": True}))["details"]
            main_sid = str(theirs["sessionId"])
            # The operator's list: its own run and the agent's; the agent's: its own only.
            assert {mine, main_sid} <= _ids(await operator.request("process", {"action": "list"}))
            assert _ids(await agent.request("process", {"action": "list"})) == {main_sid}
            rows = {r["sessionId"]: r for r in await operator.list_sessions()}
            assert rows[mine]["scopeKey"] == OPERATOR_SCOPE and rows[main_sid]["scopeKey"] == "agent:main"
            assert mine not in {r["sessionId"] for r in await agent.list_sessions()}
            # The operator types into its shell and reads what it printed, by id or by the row's scope
            # (the console's way); the agent can do neither.
            await operator.request(
                "process", {"action": "write", "sessionId": mine, "data": "echo OP-$((6*7))\n"}
            )

            async def printed() -> bool:
                got = await operator.request(
                    "process", {"action": "log", "sessionId": mine, "sessionKey": OPERATOR_SCOPE}
                )
                return "OP-42" in str(got.get("text"))

            await wait_until(printed)
            seen = await agent.request("process", {"action": "log", "sessionId": mine})
            assert "OP-42" not in str(seen.get("text")) and "No session found" in str(seen.get("text"))
            wrote = await agent.request("process", {"action": "write", "sessionId": mine, "data": "id\n"})
            assert wrote["details"].get("status") == "failed", wrote
            try:
                await agent.request("sessions.output", {"sessionId": mine})
                raise AssertionError("the agent read the operator's raw output")
            except RemoteError as exc:
                assert "No session found" in str(exc)
            # The operator reads and ends the agent's session too, and ends its own.
            got = await operator.request("process", {"action": "poll", "sessionId": main_sid})
            assert got["details"].get("status") == "running", got
            for sid in (main_sid, mine):
                ended = await operator.request("process", {"action": "kill", "sessionId": sid})
                assert ended["details"].get("terminationRequested") is True, ended
            # The run's exit notice is the operator's, never the agent's queue.
            done = await operator.request("exec", {"command": "echo OP-NOTICE; exit 3", "background": True})

            async def told() -> list[Any]:
                got = await operator.request("events", {"sessionKey": OPERATOR_SCOPE})
                return [e for e in got["events"] if str(done["details"]["sessionId"]) in e["text"]]

            await wait_until(told)
            events = (await agent.request("events", {}))["events"]
            assert not [e for e in events if "OP-NOTICE" in e["text"] or mine in e["text"]], events
        finally:
            await agent.close()
            await operator.close()


async def test_a_restart_keeps_the_operators_session_the_operators(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, FULL)
    work = tmp_path / "w"
    work.mkdir()
    with Daemon(state_dir) as daemon:
        operator = await connect(state_dir, "op")
        try:
            ran = await operator.request(
                "exec",
                {
                    "command": "echo OP-KEPT; while [ ! -e go ]; do sleep 0.02; done",
                    "background": True,
                    "workdir": str(work),
                },
            )
        finally:
            await operator.close()
        sid = str(ran["details"]["sessionId"])
        daemon.kill()  # SIGKILL: the session host keeps it; the next gateway adopts it
        daemon.start()
        operator = await connect(state_dir, "op")
        agent = await connect(state_dir, "agent", operator=False)
        try:
            rows = {r["sessionId"]: r for r in await operator.list_sessions()}
            assert rows[sid]["scopeKey"] == OPERATOR_SCOPE and rows[sid]["status"] == "running", rows
            assert sid not in _ids(await agent.request("process", {"action": "list"}))
            seen = await agent.request("process", {"action": "log", "sessionId": sid})
            assert "OP-KEPT" not in str(seen.get("text")), seen

            async def logged() -> bool:
                got = await operator.request("process", {"action": "log", "sessionId": sid})
                return "OP-KEPT" in str(got.get("text"))

            await wait_until(logged)
            ended = await operator.request("process", {"action": "kill", "sessionId": sid})
            assert ended["details"].get("terminationRequested") is True, ended
        finally:
            await agent.close()
            await operator.close()


ASKING = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "always"\naskFallback = "deny"\n'


async def test_the_operators_ask_is_not_the_named_agents(state_dir: Path) -> None:
    """The operator's ask names main for policy; main's `approvals.status` never resolves it, by id or by
    prefix, while the operator's does."""
    write_config(state_dir, ASKING)
    async with gateway(state_dir):
        operator = await connect(state_dir, "op")
        agent = await connect(state_dir, "agent", operator=False)
        try:
            asked = await operator.request("exec", {"command": "echo OP-ASK"})
            assert asked["details"]["status"] == "approval-pending", asked
            approval = str(asked["details"]["approvalId"])
            got = await operator.request("approvals.status", {"approvalId": approval})
            assert got["details"]["approval"]["operator"] is True, got
            for wanted in (approval, approval[:8], approval[:2]):
                try:
                    await agent.request("approvals.status", {"approvalId": wanted})
                    raise AssertionError(f"agent main was shown the operator's ask by {wanted!r}")
                except RemoteError as exc:
                    assert "unknown or expired approval id" in str(exc)
        finally:
            await agent.close()
            await operator.close()
