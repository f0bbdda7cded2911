"""`process`: the process tool (reference §2.1 params + sessionKey) in the caller's scope."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.principals import check_node_query
from runner.gateway.handlers.common import agent_id, check_sandbox_tool, req_str, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    check_sandbox_tool(services, "process", params, conn)
    action = req_str(params, "action").strip().lower()
    scope = session_key(params, conn) or f"agent:{agent_id(params, conn)}"
    tool_params = {k: v for k, v in params.items() if k not in ("action", "sessionKey", "agentId")}
    if tool_params.get("node") not in (None, ""):
        check_node_query(tool_params.get("node"))
    sid = tool_params.get("sessionId")
    if (isinstance(sid, str) and sid.startswith("node:")) or tool_params.get("node"):
        # A node's session: the node runs the action in the same scope (runner/gateway/nodes.py).
        return (await services.nodes.process(action, tool_params, scope)).to_dict()
    result = await services.sessions.process(action, tool_params, scope)
    if action == "list":  # node sessions in this scope too, with their node
        result = await services.nodes.merged_list(result, tool_params, scope)
    return result.to_dict()
