"""`nodes.status`: each configured node's link as this gateway sees it (state, RTT, last error, identity)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from engine.nodes.link import NodeError

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def status(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    hub = services.nodes
    if params.get("ping") is True:  # connect where needed and measure RTT; failures show as lastError
        links = list(hub.sync().values())

        async def probe(link: Any) -> None:
            with contextlib.suppress(NodeError):
                await link.ensure()
                await link.ping()

        await asyncio.gather(*(probe(link) for link in links))
    return {"nodes": hub.status()}
