"""Issue 20: an MCP exec waiting for the operator when the gateway is SIGKILLed follows the kept ask on the
next gateway (started by the MCP server itself) and returns the run's result once it is approved."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from engine.protocol.frames import socket_path
from engine.unixsock import socket_is_live
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, cli, connect, wait_until, write_config
from tests.helpers.pending import stored_asks
from tests.runner.test_mcp import server_params


async def test_a_waiting_mcp_call_survives_a_gateway_crash(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    daemon = Daemon(state_dir).start()
    try:
        approver = await connect(state_dir, "console")
        await approver.request("approvals.attach")  # an approver: the call waits instead of returning
        params = server_params(state_dir)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            told = asyncio.Event()

            async def progress(done: float, total: float | None, message: str | None) -> None:
                told.set()  # the MCP server has the gateway's exec.waiting: it will follow, not ask again

            call = asyncio.ensure_future(
                session.call_tool("exec", {"command": "echo mcp-after-crash"}, progress_callback=progress)
            )

            async def asked() -> list:
                return (await approver.request("approvals.pending"))["approvals"]

            ask = (await wait_until(asked, timeout=30))[0]
            # A waiting call's ask outlives the gateway once it is on disk (the caller is told no sooner).
            await wait_until(lambda: any(a["id"] == ask["id"] for a in stored_asks(state_dir)), timeout=30)
            # Killed between its disk write and its exec.waiting, the gateway leaves a caller that never knew
            # it waited: that one asks again (and, with no approver on the next gateway, is told pending).
            await asyncio.wait_for(told.wait(), 30)
            daemon.kill()  # SIGKILL while the MCP call waits
            await approver.close()
            await wait_until(lambda: socket_is_live(socket_path(state_dir)), timeout=60)  # MCP restarted one
            await wait_until(lambda: ask["slug"] in cli(state_dir, "approvals", "pending").stdout, timeout=30)
            assert cli(state_dir, "approve", ask["slug"], "allow-once").returncode == 0
            result = await asyncio.wait_for(call, 120)
            assert not result.is_error, result
            assert "mcp-after-crash" in result.content[0].text
            assert result.structured_content["details"]["exitCode"] == 0
    finally:
        daemon.stop()
        cli(state_dir, "gateway", "stop")
