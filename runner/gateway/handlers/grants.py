"""`approvals.grants` and `approvals.grants.revoke`: the operator's limited allow-always grants, this
gateway's and every connected node's (a grant made on a node's ask lives on that node, which decides)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from engine import fairpool
from engine.errors import InvalidInput
from engine.nodes.link import NodeError, NodeLink
from engine.protocol.requests import GrantsList, GrantsRevoke
from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services

log = logging.getLogger("exechost.gateway.grants")

NODE_GRANTS_TIMEOUT_SEC = 15.0
NODE_PREFIX = "node:"  # a node's grant is listed as node:<name>:<id>, as its sessions are


async def list_(services: Services, conn: Connection, req: GrantsList) -> dict[str, Any]:
    require_operator(conn, "approvals.grants")
    agent = req.agent_id
    grants = await fairpool.to_thread(services.grants.active, agent)
    rows: list[dict[str, Any]] = [{**g.to_json(), "left": g.left(), "node": None} for g in grants]
    # Connected nodes are asked; one not linked now is not dialled (it may be down), only named.
    links = [link for link in services.nodes.sync().values() if link.state == "connected"]
    errors = [
        {"node": name, "error": f"node {name}: not connected; its grants are not listed"}
        for name, link in services.nodes.sync().items()
        if link.state != "connected"
    ]
    answers = await asyncio.gather(*(_node_grants(link, agent) for link in links))
    for link, got in zip(links, answers, strict=True):
        if isinstance(got, str):
            errors.append({"node": link.name, "error": got})
            continue
        for row in got:
            if isinstance(row, dict) and isinstance(row.get("id"), str):
                rows.append({**row, "id": f"{NODE_PREFIX}{link.name}:{row['id']}", "node": link.name})
    return {"grants": rows, **({"errors": errors} if errors else {})}


async def _node_grants(link: NodeLink, agent: str | None) -> list[Any] | str:
    """The node's live grants, or why they could not be read (an older exechost there, a dropped link)."""
    try:
        res = await link.call("grants.list", {"agentId": agent}, timeout=NODE_GRANTS_TIMEOUT_SEC)
    except NodeError as exc:
        return str(exc)
    if not res.ok:
        return f"node {link.name}: {(res.error or {}).get('message') or 'grants not available'}"
    got = (res.payload or {}).get("grants")
    return got if isinstance(got, list) else []


async def revoke(services: Services, conn: Connection, req: GrantsRevoke) -> dict[str, Any]:
    require_operator(conn, "approvals.grants.revoke")
    grant_id = req.id
    if grant_id.startswith(NODE_PREFIX):
        return await _revoke_on_node(services, grant_id)
    removed = await fairpool.to_thread(services.grants.revoke, grant_id)
    if removed is None:
        raise InvalidInput(f"no grant {grant_id!r} (or the prefix is ambiguous)")
    return {"revoked": {**removed.to_json(), "node": None}}


async def _revoke_on_node(services: Services, grant_id: str) -> dict[str, Any]:
    name, _, raw = grant_id.removeprefix(NODE_PREFIX).partition(":")
    link = services.nodes.sync().get(name)
    if link is None or not raw:
        known = ", ".join(services.nodes.sync()) or "none configured"
        raise InvalidInput(f"no grant {grant_id!r}: use node:<name>:<id> with a configured node ({known})")
    try:
        res = await link.call("grants.revoke", {"id": raw}, timeout=NODE_GRANTS_TIMEOUT_SEC)
    except NodeError as exc:
        raise InvalidInput(f"grant {grant_id!r} not revoked: {exc}") from None
    if not res.ok:
        raise InvalidInput(f"node {name}: {(res.error or {}).get('message') or 'grant not revoked'}")
    revoked = dict((res.payload or {}).get("revoked") or {})
    return {"revoked": {**revoked, "id": f"{NODE_PREFIX}{name}:{revoked.get('id', raw)}", "node": name}}
