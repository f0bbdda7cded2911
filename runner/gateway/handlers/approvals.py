"""`approvals.pending|attach|detach`: list pending asks; mark a connection as an approver they route to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.server import Connection
    from runner.gateway.services import Services


async def pending(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    return {"approvals": [record.view() for record in services.approvals.pending()]}


async def attach(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "approvals.attach")  # an approver is asked, and may answer, for every agent
    conn.approver = True
    conn.topics.add("approvals")
    return {"attached": True, "approvals": [record.view() for record in services.approvals.pending()]}


async def detach(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    conn.approver = False
    return {"attached": False}
