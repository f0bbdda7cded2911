"""`process`: the process tool (reference §2.1 params + sessionKey) in the caller's scope."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from engine import fairpool
from engine.principals import OPERATOR_SCOPE, check_node_query
from engine.protocol.requests import ProcessRequest
from engine.results import ToolError
from engine.sessions.actions import INPUT_ACTIONS
from engine.tools.decide import input_refused_now
from runner.gateway.handlers.common import agent_id, check_sandbox_tool, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: ProcessRequest) -> dict[str, Any]:
    agent, key = agent_id(conn, req.agent_id), session_key(conn, req.session_key)
    check_sandbox_tool(services, "process", agent, key)
    action = req.action.strip().lower()
    # The scope the verb acts in. An agent: its session key's, else its own. The operator sees every
    # scope: the one it names, else its own runs' on a node (where a verb needs one scope) and every
    # scope here (its own runs are filed under its own key, whatever agent they named: principals.
    # operator_key), so it reaches its runs and the agents' alike by id.
    scope = key or (OPERATOR_SCOPE if conn.operator else f"agent:{agent}")
    local: str | None = None if conn.operator and not key else scope
    tool_params = req.tool_params()
    if req.node:
        check_node_query(req.node)
    if action in INPUT_ACTIONS and not conn.operator:
        session = services.sessions.get(req.session_id or "", scope)
        unless_full = session.spec.input_refused_unless_full if session is not None else ""
        await _input_gate(services, conn, agent, key, unless_full)
    if (req.session_id or "").startswith("node:") or req.node:
        # A node's session: the node runs the action in the same scope (runner/gateway/nodes.py).
        return (await services.nodes.process(action, tool_params, scope)).to_dict()
    result = await services.sessions.process(action, tool_params, local, operator=conn.operator)
    if action == "list":  # node sessions in this scope too, with their node
        result = await services.nodes.merged_list(result, tool_params, scope)
    return result.to_dict()


async def _input_gate(services: Services, conn: Connection, agent: str, key: str, unless_full: str) -> None:
    """Every write the agent makes is gated on the policy in force now, not only on the one its session
    started under: an operator's lockdown reaches the shells it already runs (here and on a node), and a
    shell that `security=full` opened closes when the agent's policy leaves it (`unless_full`)."""
    gate = functools.partial(
        input_refused_now,
        config=services.config(),
        agent_id=agent,
        session_key=key,
        overrides=services.overrides,
        store=services.store,
        unless_full=unless_full,
    )
    refused = await fairpool.decisions.run(agent, gate, conn.fair_key)
    if refused:
        raise ToolError(f"The agent's input is refused: {refused}.")
