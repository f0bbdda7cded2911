"""`status`: gateway pid, uptime and counts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.protocol.requests import Status

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


# What an agent may know of the gateway: that it runs, and as whom it sees the caller. Counts of every
# agent's sessions and asks, and adopted session ids, are cross-agent views (issue 18): operator only.
AGENT_FIELDS = ("pid", "uptimeSec", "version", "configError")


async def handle(services: Services, conn: Connection, req: Status) -> dict[str, Any]:
    info = services.status()
    if conn.operator:
        return info
    return {**{k: info[k] for k in AGENT_FIELDS if k in info}, "agent": conn.agent}
