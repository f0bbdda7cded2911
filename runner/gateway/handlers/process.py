"""`process`: the process tool (reference §2.1 params + sessionKey) in the caller's scope."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.principals import check_node_query
from engine.protocol.requests import ProcessRequest
from runner.gateway.handlers.common import agent_id, check_sandbox_tool, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: ProcessRequest) -> dict[str, Any]:
    agent, key = agent_id(conn, req.agent_id), session_key(conn, req.session_key)
    check_sandbox_tool(services, "process", agent, key)
    action = req.action.strip().lower()
    scope = key or f"agent:{agent}"
    tool_params = req.tool_params()
    if req.node:
        check_node_query(req.node)
    if (req.session_id or "").startswith("node:") or req.node:
        # A node's session: the node runs the action in the same scope (runner/gateway/nodes.py).
        return (await services.nodes.process(action, tool_params, scope)).to_dict()
    result = await services.sessions.process(action, tool_params, scope, operator=conn.operator)
    if action == "list":  # node sessions in this scope too, with their node
        result = await services.nodes.merged_list(result, tool_params, scope)
    return result.to_dict()
