"""`exechost mcp`: the `exec` and `process` tools over MCP stdio, backed by the gateway's control socket."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from engine.protocol.client import ControlClient
from engine.protocol.frames import GatewayUnavailable, RemoteError

EXEC_DESCRIPTION = (
    "Execute shell commands with background continuation. Use yieldMs/background to continue later via the "
    "process tool. Use pty=true for TTY-required commands (terminal UIs, coding agents)."
)
PROCESS_DESCRIPTION = (
    "Manage running exec sessions: list, poll, log, write, send-keys, submit, paste, kill, clear, remove."
)

EXEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "Shell command to execute"},
        "workdir": {"type": "string", "description": "Working directory (defaults to cwd)"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "yieldMs": {
            "type": "number",
            "description": "Milliseconds to wait before backgrounding (default 10000)",
        },
        "background": {"type": "boolean", "description": "Run in background immediately"},
        "timeout": {
            "type": "number",
            "description": "Timeout in seconds (optional, kills process on expiry)",
        },
        "pty": {
            "type": "boolean",
            "description": "Run in a pseudo-terminal (PTY) when available (TTY-required CLIs, coding agents)",
        },
        "elevated": {
            "type": "boolean",
            "description": "Run on the host with elevated permissions (if allowed)",
        },
        "host": {"type": "string", "description": "Exec host/target (auto|sandbox|gateway|node)."},
        "security": {"type": "string", "description": "Exec security mode (deny|allowlist|full)."},
        "ask": {"type": "string", "description": "Exec ask mode (off|on-miss|always)."},
        "node": {"type": "string", "description": "Node id/name for host=node."},
    },
    "required": ["command"],
}

PROCESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "description": "Process action"},
        "sessionId": {"type": "string", "description": "Session id for actions other than list"},
        "data": {"type": "string", "description": "Data to write for write"},
        "keys": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Key tokens to send for send-keys",
        },
        "hex": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Hex bytes to send for send-keys",
        },
        "literal": {"type": "string", "description": "Literal string for send-keys"},
        "text": {"type": "string", "description": "Text to paste for paste"},
        "bracketed": {"type": "boolean", "description": "Wrap paste in bracketed mode"},
        "eof": {"type": "boolean", "description": "Close stdin after write"},
        "offset": {"type": "number", "description": "Log offset"},
        "limit": {"type": "number", "description": "Log length"},
        "timeout": {
            "type": "number",
            "minimum": 0,
            "description": "For poll: wait up to this many milliseconds before returning",
        },
    },
    "required": ["action"],
}

TOOLS = [
    types.Tool(name="exec", description=EXEC_DESCRIPTION, input_schema=EXEC_SCHEMA),
    types.Tool(name="process", description=PROCESS_DESCRIPTION, input_schema=PROCESS_SCHEMA),
]


class GatewayLink:
    """One kept control connection, reopened (and the gateway restarted) if it drops."""

    def __init__(self) -> None:
        self._client: ControlClient | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> ControlClient:
        async with self._lock:
            if self._client is None or self._client.closed:
                self._client = await ControlClient.connect(client="mcp", name=f"mcp pid {os.getpid()}")
            return self._client

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        client = await self.client()
        try:
            return await client.request(method, params)
        except ConnectionError:
            client = await self.client()  # one retry on a fresh connection
            return await client.request(method, params)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _result(text: str, details: dict[str, Any], error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"text": text, "details": details},
        is_error=error,
    )


def build_server(link: GatewayLink, *, agent_id: str = "main", session_key: str = "") -> Server[Any]:
    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = dict(params.arguments or {})
        if params.name not in ("exec", "process"):
            return _result(f"Unknown tool {params.name}", {"status": "failed"}, True)
        args["agentId"] = agent_id
        args["sessionKey"] = session_key
        if params.name == "exec":
            args["defaultWorkdir"] = os.getcwd()
        try:
            result = await link.request(params.name, args)
        except RemoteError as exc:
            return _result(str(exc), {"status": "failed", "error": exc.code}, True)
        except (GatewayUnavailable, ConnectionError) as exc:
            return _result(f"gateway unavailable: {exc}", {"status": "failed", "error": "unavailable"}, True)
        return _result(str(result.get("text", "")), dict(result.get("details") or {}))

    return Server("exechost", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(*, agent_id: str = "main", session_key: str = "") -> None:
    link = GatewayLink()
    await link.client()  # fail fast (and start the gateway) before the first tool call
    server = build_server(link, agent_id=agent_id, session_key=session_key)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await link.close()


def run(agent_id: str = "main", session_key: str = "") -> None:
    anyio.run(lambda: serve_stdio(agent_id=agent_id, session_key=session_key))
