"""`exechost mcp` driven by the MCP SDK's stdio client against a real gateway; CLI and MCP share sessions."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.helpers.gateway import ALLOWLIST, FULL, IN_CHECKOUT, REPO, cli, write_config


def server_params(state: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "runner", "mcp", *extra],
        env={
            "OPENCLAW_STATE_DIR": str(state),
            "PYTHONPATH": str(REPO),
            "HOME": os.environ["HOME"],
            # the suite's stand-in for the private /tmp (tests/conftest.py), for a gateway this server
            # starts: the checkout (its cwd) may be in the machine's /tmp
            # (a daemon takes the suite's hooks only under its marker: engine/protocol/daemonenv.py)
            # and the home its host views protect (this test's HOME, tests/conftest.py)
            **{k: v for k, v in os.environ.items() if k in ("EXECHOST_HOST_PRIVATE", "EXECHOST_TEST_RUN")},
            **{k: v for k, v in os.environ.items() if k == "EXECHOST_HOST_HOME"},
        },
        cwd=str(REPO),
    )


async def test_mcp_tools_exec_process_and_shared_sessions(state_dir: Path) -> None:
    write_config(state_dir, FULL + IN_CHECKOUT)
    try:
        async with (
            stdio_client(server_params(state_dir)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == {"exec", "process", "browser"}
            assert tools["exec"].input_schema["required"] == ["command"]
            assert tools["exec"].input_schema["properties"]["yieldMs"]["description"] == (
                "Milliseconds to wait before backgrounding (default 10000)"
            )
            assert tools["process"].input_schema["required"] == ["action"]

            done = await session.call_tool("exec", {"command": "echo from-mcp; pwd"})
            assert not done.is_error
            assert done.content[0].text == f"from-mcp\n{REPO}"
            assert done.structured_content["details"]["status"] == "completed"

            bg = await session.call_tool("exec", {"command": "echo mcp-bg", "background": True})
            sid = bg.structured_content["details"]["sessionId"]
            # The CLI (another client, default agent/session) sees the session the MCP client started...
            listed = json.loads(cli(state_dir, "process", "list", "--json").stdout)
            assert sid in [s["sessionId"] for s in listed["details"]["sessions"]]
            # ...and the MCP client sees the one the CLI starts.
            started = json.loads(cli(state_dir, "exec", "--json", "--background", "--", "sleep 30").stdout)
            mine = await session.call_tool("process", {"action": "list"})
            assert started["details"]["sessionId"] in mine.content[0].text
            killed = await session.call_tool(
                "process", {"action": "kill", "sessionId": started["details"]["sessionId"]}
            )
            assert "Termination requested" in killed.content[0].text or "Killed" in killed.content[0].text
            polled = await session.call_tool(
                "process", {"action": "poll", "sessionId": sid, "timeoutMs": 5000}
            )
            assert "mcp-bg" in polled.content[0].text

            refused = await session.call_tool("exec", {"command": "true", "env": {"LD_PRELOAD": "/x.so"}})
            assert refused.is_error and "LD_PRELOAD" in refused.content[0].text
            nothing = await session.call_tool("exec", {"command": ""})
            assert nothing.is_error and "command" in nothing.content[0].text  # refused by the schema
    finally:
        cli(state_dir, "gateway", "stop")


async def test_mcp_approval_pending_is_resolvable_from_the_cli(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    try:
        params = server_params(state_dir, "--session", "mcp-s")
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            pending = await session.call_tool("exec", {"command": "echo needs-ok"})
            details = pending.structured_content["details"]
            assert details["status"] == "approval-pending"
            assert f"Reply with: /approve {details['approvalSlug']} allow-once|allow-always|deny" in (
                pending.content[0].text
            )
            assert cli(state_dir, "approve", details["approvalSlug"], "deny").returncode == 0
        for _ in range(100):
            events = json.loads(cli(state_dir, "events", "--session", "mcp-s", "--json").stdout)
            if events["details"]["events"]:
                break
        assert events["details"]["events"][0]["text"] == (
            f"Exec denied (gateway id={details['approvalId']}, user-denied): echo needs-ok"
        )
    finally:
        cli(state_dir, "gateway", "stop")


async def test_mcp_contract_enums_types_annotations_and_errors(state_dir: Path) -> None:
    """Issue 10: closed enums, one time unit (ms), output schemas, annotations; bad input is an error."""
    import jsonschema

    from runner.mcp_schema import EXEC_SCHEMA, PROCESS_SCHEMA

    for schema in (EXEC_SCHEMA, PROCESS_SCHEMA):
        jsonschema.Draft202012Validator.check_schema(schema)
    write_config(state_dir, FULL + IN_CHECKOUT)
    try:
        async with (
            stdio_client(server_params(state_dir)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            props = tools["exec"].input_schema["properties"]
            assert props["security"]["enum"] == ["deny", "allowlist", "full"]
            assert props["ask"]["enum"] == ["off", "on-miss", "always"]
            assert "gateway" in props["host"]["enum"] and "reason" in props
            assert "kill" in tools["process"].input_schema["properties"]["action"]["enum"]
            times = [
                k for t in tools.values() for k in t.input_schema["properties"] if "timeout" in k.lower()
            ]
            assert all(k.endswith("Ms") for k in [*times, "yieldMs"])  # one unit, in the name
            assert tools["exec"].annotations.destructive_hint is True
            assert tools["exec"].output_schema["required"] == ["text", "details"]
            for bad in (
                {"command": "true", "background": "yes"},
                {"command": "true", "security": "FULL"},
                {"command": "true", "bogus": 1},
                {"command": ""},
            ):
                res = await session.call_tool("exec", bad)
                assert res.is_error and "invalid exec arguments" in res.content[0].text, bad
            res = await session.call_tool("process", {"action": "explode"})
            assert res.is_error
            failed = await session.call_tool("exec", {"command": "exit 3"})
            assert failed.structured_content["details"]["exitCode"] == 3
            timed = await session.call_tool("exec", {"command": "sleep 5", "timeoutMs": 300})
            assert timed.structured_content["details"]["status"] in ("failed", "completed")
            assert timed.is_error == (timed.structured_content["details"]["status"] == "failed")
    finally:
        cli(state_dir, "gateway", "stop")


async def test_mcp_progress_while_waiting_and_the_outcome_of_an_approval(state_dir: Path) -> None:
    """Progress notifications while the operator decides; `process approval` reports the decision,
    the operator's reason and the session the approved command ran as."""
    import asyncio

    from tests.helpers.gateway import connect, gateway

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        operator = await connect(state_dir, "console")
        await operator.request("approvals.attach")
        progress: list[str] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        async with (
            stdio_client(server_params(state_dir)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            call = asyncio.ensure_future(
                session.call_tool(
                    "exec",
                    {"command": "echo approved-via-mcp", "reason": "check the greeting"},
                    progress_callback=on_progress,
                )
            )
            for _ in range(200):
                if progress:
                    break
                await asyncio.sleep(0.05)
            assert progress and progress[0].startswith("waiting for the operator to approve ")
            (pending,) = await operator.pending_approvals()
            assert pending["agentReason"] == "check the greeting"
            await operator.request("approve", {"id": pending["id"], "decision": "allow-once"})
            done = await asyncio.wait_for(call, 30)
            assert not done.is_error and "approved-via-mcp" in done.content[0].text
            status = await session.call_tool("process", {"action": "approval", "approvalId": pending["slug"]})
            details = status.structured_content["details"]
            assert details["status"] == "approval-allow-once"
            assert details["run"]["status"] == "completed" and details["run"]["exitCode"] == 0
        await operator.close()
