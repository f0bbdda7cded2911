"""Parameter helpers shared by the handlers: typed reads that fail with a clear message."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from engine.results import ToolError
from engine.sandbox.toolpolicy import tool_refusal
from engine.tools.exec import sandbox_available

if TYPE_CHECKING:
    from runner.gateway.services import Services


def opt_str(params: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = params.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string")
    return value


def req_str(params: dict[str, Any], key: str) -> str:
    value = opt_str(params, key)
    if value is None or not value.strip():
        raise InvalidInput(f"{key} is required")
    return value


def session_key(params: dict[str, Any]) -> str:
    return (opt_str(params, "sessionKey") or "").strip()[:256]


OPERATOR_ONLY = (
    "{what} needs the operator role: run it from the console or an operator's `exechost` command "
    "(agents, MCP and `exechost exec` connections never hold it)"
)


def require_operator(conn: Any, what: str) -> None:
    """Refuse a verb that can broaden what agents may run unless the connection proved the operator role."""
    if not getattr(conn, "operator", False):
        raise ToolError(OPERATOR_ONLY.format(what=what))


AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")


def agent_id(params: dict[str, Any]) -> str:
    """The calling agent; refused unless a plain id: `*` would address every agent's approvals."""
    raw = opt_str(params, "agentId")
    if raw is None or raw == "":
        return "main"
    if not AGENT_ID.fullmatch(raw):
        raise InvalidInput(f"invalid agent id {raw!r} (letters, digits and _ . : @ - only)")
    return raw


def check_sandbox_tool(services: Services, tool: str, params: dict[str, Any]) -> None:
    """Seed 004 §4.2: in a sandboxed session only the tools `tools.sandbox.tools` allows may be called."""
    config = services.config()
    agent = agent_id(params)
    if not sandbox_available(config, agent, session_key(params)):
        return
    allow, deny = config.sandbox_tools_for(agent)
    refusal = tool_refusal(tool, allow, deny)
    if refusal is not None:
        raise ToolError(refusal)
