"""`shutdown`: graceful stop, after this response is sent; `killSessions` ends held sessions too."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from engine.protocol.requests import Shutdown
from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: Shutdown) -> dict[str, Any]:
    require_operator(conn, "shutdown")  # stopping the gateway may kill every session: not an agent's call
    kill = req.kill_sessions is True
    running = sum(1 for s in services.sessions.list_sessions(None) if s.get("status") == "running")
    held = services.holders is not None
    # Held sessions keep running for the next gateway unless asked otherwise; others die with us.
    services.keep_sessions = held and not kill
    server = services.server
    if server is not None:
        # Let the response go out first; stopping cancels in-flight requests.
        asyncio.get_running_loop().call_later(0.05, server.request_stop)
    return {
        "stopping": True,
        "runningSessions": running,
        "sessionsKept": services.keep_sessions,
        "pendingApprovals": len(services.approvals.pending()),
    }
