"""The operator's view of a node's sessions (`sessions.list|output|resize`), for the gateway's console: every
scope on this node the asking gateway owns, raw output by byte offset, PTY resize."""

from __future__ import annotations

from typing import Any

from engine.errors import NotFound
from engine.sessions import SessionManager
from runner.node import gateways

METHODS = ("sessions.list", "sessions.output", "sessions.resize")
MAX_OUTPUT_BYTES = 128 * 1024  # as the gateway's own sessions.output: one frame's worth, escaped


class ViewRequestError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(f"INVALID_REQUEST: {message}")


def _int(params: dict[str, Any], key: str, *, maximum: int) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise ViewRequestError(f"{key} must be an integer from 0 to {maximum}")
    return value


async def handle(
    sessions: SessionManager, method: str, params: dict[str, Any], ns: str = ""
) -> dict[str, Any]:
    """`ns`: the asking link's gateway (runner.node.gateways); it sees its own sessions only."""
    if method not in METHODS:
        raise ViewRequestError(f"{method} is not supported")
    if method == "sessions.list":
        return {"sessions": gateways.rows_for(ns, sessions.list_sessions(None))}
    sid = params.get("sessionId")
    if not isinstance(sid, str) or not sid or len(sid) > 128:
        raise ViewRequestError("sessionId must be a session id")
    if not gateways.session_of(sessions, ns, sid):
        raise ViewRequestError(f"No session found for {sid}")
    if method == "sessions.output":
        offset = _int(params, "offset", maximum=1 << 62)
        limit = _int(params, "limit", maximum=MAX_OUTPUT_BYTES) or 64 * 1024
        try:
            return await sessions.read_output(sid, offset=offset, limit=limit)
        except NotFound as exc:
            raise ViewRequestError(str(exc)) from None
    cols, rows = _int(params, "cols", maximum=1000), _int(params, "rows", maximum=1000)
    if not cols or not rows:
        raise ViewRequestError("cols and rows are required")
    if not sessions.resize(sid, cols, rows):
        raise ViewRequestError(f"Session {sid} is not a running PTY session")
    return {"sessionId": sid, "cols": cols, "rows": rows}
