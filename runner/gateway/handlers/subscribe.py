"""`subscribe`: choose which pushed events (sessions, approvals, events) this connection receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.protocol import TOPICS

if TYPE_CHECKING:
    from runner.gateway.server import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    topics = params.get("topics", list(TOPICS))
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise ValueError("topics must be a list of strings")
    unknown = sorted(set(topics) - set(TOPICS))
    if unknown:
        raise ValueError(f"unknown topics: {', '.join(unknown)} (known: {', '.join(TOPICS)})")
    conn.topics = set(topics) | ({"approvals"} if conn.approver else set())
    if "sessions" in conn.topics:
        services.follow_running_sessions()
    return {"topics": sorted(conn.topics)}
