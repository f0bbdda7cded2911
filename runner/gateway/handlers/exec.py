"""`exec`: the exec tool (reference §1.2 params + agentId, sessionKey) → ToolResult dict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.approvals import generations
from engine.approvals.generations import Stamp
from engine.principals import check_node_query, credential_id
from engine.protocol.frames import Event
from engine.protocol.methods import EventName
from engine.protocol.requests import ExecRequest
from engine.tools.exec import ExecContext
from runner.gateway.handlers.common import agent_id, check_sandbox_tool, session_key
from runner.gateway.liveprincipal import OPERATOR_PRINCIPAL, proof_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: ExecRequest) -> dict[str, Any]:
    agent, key = agent_id(conn, req.agent_id), session_key(conn, req.session_key)
    check_sandbox_tool(services, "exec", agent, key)
    if req.node:
        check_node_query(req.node)  # `../n1` would normalise to `n1` and pick that node
    call_id = req.call_id

    waited: list[str] = []

    def waiting(data: dict[str, Any]) -> None:
        extra = {"callId": call_id} if call_id is not None else {}
        conn.send(Event(event=EventName.EXEC_WAITING, data={**data, **extra}))
        waited.append(str(data["approvalId"]))
        conn.waiting_approvals.add(waited[-1])

    ctx = ExecContext(
        agent_id=agent,
        session_key=key,
        operator=conn.operator,
        operators_own=conn.operator and not req.agent_id,
        caller=conn.fair_key,
        credential=credential_id(conn.presented) if conn.credential else "",
        # Stamped as the request is taken up, before any await: a revoke after this ends what it asks.
        generation=None if conn.operator else services.approvals.generations.current(agent),
        caller_alive=lambda: not conn.closed,
        on_waiting=waiting,
    )
    # What this call sets going acts under that stamp, checked at each point of use (engine.approvals.
    # generations): a spawn, a sandbox's egress listener, the host runs' namespace, an ask. With it, the
    # proof that made this connection the agent when not a credential (a uid mapping, the gateway token
    # alone): a config change that cuts it off ends what this call asked, as a revoke would.
    # The operator's call is stamped too, as the operator (no agent's generation: no agent's revoke ends
    # it) under the proof of the operator token it presented: replacing operator.json ends what it set
    # going (its host runs' egress: hostnet `_operator`), as a rotation ends a credential's.
    owner = services.approvals.generations
    proof = proof_key(conn)
    whose = OPERATOR_PRINCIPAL if conn.operator else agent
    generation = owner.current(whose) if ctx.generation is None else ctx.generation
    stamp = Stamp(whose, generation, owner, proof, owner.proof(proof, whose) if proof else 0)
    token = generations.authorize(stamp)
    try:
        result = await services.exec_tool.run(req, ctx)
    finally:
        generations.reset(token)
        conn.waiting_approvals.difference_update(waited)
    return result.to_dict()
