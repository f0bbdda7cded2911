"""The node's limited grants, for the gateway's operator: `grants.list` and `grants.revoke` over the link.

A grant made on a node ask lives on the node (it decides its own runs), so the gateway lists and revokes
it here rather than keeping a copy that could disagree."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.approvals.grants import GrantStore


class GrantRequestError(Exception):
    """A malformed or unanswerable grants request (the gateway shows the text)."""


async def handle(store: GrantStore, method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "grants.list":
        agent = params.get("agentId")
        if agent is not None and not isinstance(agent, str):
            raise GrantRequestError("INVALID_REQUEST: agentId must be a string")
        grants = await asyncio.to_thread(store.active, agent or None)
        return {"grants": [{**g.to_json(), "left": g.left()} for g in grants]}
    if method == "grants.revoke":
        grant_id = params.get("id")
        if not isinstance(grant_id, str) or not grant_id.strip() or len(grant_id) > 200:
            raise GrantRequestError("INVALID_REQUEST: id must be a grant id or prefix")
        removed = await asyncio.to_thread(store.revoke, grant_id)
        if removed is None:
            raise GrantRequestError(f"no grant {grant_id!r} on this node (or the prefix is ambiguous)")
        return {"revoked": removed.to_json()}
    raise GrantRequestError("command not supported")
