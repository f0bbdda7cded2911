"""`sessions.list|output|resize|follow|unfollow`: the operator's view of every session (an agent's: its own
scopes only), raw output paging, PTY resize, and which sessions' output this connection is pushed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from engine.protocol.requests import (
    SessionsFollow,
    SessionsList,
    SessionsOutput,
    SessionsResize,
    SessionsUnfollow,
)
from runner.gateway.handlers.common import owned_session, require_operator, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


# Rows are ~400 B: a page of this many bytes keeps `sessions.list` frames far under the 1 MiB cap however
# many sessions run (it failed near 2,500 sessions as one frame).
PAGE_BYTES = 256 * 1024


async def list_(services: Services, conn: Connection, req: SessionsList) -> dict[str, Any]:
    """Sessions, newest first, one page at a time: `cursor` is how many rows to skip (`next` of the page
    before), `next` is null on the last page, `total` counts every row of the view."""
    key = session_key(conn, req.session_key)
    skip = _cursor(req.cursor)
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


def _cursor(raw: str | None) -> int:
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:  # '²' is a digit to isdigit(), not to int()
        raise InvalidInput("cursor must be the `next` of the previous page")
    return int(raw)


def _int(value: int | None, key: str) -> int | None:
    if value is not None and value < 0:
        raise InvalidInput(f"{key} must be a non-negative integer")
    return value


MAX_WINDOW = 0xFFFF
MAX_OUTPUT_BYTES = 128 * 1024  # escaped JSON of this many raw bytes still fits one 1 MiB frame
DEFAULT_OUTPUT_BYTES = 64 * 1024


async def output(services: Services, conn: Connection, req: SessionsOutput) -> dict[str, Any]:
    """Raw output (escapes intact) by raw byte offset; no offset = the last `limit` bytes (a pane opening)."""
    sid = req.session_id
    offset = _int(req.offset, "offset")
    limit = min(_int(req.limit, "limit") or DEFAULT_OUTPUT_BYTES, MAX_OUTPUT_BYTES)
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
    got = await session.output.read_async(offset, limit)  # the exact text of raw bytes [offset, nextOffset)
    return {
        "sessionId": sid,
        "offset": got.offset,
        "nextOffset": got.next_offset,
        "data": got.text,
        "truncatedBefore": got.dropped > 0 if offset is not None else got.offset > 0,
        "status": session.status,
    }


async def resize(services: Services, conn: Connection, req: SessionsResize) -> dict[str, Any]:
    sid = req.session_id
    cols, rows = _int(req.cols, "cols"), _int(req.rows, "rows")
    if not cols or not rows:
        raise InvalidInput("cols and rows are required")
    if cols > MAX_WINDOW or rows > MAX_WINDOW:  # a terminal's size is a ushort (struct winsize)
        raise InvalidInput(f"cols and rows must be at most {MAX_WINDOW}")
    if sid.startswith("node:"):
        require_operator(conn, "sessions.resize on a node session")
        await services.nodes.session_call(sid, "sessions.resize", {"cols": cols, "rows": rows})
        return {"sessionId": sid, "cols": cols, "rows": rows}
    owned_session(services, conn, sid)
    if not services.sessions.resize(sid, cols, rows):
        raise InvalidInput(f"Session {sid} is not a running PTY session")
    return {"sessionId": sid, "cols": cols, "rows": rows}


async def follow(services: Services, conn: Connection, req: SessionsFollow) -> dict[str, Any]:
    """Push this session's output to the connection; `only: true` stops every other one's."""
    return {"follow": services.output.follow(conn, req.session_id, only=bool(req.only))}


async def unfollow(services: Services, conn: Connection, req: SessionsUnfollow) -> dict[str, Any]:
    """Stop pushing this session's output (no sessionId: every session's); activity counts continue."""
    return {"follow": services.output.unfollow(conn, req.session_id)}
