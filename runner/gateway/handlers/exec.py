"""`exec`: the exec tool (reference §1.2 params + agentId, sessionKey) → ToolResult dict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.principals import check_node_query
from engine.protocol.frames import Event
from engine.protocol.methods import EventName
from engine.tools.exec import ExecContext
from runner.gateway.handlers.common import agent_id, check_sandbox_tool, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    check_sandbox_tool(services, "exec", params, conn)
    if params.get("node") not in (None, ""):
        check_node_query(params.get("node"))  # `../n1` would normalise to `n1` and pick that node
    call_id = params.get("callId")

    waited: list[str] = []

    def waiting(data: dict[str, Any]) -> None:
        extra = {"callId": call_id} if isinstance(call_id, str | int) else {}
        conn.send(Event(event=EventName.EXEC_WAITING, data={**data, **extra}))
        waited.append(str(data["approvalId"]))
        conn.waiting_approvals.add(waited[-1])

    ctx = ExecContext(
        agent_id=agent_id(params, conn),
        session_key=session_key(params, conn),
        operator=conn.operator,
        caller_alive=lambda: not conn.closed,
        on_waiting=waiting,
    )
    try:
        result = await services.exec_tool.run(params, ctx)
    finally:
        conn.waiting_approvals.difference_update(waited)
    return result.to_dict()
