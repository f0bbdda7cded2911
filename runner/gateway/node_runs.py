"""One host=node run as the gateway sees it: the asks its node relayed for it, and its outcome in the
gateway's words (the waiting line's data, approval-pending, a denial with the operator's reason, the
follow-up event of a detached run)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.approvals.generations import Stamp
from engine.approvals.request import ApprovalRecord
from engine.nodes.link import NodeLink
from engine.nodes.wire import Response
from engine.results import ToolResult
from engine.sessions.outtext import sanitize
from engine.tools import exec_asks
from engine.tools.texts import FOLLOWUP_OUTPUT_CHARS, approval_pending_text


def compact(text: str, limit: int) -> str:
    flat = " ".join(sanitize(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class NodeRun:
    """One system.run in flight, and the asks its node relayed for it (tied by runId on this link)."""

    link: NodeLink
    run_id: str
    command: str
    sandboxed: bool
    started: float
    # Whose run this is, from the call that started it: everything the node sends for the run is filed
    # under these (never under what a frame names).
    agent_id: str = "main"
    session_key: str = ""
    asks: int = 0  # asks the node relayed for it (capped: node_limits.MAX_ASKS_PER_RUN)
    start_seen: bool = False  # its exec.started came: a second one is a lie (it floods the queue)
    ended: bool = False  # its exec.finished or exec.denied came: a second one is a lie
    records: list[ApprovalRecord] = field(default_factory=list)
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    detached: bool = False
    instance: str = ""  # the node process it was sent to (hello.instance): only that one can say of it
    place: tuple[str, str] | None = None  # (agent, scope) when it holds a place among its agent's sessions
    # Its agent's credential generation when the call was taken up (engine.approvals.generations): after a
    # revoke or rotation, what its node asks for it is denied at once. None: the operator's run.
    generation: int | None = None
    operator: bool = False  # the operator's own run: its asks shown to no agent (ApprovalRecord.operators)
    # The stamp of the call that started it (its credential generation and the proof that made its caller
    # the agent): what its node asks for it later is filed under that proof, and ends with it.
    stamp: Stamp | None = None

    def where(self) -> str:
        """Where it ran, in the words every result uses (`details.ranOn`)."""
        return f"sandbox on node {self.link.name}" if self.sandboxed else f"node {self.link.name}"


def waiting_data(record: ApprovalRecord) -> dict[str, Any]:
    """What `exec.waiting` says, as for the gateway, and which node asks."""
    return exec_asks.waiting_data(record) | {"node": record.request.node_name or record.request.node_id}


def pending_result(record: ApprovalRecord, node: str, sandboxed: bool) -> ToolResult:
    req = record.request
    where = f"sandbox on node {node}" if sandboxed else f"node {node}"
    details = exec_asks.pending_details(record, list(req.warnings))
    details |= {"host": "sandbox" if sandboxed else "node", "node": node, "ranOn": where}
    return ToolResult(approval_pending_text(record, list(req.warnings)), details)


def denied_result(run: NodeRun, err: Mapping[str, str], approval_ids: list[str]) -> ToolResult:
    """The node's denial in the gateway's words: the reason code, and the operator's own reason."""
    reason = err.get("denied") or "denied"
    ref = f"gateway id={approval_ids[-1]}" if approval_ids else f"id={run.run_id}"
    text = f"Exec denied (node={run.link.name} {ref}, {reason}): {run.command}"
    said = err.get("operatorReason")
    if said:
        text += f"\nReason: {sanitize(said)[:500]}"
    details = {
        "status": "denied",
        "reason": reason,
        "operatorReason": said or None,
        "approvalId": approval_ids[-1] if approval_ids else None,
        "host": "sandbox" if run.sandboxed else "node",
        "node": run.link.name,
        "command": run.command,
        "runId": run.run_id,
        "ranOn": run.where(),
    }
    return ToolResult(text, details)


def follow_up(run: NodeRun, result: ToolResult) -> str:
    """The system event a detached node run ends with (the gateway's `Exec finished …` form)."""
    d = result.details
    if d.get("status") == "denied":
        return result.text
    ref = f"gateway id={run.records[-1].id}" if run.records else f"id={run.run_id}"
    if d.get("status") == "running":
        return f"Exec running (node={run.link.name} {ref}, session={d.get('sessionId')})"
    code = "timeout" if d.get("timedOut") else f"code {d.get('exitCode')}"
    sandbox = " sandbox" if run.sandboxed else ""
    head = f"Exec finished (node={run.link.name}{sandbox} {ref}, {code})"
    tail = compact(str(d.get("aggregated") or ""), FOLLOWUP_OUTPUT_CHARS)
    return f"{head}\n{tail}" if tail else head


def left_running(node: str, call: asyncio.Future[Response]) -> str | None:
    """The node session a run's answer left running (`node:<node>:<id>`), or None."""
    if call.cancelled() or call.exception() is not None:
        return None
    res = call.result()
    payload = (res.payload or {}) if res.ok else {}
    sid = payload.get("sessionId")
    return f"node:{node}:{sid}" if payload.get("status") == "running" and isinstance(sid, str) else None
