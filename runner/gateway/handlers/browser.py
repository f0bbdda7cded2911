"""`browser` (the agent's tool) and `browser.start|stop|status|url|screenshot` (the operator's verbs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.principals import owns_key
from engine.protocol.requests import (
    BrowserCall,
    BrowserScreenshot,
    BrowserStart,
    BrowserStatus,
    BrowserStop,
    BrowserUrl,
)
from runner.gateway.handlers.common import agent_id, check_sandbox_tool, require_operator, session_key

# The shared scope's browser (settings.scope_key on a gateway): every agent's, listed to the one it names.
SHARED_BROWSER_SCOPE = "shared"

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: BrowserCall) -> dict[str, Any]:
    agent, key = agent_id(conn, req.agent_id), session_key(conn, req.session_key)
    check_sandbox_tool(services, "browser", agent, key)
    # The operator's call uses the operator's own browser, never the named agent's (docs/SECURITY.md,
    # Principals): the agent's profile, tabs and cookies would keep what the operator browsed, and act on it.
    result = await services.browsers.call(agent, key, dict(req.args), operator=conn.operator)
    return result.to_dict()


async def start(services: Services, conn: Connection, req: BrowserStart) -> dict[str, Any]:
    # Operator-only: with autoStart = false, starting a browser is the operator's decision.
    require_operator(conn, "browser.start")
    return await services.browsers.start(agent_id(conn, req.agent_id), session_key(conn, req.session_key))


async def stop(services: Services, conn: Connection, req: BrowserStop) -> dict[str, Any]:
    require_operator(conn, "browser.stop")
    agent, key = agent_id(conn, req.agent_id), session_key(conn, req.session_key)
    return await services.browsers.stop(agent, key, req.container_name)


async def status(services: Services, conn: Connection, req: BrowserStatus) -> dict[str, Any]:
    rows = await services.browsers.status()
    if not conn.operator:  # an agent sees its own browsers' pages, never another agent's nor the operator's
        rows = [r for r in rows if _its_own(agent_id(conn, req.agent_id), r)]
    return {"browsers": rows}


def _its_own(agent: str, row: dict[str, Any]) -> bool:
    """A browser an agent may list: started for it, in a scope of its own or the shared one (never the
    operator's own browser named for it, `operator:…`, which no agent's key is)."""
    key = str(row.get("sessionKey") or "")
    return row.get("agentId") == agent and (owns_key(agent, key) or key == SHARED_BROWSER_SCOPE)


async def url(services: Services, conn: Connection, req: BrowserUrl) -> dict[str, Any]:
    """The CDP and noVNC URLs carry the browser's token: the operator's only."""
    require_operator(conn, "browser.url")
    return await services.browsers.urls(agent_id(conn, req.agent_id), session_key(conn, req.session_key))


async def screenshot(services: Services, conn: Connection, req: BrowserScreenshot) -> dict[str, Any]:
    require_operator(conn, "browser.screenshot")
    name = req.container_name
    if req.fresh:  # the operator's own look: a new screenshot of the page now
        await services.browsers.capture(name)
    return {"screenshot": services.browsers.screenshot(name)}
