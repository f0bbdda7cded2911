"""`events`: the system-event backlog of one session key (or of all), optionally drained, a page at a time
(however large the queues, an answer stays far below the frame cap: `next` says where the rest starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.protocol.requests import Events
from runner.gateway.handlers.common import session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: Events) -> dict[str, Any]:
    key = session_key(conn, req.session_key)
    drain = req.drain is True
    # No key: every queue the caller may see (an agent: its own keys only, never another agent's).
    queues = services.events.keys()
    keys = [key] if key else [k for k in queues if conn.sees_scope(k)]
    start = max(req.cursor or 0, 0)
    got, after = services.events.page(keys, start, drain=drain)
    return {"events": [{"sessionKey": k, "text": text} for k, text in got], "next": after}
