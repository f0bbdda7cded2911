"""`shutdown`: graceful stop, after this response is sent."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "shutdown")  # stopping the gateway kills every session: not an agent's call
    server = services.server
    if server is not None:
        # Let the response go out first; stopping cancels in-flight requests.
        asyncio.get_running_loop().call_later(0.05, server.request_stop)
    return {"stopping": True}
