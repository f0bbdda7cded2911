"""`subscribe`: choose which pushed events (sessions, approvals, events, sandboxes) this connection receives;
`follow: [sessionId…]` limits `session.output` to those sessions (see sessions.follow)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from engine.protocol.methods import TOPICS

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    topics = params.get("topics", list(TOPICS))
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise InvalidInput("topics must be a list of strings")
    unknown = sorted(set(topics) - set(TOPICS))
    if unknown:
        raise InvalidInput(f"unknown topics: {', '.join(unknown)} (known: {', '.join(TOPICS)})")
    follow = params.get("follow")
    if follow is not None and (not isinstance(follow, list) or not all(isinstance(s, str) for s in follow)):
        raise InvalidInput("follow must be a list of session ids")
    conn.topics = set(topics) | ({"approvals"} if conn.approver else set())
    if follow is not None:
        services.output.set_follow(conn, follow[:64])
    if "sessions" in conn.topics:
        services.output.forward_wanted_sessions()
    result: dict[str, Any] = {"topics": sorted(conn.topics)}
    if conn.follow is not None:
        result["follow"] = sorted(conn.follow)
    return result
