"""`sessions.list|output|resize`: the operator's view of every session, raw output paging, PTY resize."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.gateway.handlers.common import opt_str, req_str

if TYPE_CHECKING:
    from runner.gateway.server import Connection
    from runner.gateway.services import Services


async def list_(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    assert services.sessions is not None
    key = opt_str(params, "sessionKey")
    return {"sessions": services.sessions.list_sessions(key or None)}


def _int(params: dict[str, Any], key: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key} must be a non-negative integer")
    return value


async def output(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    assert services.sessions is not None
    sid = req_str(params, "sessionId")
    reader = getattr(services.sessions, "read_output", None)
    if not callable(reader):
        raise ValueError("sessions.output is not supported by this session manager")
    result: dict[str, Any] = await reader(sid, offset=_int(params, "offset"), limit=_int(params, "limit"))
    return result


async def resize(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    assert services.sessions is not None
    sid = req_str(params, "sessionId")
    cols, rows = _int(params, "cols"), _int(params, "rows")
    if not cols or not rows:
        raise ValueError("cols and rows are required")
    resizer = getattr(services.sessions, "resize", None)
    if not callable(resizer):
        raise ValueError("sessions.resize is not supported by this session manager")
    resizer(sid, cols, rows)
    return {"sessionId": sid, "cols": cols, "rows": rows}
