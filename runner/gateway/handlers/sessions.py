"""`sessions.list|output|resize|follow|unfollow`: the operator's view of every session (an agent's: its own
scopes only), raw output paging, PTY resize, and which sessions' output this connection is pushed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from runner.gateway.handlers.common import opt_str, owned_session, req_str, require_operator, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


# Rows are ~400 B: a page of this many bytes keeps `sessions.list` frames far under the 1 MiB cap however
# many sessions run (it failed near 2,500 sessions as one frame).
PAGE_BYTES = 256 * 1024


async def list_(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Sessions, newest first, one page at a time: `cursor` is how many rows to skip (`next` of the page
    before), `next` is null on the last page, `total` counts every row of the view."""
    key = session_key(params, conn)
    skip = _cursor(params)
    rows: list[Any]
    if not conn.operator:  # an agent: the sessions of its own scopes, never another agent's
        rows = [s for s in services.sessions.listed_sessions(key or None) if conn.sees_scope(s.scope_key)]
    else:
        rows = list(services.sessions.listed_sessions(key or None))
        if not key:  # the operator's view: every connected node's sessions, all scopes
            rows += await services.nodes.node_sessions()
    page: list[dict[str, Any]] = []
    size = 0
    for row in rows[skip:]:
        view = row if isinstance(row, dict) else row.to_dict()
        size += len(json.dumps(view, ensure_ascii=False, separators=(",", ":")).encode())
        if page and size > PAGE_BYTES:
            break
        page.append(view)
    end = skip + len(page)
    return {"sessions": page, "next": str(end) if end < len(rows) else None, "total": len(rows)}


def _cursor(params: dict[str, Any]) -> int:
    raw = params.get("cursor")
    if raw is None:
        return 0
    if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 12:
        raise InvalidInput("cursor must be the `next` of the previous page")
    return int(raw)


def _int(params: dict[str, Any], key: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{key} must be a non-negative integer")
    return value


MAX_OUTPUT_BYTES = 128 * 1024  # escaped JSON of this many raw bytes still fits one 1 MiB frame
DEFAULT_OUTPUT_BYTES = 64 * 1024


async def output(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Raw output (escapes intact) by raw byte offset; no offset = the last `limit` bytes (a pane opening)."""
    sid = req_str(params, "sessionId")
    offset = _int(params, "offset")
    limit = min(_int(params, "limit") or DEFAULT_OUTPUT_BYTES, MAX_OUTPUT_BYTES)
    if sid.startswith("node:"):
        require_operator(conn, "sessions.output on a node session")  # every scope there: operators only
        got = await services.nodes.session_call(
            sid, "sessions.output", {"limit": limit, **({"offset": offset} if offset is not None else {})}
        )
        start, dropped = got.get("offset"), got.get("dropped")
        return {
            "sessionId": sid,
            "offset": start,
            "nextOffset": got.get("nextOffset"),
            "data": str(got.get("data") or ""),
            "truncatedBefore": bool(dropped) if offset is not None else bool(start),
            "status": got.get("status"),
        }
    session = owned_session(services, conn, sid)  # another agent's reads exactly as a nonexistent one
    got = session.output.read(offset, limit)  # the exact text of raw bytes [offset, nextOffset)
    return {
        "sessionId": sid,
        "offset": got.offset,
        "nextOffset": got.next_offset,
        "data": got.text,
        "truncatedBefore": got.dropped > 0 if offset is not None else got.offset > 0,
        "status": session.status,
    }


async def resize(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    sid = req_str(params, "sessionId")
    cols, rows = _int(params, "cols"), _int(params, "rows")
    if not cols or not rows:
        raise InvalidInput("cols and rows are required")
    if sid.startswith("node:"):
        require_operator(conn, "sessions.resize on a node session")
        await services.nodes.session_call(sid, "sessions.resize", {"cols": cols, "rows": rows})
        return {"sessionId": sid, "cols": cols, "rows": rows}
    owned_session(services, conn, sid)
    if not services.sessions.resize(sid, cols, rows):
        raise InvalidInput(f"Session {sid} is not a running PTY session")
    return {"sessionId": sid, "cols": cols, "rows": rows}


async def follow(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Push this session's output to the connection; `only: true` stops every other one's."""
    sid = req_str(params, "sessionId")
    only = params.get("only", False)
    if not isinstance(only, bool):
        raise InvalidInput("only must be a boolean")
    return {"follow": services.output.follow(conn, sid, only=only)}


async def unfollow(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Stop pushing this session's output (no sessionId: every session's); activity counts continue."""
    return {"follow": services.output.unfollow(conn, opt_str(params, "sessionId"))}
