"""`approvals.grants` and `approvals.grants.revoke`: the operator's limited allow-always grants."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from runner.gateway.handlers.common import opt_str, req_str, require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def list_(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "approvals.grants")
    agent = opt_str(params, "agentId")
    grants = await asyncio.to_thread(services.grants.active, agent)
    return {"grants": [{**g.to_json(), "left": g.left()} for g in grants]}


async def revoke(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "approvals.grants.revoke")
    grant_id = req_str(params, "id")
    removed = await asyncio.to_thread(services.grants.revoke, grant_id)
    if removed is None:
        raise InvalidInput(f"no grant {grant_id!r} (or the prefix is ambiguous)")
    return {"revoked": removed.to_json()}
