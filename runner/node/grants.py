"""The node's limited grants, for the gateway's operator: `grants.list` and `grants.revoke` over the link.

A grant made on a node ask lives on the node (it decides its own runs), so the gateway lists and revokes
it here rather than keeping a copy that could disagree. Each is filed under its owner (the gateway's
namespace and agent, ExecContext.owner): a gateway lists and revokes only its own, in its own terms."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.approvals.grants import Grant, GrantStore
from runner.node import gateways


class GrantRequestError(Exception):
    """A malformed or unanswerable grants request (the gateway shows the text)."""


def _mine(ns: str, grant: Grant) -> bool:
    return gateways.owns(ns, grant.agent_id)


def _shown(grant: Grant) -> dict[str, Any]:
    """A grant as its gateway names it: its agent and session without the node's namespace."""
    row = grant.to_json()
    row["agentId"] = gateways.split(grant.agent_id)[1]
    if isinstance(row.get("sessionKey"), str):
        row["sessionKey"] = gateways.split(row["sessionKey"])[1]
    return row


async def handle(store: GrantStore, method: str, params: dict[str, Any]) -> dict[str, Any]:
    ns = gateways.CURRENT_GATEWAY.get()
    if method == "grants.list":
        agent = params.get("agentId")
        if agent is not None and not isinstance(agent, str):
            raise GrantRequestError("INVALID_REQUEST: agentId must be a string")
        try:
            owner = gateways.scoped(agent) if agent else None
        except gateways.ForeignScope as exc:
            raise GrantRequestError(str(exc)) from None
        grants = await asyncio.to_thread(store.active, owner)
        return {"grants": [{**_shown(g), "left": g.left()} for g in grants if _mine(ns, g)]}
    if method == "grants.revoke":
        grant_id = params.get("id")
        if not isinstance(grant_id, str) or not grant_id.strip() or len(grant_id) > 200:
            raise GrantRequestError("INVALID_REQUEST: id must be a grant id or prefix")
        removed = await asyncio.to_thread(store.revoke, grant_id, lambda g: _mine(ns, g))
        if removed is None:
            raise GrantRequestError(f"no grant {grant_id!r} on this node (or the prefix is ambiguous)")
        return {"revoked": _shown(removed)}
    raise GrantRequestError("command not supported")
