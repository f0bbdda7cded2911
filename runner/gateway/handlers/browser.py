"""`browser` (the agent's tool) and `browser.start|stop|status|url|screenshot` (the operator's verbs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.results import ToolError
from runner.gateway.handlers.common import (
    agent_id,
    check_sandbox_tool,
    opt_str,
    require_operator,
    session_key,
)

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    check_sandbox_tool(services, "browser", params, conn)
    args = {k: v for k, v in params.items() if k not in ("agentId", "sessionKey")}
    result = await services.browsers.call(agent_id(params, conn), session_key(params, conn), args)
    return result.to_dict()


async def start(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    # Operator-only: with autoStart = false, starting a browser is the operator's decision.
    require_operator(conn, "browser.start")
    return await services.browsers.start(agent_id(params, conn), session_key(params, conn))


async def stop(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "browser.stop")
    name = opt_str(params, "containerName")
    return await services.browsers.stop(agent_id(params, conn), session_key(params, conn), name)


async def status(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    rows = await services.browsers.status()
    if not conn.operator:  # an agent sees its own browsers' pages, never another agent's
        rows = [r for r in rows if r.get("agentId") == agent_id(params, conn)]
    return {"browsers": rows}


async def url(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """The CDP and noVNC URLs carry the browser's token: the operator's only."""
    require_operator(conn, "browser.url")
    return await services.browsers.urls(agent_id(params, conn), session_key(params, conn))


async def screenshot(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "browser.screenshot")
    name = opt_str(params, "containerName")
    if not name:
        raise ToolError("browser.screenshot needs containerName")
    if params.get("fresh") is True:  # the operator's own look: a new screenshot of the page now
        await services.browsers.capture(name)
    return {"screenshot": services.browsers.screenshot(name)}
