"""`subscribe`: choose which pushed events (sessions, approvals, events, sandboxes) this connection receives;
`follow: [sessionId…]` limits `session.output` to those sessions (see sessions.follow)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from engine.protocol.methods import TOPICS
from engine.protocol.requests import Subscribe

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: Subscribe) -> dict[str, Any]:
    topics = req.topics if req.topics is not None else list(TOPICS)
    unknown = sorted(set(topics) - set(TOPICS))
    if unknown:
        raise InvalidInput(f"unknown topics: {', '.join(unknown)} (known: {', '.join(TOPICS)})")
    follow = req.follow
    conn.topics = set(topics) | ({"approvals"} if conn.approver else set())
    if follow is not None:
        services.output.set_follow(conn, follow[:64])
    if "sessions" in conn.topics:
        services.output.forward_wanted_sessions()
    result: dict[str, Any] = {"topics": sorted(conn.topics)}
    if conn.follow is not None:
        result["follow"] = sorted(conn.follow)
    return result
