"""`approvals.pending|attach|detach`: list pending asks; mark a connection as an approver they route to."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from runner.gateway.handlers.common import opt_str, require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


# A page's views stay well under the 1 MiB frame cap whatever the agents sent (commands are capped at
# 64 KiB, and a view holds the command about three times: text, segments, decision).
PAGE_BYTES = 512 * 1024


def _page(services: Services, params: dict[str, Any]) -> dict[str, Any]:
    """Pending approvals, oldest first, from `cursor` on, as many as fit in PAGE_BYTES (at least one);
    `next` is the cursor of the following page, null on the last one."""
    cursor = opt_str(params, "cursor")
    rows = services.approvals.pending(after=cursor)
    views: list[dict[str, Any]] = []
    size = 0
    for record in rows:
        view = record.view()
        size += len(json.dumps(view, ensure_ascii=False, separators=(",", ":")).encode())
        if views and size > PAGE_BYTES:
            break
        views.append(view)
    more = len(views) < len(rows)
    return {
        "approvals": views,
        "total": len(services.approvals.pending()),
        "next": rows[len(views) - 1].cursor if more else None,
    }


async def pending(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    return _page(services, params)


async def attach(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    require_operator(conn, "approvals.attach")  # an approver is asked, and may answer, for every agent
    conn.approver = True
    conn.topics.add("approvals")
    return {"attached": True, **_page(services, {})}


async def detach(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    conn.approver = False
    return {"attached": False}
