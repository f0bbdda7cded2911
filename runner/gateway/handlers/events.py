"""`events`: the system-event backlog of one session key (or of all), optionally drained, a page at a time
(however large the queues, an answer stays far below the frame cap: `next` says where the rest starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.gateway.handlers.common import session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    key = session_key(params, conn)
    drain = params.get("drain", False) is True
    # No key: every queue the caller may see (an agent: its own keys only, never another agent's).
    queues = services.events.keys()
    keys = [key] if key else [k for k in queues if conn.sees_scope(k)]
    cursor = params.get("cursor")
    start = cursor if isinstance(cursor, int) and not isinstance(cursor, bool) and cursor > 0 else 0
    got, after = services.events.page(keys, start, drain=drain)
    return {"events": [{"sessionKey": k, "text": text} for k, text in got], "next": after}
