"""`agents.refresh`: drop live connections whose agent credential was revoked or re-minted on disk;
`agents.revoke`: revoke one agent's credential with its connections stopped first; `agents.rotate`: replace
it in the same order (stop, mint, drop)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine import principals
from engine.errors import ExecHostError
from engine.protocol.requests import AgentsRefresh, AgentsRevoke, AgentsRotate
from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def refresh(services: Services, conn: Connection, req: AgentsRefresh) -> dict[str, Any]:
    require_operator(conn, "agents.refresh")
    server = services.server
    dropped = await server.recheck() if server is not None else []
    return {"dropped": dropped}


async def revoke(services: Services, conn: Connection, req: AgentsRevoke) -> dict[str, Any]:
    require_operator(conn, "agents.revoke")
    agent = principals.check_agent(req.agent, "agent")
    server = services.server
    if server is None:
        raise ExecHostError("this gateway serves no connections to revoke")
    revoked, dropped = await server.revoke_agent(agent)
    return {
        "agent": agent,
        "revoked": revoked,
        "dropped": dropped,
        "account": mapped_account(services, agent),
    }


def mapped_account(services: Services, agent: str) -> int | None:
    """The Unix account `[[agents.list]]` maps to `agent`: its credential, which no revoke removes."""
    entry = services.config().agents.get(agent)
    return entry.uid if entry is not None else None


async def rotate(services: Services, conn: Connection, req: AgentsRotate) -> dict[str, Any]:
    require_operator(conn, "agents.rotate")
    agent = principals.check_agent(req.agent, "agent")
    server = services.server
    if server is None:
        raise ExecHostError("this gateway serves no connections to rotate")
    token, dropped = await server.rotate_agent(agent)
    return {"agent": agent, "token": token, "dropped": dropped}
