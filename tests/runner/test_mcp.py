"""`exechost mcp` driven by the MCP SDK's stdio client against a real gateway; CLI and MCP share sessions."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.helpers.gateway import ALLOWLIST, FULL, REPO, cli, write_config


def server_params(state: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "runner", "mcp", *extra],
        env={"OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO), "HOME": os.environ["HOME"]},
        cwd=str(REPO),
    )


async def test_mcp_tools_exec_process_and_shared_sessions(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    try:
        async with (
            stdio_client(server_params(state_dir)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == {"exec", "process"}
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
            polled = await session.call_tool("process", {"action": "poll", "sessionId": sid, "timeout": 5000})
            assert "mcp-bg" in polled.content[0].text

            refused = await session.call_tool("exec", {"command": "true", "env": {"LD_PRELOAD": "/x.so"}})
            assert refused.is_error and "LD_PRELOAD" in refused.content[0].text
            nothing = await session.call_tool("exec", {"command": ""})
            assert nothing.is_error and nothing.content[0].text == "Provide a command to start."
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
