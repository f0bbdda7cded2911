"""`nodes.status`: each configured node's link as this gateway sees it (state, RTT, last error, identity).

The operator sees everything and may `ping` (which opens SSH links). An agent learns only which nodes exist
and whether they are up, enough to pick `host=node`: addresses, users, host keys and errors (which quote
paths and hosts) are the operator's, and an agent must not make the gateway dial out at will. Nor does an
agent learn of nodes `[[agents.list]] nodes` keeps from it: their names are the operator's too."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from engine.nodes.link import NodeError
from engine.protocol.requests import NodesStatus
from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def status(services: Services, conn: Connection, req: NodesStatus) -> dict[str, Any]:
    hub = services.nodes
    if not getattr(conn, "operator", False):
        if req.ping:
            require_operator(conn, "nodes.status ping")
        config = services.config()
        return {
            "nodes": [
                {"name": row.get("name"), "state": row.get("state")}
                for row in hub.status()
                if config.may_use_node(conn.agent, str(row.get("name")))
            ]
        }
    if req.ping:  # connect where needed and measure RTT; failures show as lastError
        links = list(hub.sync().values())

        async def probe(link: Any) -> None:
            with contextlib.suppress(NodeError):
                await link.ensure()
                await link.ping()

        await asyncio.gather(*(probe(link) for link in links))
    return {"nodes": hub.status()}
