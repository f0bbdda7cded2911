"""What the handlers share: the caller's agent and session scope, which come from the connection
(engine/principals.py), never from a request, and the operator-role and sandbox-tool checks. The params
arrive typed (engine/protocol/requests.py): nothing here reads a raw field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine import principals
from engine.errors import InvalidInput
from engine.results import ToolError
from engine.sandbox.toolpolicy import tool_refusal
from engine.tools.exec import sandbox_available

if TYPE_CHECKING:
    from runner.gateway.services import Services


def session_key(conn: Any, raw: str | None) -> str:
    """The request's session key; for an agent's connection always inside its own namespace (a foreign
    or plain key is moved into it: principals.own_key), so another agent's scope cannot be named."""
    key = (raw or "").strip()[:256]
    if getattr(conn, "operator", False):
        return key
    return principals.own_key(conn.agent, key)


OPERATOR_ONLY = (
    "{what} needs the operator role: run it from the console or an operator's `exechost` command "
    "(agents, MCP and `exechost exec` connections never hold it)"
)


def require_operator(conn: Any, what: str) -> None:
    """Refuse a verb that can broaden what agents may run unless the connection proved the operator role."""
    if not getattr(conn, "operator", False):
        raise ToolError(OPERATOR_ONLY.format(what=what))


AGENT_ID = principals.NAME_RE


def agent_id(conn: Any, raw: str | None) -> str:
    """The agent a request acts for. An agent's connection acts for the agent the handshake proved, and a
    request naming another one is refused (never silently switched: the caller learns its mistake). The
    operator acts for whichever agent it names (default main). `*` and `../x` are never ids."""
    named = principals.check_agent(raw) if raw else None
    if getattr(conn, "operator", False):
        return named or principals.MAIN_AGENT
    if named is not None and named != conn.agent:
        raise InvalidInput(
            f"agentId {named!r} is not this connection's agent ({conn.agent!r}); an agent acts as itself, "
            "proven by its credential or Unix account (docs/SECURITY.md, Principals)"
        )
    return str(conn.agent)


def owned_session(services: Services, conn: Any, session_id: str) -> Any:
    """The session, when the caller may touch it; otherwise the exact error a nonexistent id gets."""
    session = services.sessions.get(session_id)
    if session is None or not conn.sees_scope(session.scope_key):  # the one visibility rule
        raise InvalidInput(f"No session found for {session_id}")
    return session


def check_sandbox_tool(services: Services, tool: str, agent: str, key: str) -> None:
    """Seed 004 §4.2: in a sandboxed session only the tools `tools.sandbox.tools` allows may be called."""
    config = services.config()
    if not sandbox_available(config, agent, key):
        return
    allow, deny = config.sandbox_tools_for(agent)
    refusal = tool_refusal(tool, allow, deny)
    if refusal is not None:
        raise ToolError(refusal)
