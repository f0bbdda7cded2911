"""Who hears what: the gateway's events pushed to the connections subscribed to their topic and allowed
to see their scope (an agent hears only its own sessions and keys; approvals and sandboxes are the
operator's). Session output has its own fan-out (runner/gateway/output.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from engine.approvals.request import ApprovalRecord
from engine.protocol.frames import Event
from engine.protocol.methods import EventName, Topic

if TYPE_CHECKING:
    from runner.gateway.connection import Connection


class Broadcaster:
    """The live connections (`connections()` asks the server each time) and the events sent to them."""

    def __init__(self, connections: Callable[[], Collection[Connection]]) -> None:
        self._connections = connections

    def connections(self) -> list[Connection]:
        return list(self._connections())

    def broadcast(self, topic: str, event: str, data: dict[str, Any]) -> None:
        frame = Event(event=event, data=data)
        for conn in self.connections():
            if topic in conn.topics and conn.sees_scope(scope_of(topic, data)):
                conn.send(frame)

    def has_approver(self) -> bool:
        return any(conn.approver and not conn.closed for conn in self.connections())

    # -- what each source's events look like on the wire

    def approval(self, kind: str, record: ApprovalRecord) -> None:
        """An ask was made, coalesced with an identical one, or settled (`ran` is not pushed)."""
        if kind == "requested":
            self.broadcast(Topic.APPROVALS, EventName.APPROVAL_REQUESTED, record.view())
        elif kind == "updated":
            # An identical ask was coalesced into this one: consoles update the row's count at once.
            data = {"id": record.id, "count": record.count, "requesterGone": record.requester_gone}
            self.broadcast(Topic.APPROVALS, EventName.APPROVAL_UPDATED, data)
        elif kind != "ran":
            data = {"id": record.id, "decision": record.decision, "resolvedBy": record.resolved_by}
            self.broadcast(Topic.APPROVALS, EventName.APPROVAL_RESOLVED, data)

    def system_event(self, session_key: str, text: str) -> None:
        data = {"sessionKey": session_key, "text": text, "ts": _now_ms()}
        self.broadcast(Topic.EVENTS, EventName.SYSTEM_EVENT, data)

    def config_error(self, error: str | None) -> None:
        """Loud, not only in gateway.log: `status`, every exec result and the console's header say it."""
        self.broadcast(Topic.EVENTS, EventName.GATEWAY_CONFIG, {"error": error, "ts": _now_ms()})

    def sandbox_progress(self, container_name: str, message: str) -> None:
        data = {"containerName": container_name, "message": message, "ts": _now_ms()}
        self.broadcast(Topic.SANDBOXES, EventName.SANDBOX_PROGRESS, data)


def _now_ms() -> int:
    return int(time.time() * 1000)


def scope_of(topic: str, data: dict[str, Any]) -> str | None:
    """The session scope a broadcast belongs to (Connection.sees_scope decides who hears it): a session's
    starts and exits its scope, a system event its session key; approvals, sandboxes and gateway-wide
    events none (the operator's)."""
    if topic == Topic.SESSIONS:
        return str(data.get("scopeKey") or "") or None
    if topic == Topic.EVENTS:
        key = data.get("sessionKey")
        return key if isinstance(key, str) else None
    return None
