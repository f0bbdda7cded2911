"""A node's ask, relayed into this gateway's inbox: filed under the run the gateway started on that very
link (its agent, session key and node id are the gateway's record, never the frame's), capped per run, per
node and principal (the operator's own runs apart from agent main's), and by the inbox's own caps; nobody
deciding in time is the node's askFallback."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine.approvals import generations as stamps
from engine.approvals.pending import REVOKED
from engine.approvals.request import OPERATOR_ASKER, ApprovalError, ApprovalRecord, ApprovalRequest, env_hash
from engine.nodes.link import NodeError, NodeLink
from runner.gateway import node_limits as limits
from runner.gateway.node_runs import NodeRun

if TYPE_CHECKING:
    from runner.gateway.hubs import HubServices

log = logging.getLogger("exechost.gateway.nodes")

MAX_PENDING_PER_NODE_AGENT = 16  # each principal's share of a node's asks: one's flood leaves others room
_APPROVAL_ID = re.compile(
    r"[A-Za-z0-9_.:-]{1,128}"
)  # a node flooding the inbox gets refused (askFallback), not shown


def revoked_answer(link: NodeLink, run: NodeRun) -> dict[str, Any]:
    """The answer to an ask of a run whose agent was revoked or rotated after it began: deny, at once."""
    log.warning(
        "node %s asked for run %s of agent %s, revoked (or rotated) since it began: denied",
        link.name,
        run.run_id,
        run.agent_id,
    )
    return {"decision": "deny", "resolvedBy": "revoked", "reason": REVOKED}


async def _answered(answer: dict[str, Any]) -> dict[str, Any]:
    return answer


def relay_approval(
    services: HubServices,
    runs: dict[tuple[str, str], NodeRun],
    drop_frame: Callable[[NodeLink, str, str], None],
    link: NodeLink,
    node_id: str,
    params: dict[str, Any],
) -> Awaitable[dict[str, Any]]:
    """A node's ask, into this gateway's inbox, for a run the gateway started on this very link: the
    agent, session key and node id come from the gateway's record of that run and of the link, never
    from the frame, so a node cannot file an ask as another agent, for another node's run, or for a run
    that ended. It counts against the node's cap and the run's agent's.

    Read now, as the frame arrives, into the typed, cut ApprovalRequest; what is returned to await holds
    that and the run, never `params`: the decoded frame (megabytes of a field no one reads) is let go
    before the ask waits (fresh round 17 b)."""
    view = params.get("request")
    if not isinstance(view, dict) or link.hello is None:
        raise NodeError("bad approval request", "INVALID_REQUEST")
    approval_id = params.get("approvalId")
    if not isinstance(approval_id, str) or not _APPROVAL_ID.fullmatch(approval_id):
        raise NodeError("bad approval request: approvalId", "INVALID_REQUEST")
    raw_run = view.get("runId")
    run = runs.get((link.name, raw_run)) if isinstance(raw_run, str) else None
    if run is None:
        drop_frame(link, "approval.request", f"run {str(raw_run)[:80]!r} is not in flight on this node")
        return _answered({"decision": None, "resolvedBy": "no-such-run"})
    if run.asks >= limits.MAX_ASKS_PER_RUN:
        drop_frame(link, "approval.request", f"run {run.run_id} already asked {run.asks} times")
        return _answered({"decision": None, "resolvedBy": "too-many-pending"})
    run.asks += 1
    manager = services.approvals
    if manager.generations.stale(run.agent_id, run.generation) or (
        run.stamp is not None and run.stamp.stale()
    ):
        # Its agent was revoked or rotated since the run began: denied now, never filed, never left to
        # the node's askFallback (which may allow); a denial ends the node's run.
        return _answered(revoked_answer(link, run))
    # Without an approver the ask still waits in the inbox (exechost approve, or a console attaching
    # later), as the gateway's own asks do; nobody deciding in time is the node's askFallback.
    # Counted by the principal whose run it is (ApprovalRequest.asker): the operator's own run is agent
    # main's by name, and its asks must not fill main's share (nor main's the operator's).
    asker = OPERATOR_ASKER if run.operator else run.agent_id
    mine = (r for r in manager.pending() if (r.request.node_id, r.request.asker) == (node_id, asker))
    if sum(1 for _ in mine) >= MAX_PENDING_PER_NODE_AGENT:
        return _answered({"decision": None, "resolvedBy": "too-many-pending"})
    env = limits.env_pairs(view.get("env"))
    command = limits.cut(view.get("command"), limits.COMMAND_CHARS)
    warnings = limits.warnings(view.get("warnings"))
    if " ".join(command.split()) != " ".join(run.command.split()):
        # The operator sees what the agent asked for beside what the node says it will run.
        warnings.append(
            limits.cut(f"the agent's command on this run was: {run.command}", limits.WARNING_CHARS)
        )
    request = ApprovalRequest(
        command=command,
        cwd=limits.cut(view.get("cwd"), limits.PATH_CHARS),
        host="node",
        agent_id=run.agent_id,
        session_key=run.session_key,
        security=limits.cut(view.get("security"), limits.WORD_CHARS) or "allowlist",
        ask=limits.cut(view.get("ask"), limits.WORD_CHARS) or "on-miss",
        ask_fallback=limits.cut(view.get("askFallback"), limits.WORD_CHARS) or "deny",
        allowed_decisions=limits.allowed_decisions(view.get("allowedDecisions")),
        resolved_path=limits.optional(view.get("resolvedPath"), limits.PATH_CHARS),
        node_id=node_id,
        node_name=link.name,
        env_hash=env_hash(dict(env)),
        # Who asked, in the node namespace and made here: a frame's id could name another source's
        # (`socket:X`, whose withdraw would end this ask) or another node's ask.
        node_approval_id=f"node:{secrets.token_hex(12)}",
        env=env,
        decision_json=limits.decision_json(view.get("decision")),
        warnings=tuple(warnings),
        agent_reason=limits.optional(view.get("agentReason"), limits.REASON_CHARS),
        egress=limits.optional(view.get("egress"), 300),  # a node sandbox's "name:port"
        # Who asked: the operator for its run (its own share of pending asks), else the run's agent.
        asker=asker,
    )
    # Filed now, as the frame is read, so the caps counted above hold for a burst read at once.
    filed = _file(services, link, run, request)
    return _answered(filed) if isinstance(filed, dict) else _decide(services, link, run, request, filed)


def _file(
    services: HubServices, link: NodeLink, run: NodeRun, request: ApprovalRequest
) -> ApprovalRecord | dict[str, Any]:
    """The ask filed in the inbox (its record), or the answer when it may not be."""
    manager = services.approvals
    # Filed under the proof of the call that started the run (its stamp), never under the context this
    # frame arrived in: the link's reader is no caller's.
    authorized = stamps.authorize(run.stamp)
    try:
        record, _ = manager.register(request, generation=run.generation)
    except ApprovalError as exc:
        if exc.code == "AGENT_REVOKED":  # revoked while this run waited (an allow-once taken: asks again)
            return revoked_answer(link, run)
        return {"decision": None, "resolvedBy": "too-many-pending"}  # the queue caps hold: askFallback
    finally:
        stamps.reset(authorized)
    if run.operator and not record.joined and len(record.requesters) <= 1:
        record.by_operator = True  # the operator's own run asked first: no agent's ask (yet)
    run.records.append(record)
    run.asked.set()
    return record


async def _decide(
    services: HubServices, link: NodeLink, run: NodeRun, request: ApprovalRequest, record: ApprovalRecord
) -> dict[str, Any]:
    """The filed ask waited on until it is decided (an allow-once taken by another is filed again)."""
    manager = services.approvals
    while True:
        decision = await manager.wait(record)
        if decision == "allow-once" and not manager.consume_allow_once(
            record, request.session_key, request.node_approval_id, request.asker
        ):
            filed = _file(services, link, run, request)  # one approval, one run: this ask needs its own
            if isinstance(filed, dict):
                return filed
            record = filed
            continue
        answer: dict[str, Any] = {
            "decision": decision,
            "resolvedBy": record.resolved_by,
            "reason": record.reason,
        }
        if record.grant is not None:  # a yes with limits: the node keeps it in its grants, not for ever
            answer["grant"] = record.grant.to_json()
        return answer
