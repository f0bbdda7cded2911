"""`agents.refresh`: drop live connections whose agent credential was revoked or re-minted on disk."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def refresh(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "agents.refresh")
    server = services.server
    dropped = await server.drop_revoked() if server is not None else []
    return {"dropped": dropped}
