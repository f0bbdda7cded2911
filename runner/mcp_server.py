"""`exechost mcp`: the exec, process and browser tools over MCP stdio, backed by the control socket."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from engine.protocol.client import ControlClient
from engine.protocol.frames import Event, GatewayUnavailable, RemoteError
from engine.protocol.methods import EventName, Method, RunStatus
from engine.protocol.requests import REQUESTS, BadParams, Message
from engine.protocol.resume import follow_approval
from runner.mcp_schema import SCHEMAS, TOOLS, invalid_arguments, to_gateway


class GatewayLink:
    """One kept control connection, reopened (and the gateway restarted) if it drops."""

    def __init__(self, *, agent: str | None = None, credential: str | None = None) -> None:
        # Who this server's agent is: its credential (or, on the agents' socket, its Unix account) says so
        # to the gateway; `agent` is what the operator configured, checked against what the gateway says.
        self.agent = agent
        self.credential = credential
        self._client: ControlClient | None = None
        self._lock = asyncio.Lock()
        self.waiting: dict[str, Callable[[dict[str, Any]], None]] = {}  # callId -> the call's progress

    async def client(self) -> ControlClient:
        async with self._lock:
            if self._client is None or self._client.closed:
                client = await ControlClient.connect(
                    client="mcp", name=f"mcp pid {os.getpid()}", agent=self.agent, credential=self.credential
                )
                if self.agent and client.agent != self.agent:
                    await client.close()
                    raise RemoteError(
                        "auth",
                        f"the gateway knows this connection as agent {client.agent!r}, not {self.agent!r}",
                    )
                self._client = client
                self._client.add_listener(self._on_event)
            return self._client

    def _on_event(self, event: Event) -> None:
        if event.event == EventName.EXEC_WAITING:
            callback = self.waiting.get(str(event.data.get("callId")))
            if callback is not None:
                callback(event.data)

    async def request(self, msg: Message, retry: Callable[[], bool] = lambda: True) -> dict[str, Any]:
        client = await self.client()
        try:
            return await client.request(msg)
        except ConnectionError:
            if not retry():
                raise
            client = await self.client()  # one retry on a fresh connection
            return await client.request(msg)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _result(text: str, details: dict[str, Any], error: bool = False) -> types.CallToolResult:
    content: list[Any] = [types.TextContent(text=text)]
    image = details.pop("image", None)
    if isinstance(image, str):  # a browser screenshot: an image block; not repeated in the details
        content.append(types.ImageContent(data=image, mime_type=str(details.get("mimeType", "image/png"))))
    return types.CallToolResult(
        content=content,
        structured_content={"text": text, "details": details},
        is_error=error,
    )


log = logging.getLogger("exechost.mcp")

FAILED = (RunStatus.FAILED, RunStatus.DENIED, RunStatus.APPROVAL_UNAVAILABLE)
PROGRESS_EVERY_SEC = 15.0


async def _while_waiting(ctx: Any, data: dict[str, Any]) -> None:
    """Progress notifications for a call that waits for the operator: at once, then every 15 s (clients
    that reset their timeout on progress keep waiting; the message says why the call is slow)."""
    slug = data.get("approvalSlug")
    while True:
        left = max(0, int(float(data.get("expiresAtMs") or 0) / 1000 - time.time()))
        message = f"waiting for the operator to approve {slug} (expires in {left // 60}:{left % 60:02d})"
        token = (ctx.meta or {}).get("progress_token") or (ctx.meta or {}).get("progressToken")
        if token is None:
            return  # the client asked for no progress
        try:
            await ctx.session.send_progress_notification(token, 0, None, message, ctx.request_id)
        except Exception:
            log.debug("progress notification failed", exc_info=True)
            return
        await asyncio.sleep(PROGRESS_EVERY_SEC)


def build_server(link: GatewayLink, *, session_key: str = "") -> Server[Any]:
    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in SCHEMAS:
            return _result(f"Unknown tool {params.name}", {"status": "failed"}, True)
        args = dict(params.arguments or {})
        problem = invalid_arguments(params.name, args)
        if problem is not None:
            return _result(problem, {"status": "failed", "error": "invalid_arguments"}, True)
        args = to_gateway(params.name, args)
        args.pop("agentId", None)  # the connection is the agent; a tool argument never names another
        args["sessionKey"] = session_key
        method = Method(params.name)
        if method == Method.PROCESS and args.get("action") == "approval":
            method = Method.APPROVALS_STATUS
        progress: asyncio.Task[None] | None = None
        seen: list[dict[str, Any]] = []  # exec.waiting: the call waits for a human on this ask
        call_id = uuid.uuid4().hex
        if method == Method.EXEC:
            args["defaultWorkdir"] = os.getcwd()
            args["callId"] = call_id
        try:
            msg = REQUESTS[method].decode(args)  # the request the gateway will decode, checked here first
        except BadParams as exc:
            return _result(str(exc), {"status": "failed", "error": "invalid_arguments"}, True)
        if method == Method.EXEC:

            def waiting(data: dict[str, Any]) -> None:
                nonlocal progress
                seen.append(data)
                if progress is None:
                    progress = asyncio.ensure_future(_while_waiting(ctx, data))

            link.waiting[call_id] = waiting
        try:
            try:
                result = await link.request(msg, retry=lambda: not seen)
            except ConnectionError:
                if not seen:
                    raise
                # The gateway went away mid-ask: the ask outlives it; follow it on the next gateway
                # rather than asking again.
                result = await follow_approval(link.client, seen[-1], "", owns_client=False)
        except RemoteError as exc:
            return _result(str(exc), {"status": "failed", "error": exc.code}, True)
        except (GatewayUnavailable, ConnectionError) as exc:
            return _result(f"gateway unavailable: {exc}", {"status": "failed", "error": "unavailable"}, True)
        finally:
            link.waiting.pop(call_id, None)
            if progress is not None:
                progress.cancel()
        details = dict(result.get("details") or {})
        return _result(str(result.get("text", "")), details, details.get("status") in FAILED)

    return Server("exechost", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(
    *, agent_id: str | None = None, session_key: str = "", credential: str | None = None
) -> None:
    link = GatewayLink(agent=agent_id, credential=credential)
    await link.client()  # fail fast (and start the gateway) before the first tool call
    server = build_server(link, session_key=session_key)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await link.close()


def run(agent_id: str | None = None, session_key: str = "", credential: str | None = None) -> None:
    anyio.run(lambda: serve_stdio(agent_id=agent_id, session_key=session_key, credential=credential))
