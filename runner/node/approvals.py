"""The node's approval manager: an ask goes first to a console on this node's own exec-approvals.sock, else
over the link to the gateway's approver; an answer resolves only the record it was asked for (a decision can
never reach another node or request)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from engine.approvals.grants import GrantLimits
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRecord, session_owner
from engine.errors import InvalidInput

log = logging.getLogger("exechost.node")

# relay(approval id, request view) -> the gateway's answer {"decision": str | None, "resolvedBy": str}
Relay = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
# The gateway's runId of the system.run being decided: set around the exec tool's run, read when its ask is
# registered (same task), so the gateway can tie the relayed ask to the agent call that waits on it.
CURRENT_RUN: contextvars.ContextVar[str] = contextvars.ContextVar("exechost_node_run", default="")
# local(request view) -> a decision from a console on this node, or None (none listening, no answer)
Local = Callable[[dict[str, Any]], Awaitable[str | None]]


class RelayedApprovals(ApprovalManager):
    """Every new ask goes to `relay` (with the gateway's runId it decides); the gateway's inbox holds it until
    someone decides; no decision (link down, expired there or here) means askFallback."""

    def __init__(self, relay: Relay, local: Local | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._relay = relay
        self._local = local
        self._tasks: set[asyncio.Task[None]] = set()
        self.add_listener(self._on_change)

    def _on_change(self, kind: str, record: ApprovalRecord) -> None:
        if kind != "requested":
            return
        task = asyncio.ensure_future(self._ask(record, CURRENT_RUN.get()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ask(self, record: ApprovalRecord, run_id: str = "") -> None:
        if self._local is not None:
            try:
                decision = await self._local(record.view())
            except Exception as exc:
                log.warning("the local approvals socket failed: %s", exc)
                decision = None
            if decision is not None and not record.resolved:
                if decision in record.request.allowed_decisions:
                    self.resolve(record.id, decision, resolved_by="node-console")
                else:
                    self._expire(record.id)
                return
        try:
            view = record.view()
            if run_id:
                view["runId"] = run_id
            answer = await self._relay(record.id, view)
        except Exception as exc:
            log.warning("approval %s could not be relayed: %s", record.id, exc)
            answer = {}
        if record.resolved:
            return
        decision = answer.get("decision")
        if isinstance(decision, str) and decision in record.request.allowed_decisions:
            by = str(answer.get("resolvedBy") or "gateway")
            grant = None
            if decision == "allow-always" and answer.get("grant") is not None:
                try:
                    grant = GrantLimits.from_json(answer.get("grant"))
                except InvalidInput:  # limits we cannot read: a yes for this run only, never for ever
                    decision = "allow-once"
                if grant is not None and grant.session_only and session_owner(record) is None:
                    decision, grant = "allow-once", None  # no session to bind it to: this run only
            self.resolve(
                record.id,
                decision,
                resolved_by=f"gateway:{by}"[:80],
                reason=answer.get("reason"),
                grant=grant,
            )
        else:
            self._expire(record.id)  # nobody decided: the exec tool applies askFallback
