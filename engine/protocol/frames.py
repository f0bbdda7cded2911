"""Control-socket protocol v1: frame dataclasses, the JSON-lines codec, the socket path and the token."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import jsontext, redact, statefs
from engine.errors import ExecHostError

if TYPE_CHECKING:  # asyncio costs a blocking CLI client ~40 ms of imports it never uses
    import asyncio

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 1 << 20  # one JSON line, newline included
HANDSHAKE_TIMEOUT_S = 5.0
SOCKET_NAME = "gateway.sock"
TOKEN_NAME = "gateway.json"  # noqa: S105 - a file name, not a secret
# The operator role: only the console and the operator's own CLI verbs present it; agents never get it.
OPERATOR_TOKEN_NAME = "operator.json"  # noqa: S105 - a file name, not a secret

RequestId = int | str


class ProtocolError(ExecHostError):
    """A frame that is not valid protocol v1 (bad JSON, wrong shape, too large). `request_id` is the
    request's id when the frame was a request whose id itself was sound, so its answer can name it."""

    code = "frame"

    def __init__(self, message: str, request_id: RequestId | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class GatewayUnavailable(ExecHostError):
    """No gateway answers on the control socket and none could be started."""

    code = "unavailable"


class GatewayNotRunning(GatewayUnavailable):
    """Nothing listens on the control socket (no file, or refused): no gateway runs for this state dir."""


class GatewayNotAnswering(GatewayUnavailable):
    """A gateway holds the socket but did not answer the handshake in time (stopped with SIGSTOP, or
    overloaded): starting another would only fail on its lock, so the caller is told and may retry."""


class GatewayForeign(GatewayNotAnswering):
    """The control socket is served by another Unix account (SO_PEERCRED): not this account's gateway, so
    no token is sent to it and none is started behind it (fresh round 16 a)."""


class RemoteError(ExecHostError):
    """The gateway answered a request with `ok: false`; `code` is machine-readable, str() is the message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---- frames ----------------------------------------------------------------------------------------


@dataclass
class Hello:
    token: str
    version: int = PROTOCOL_VERSION
    client: str = "cli"
    name: str = ""
    operator: str = ""  # the operator token, for verbs that can broaden what agents may run
    # An agent's own credential (`exechost agents add NAME`): the gateway learns the agent from it (or from
    # the peer's uid on the agents' socket), never from a request's `agentId`.
    credential: str = ""
    type: str = field(default="hello", init=False)


@dataclass
class Welcome:
    pid: int
    version: int = PROTOCOL_VERSION
    agent: str = ""  # who the gateway took this connection to be ("" for the operator role)
    type: str = field(default="welcome", init=False)


@dataclass
class ErrorFrame:
    code: str  # auth | version | handshake | frame | overload
    message: str
    type: str = field(default="error", init=False)


@dataclass
class Request:
    id: RequestId
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    type: str = field(default="req", init=False)


@dataclass
class Response:
    id: RequestId | None
    ok: bool
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    type: str = field(default="res", init=False)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "res", "id": self.id, "ok": self.ok}
        if self.ok:
            out["result"] = self.result if self.result is not None else {}
        else:
            out["error"] = self.error or {"code": "internal", "message": "unknown error"}
        return out


@dataclass
class Event:
    event: str
    data: dict[str, Any] = field(default_factory=dict)
    type: str = field(default="event", init=False)

    def __iter__(self) -> Iterator[Any]:
        """`name, data = event` unpacking for front ends that want a pair."""
        return iter((self.event, self.data))


Frame = Hello | Welcome | ErrorFrame | Request | Response | Event


def encode_frame(frame: Frame) -> bytes:
    """One `\\n`-terminated UTF-8 JSON line; refuses to produce a frame the peer would reject (too large,
    or holding NaN/Infinity: ProtocolError). A lone surrogate from elsewhere is sent as U+FFFD."""
    if isinstance(frame, Response):
        payload = frame.to_wire()
    else:
        payload = {f.name: getattr(frame, f.name) for f in fields(frame)}
    try:
        data = jsontext.dumps_wire(payload)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ProtocolError(f"frame cannot be encoded: {exc}") from None
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds the {MAX_FRAME_BYTES}-byte cap")
    return data


def _is_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and 0 < len(value) <= 128
    )


def _need(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if key not in obj:
        if default is ...:
            raise ProtocolError(f"missing field {key!r}")
        return default
    value = obj[key]
    if isinstance(value, bool) and kind is int:
        raise ProtocolError(f"field {key!r} must be {getattr(kind, '__name__', kind)}")
    if not isinstance(value, kind):
        raise ProtocolError(f"field {key!r} must be {getattr(kind, '__name__', kind)}")
    return value


def decode_frame(line: bytes | str) -> Frame:
    """Parse one line into a frame; every shape error is a ProtocolError with a short reason."""
    try:
        obj = jsontext.loads_wire(line, max_bytes=MAX_FRAME_BYTES)
    except ValueError as exc:
        raise ProtocolError(str(exc), _salvage_id(line)) from None
    try:
        return _frame(obj)
    except ProtocolError as exc:
        rid = obj.get("id") if isinstance(obj, dict) and obj.get("type") == "req" else None
        exc.request_id = rid if _is_id(rid) else None
        raise


def _salvage_id(line: bytes | str) -> RequestId | None:
    """The id of a request frame the strict reader refused, when the frame parses leniently and the id
    itself is admissible: the client's request is answered by name instead of waiting forever."""
    obj = jsontext.peek(line) if len(line) <= MAX_FRAME_BYTES else None
    rid = obj.get("id") if obj is not None and obj.get("type") == "req" else None
    if not _is_id(rid) or (isinstance(rid, int) and abs(rid) > jsontext.INT_MAX):
        return None
    if isinstance(rid, str) and jsontext.clean_text(rid) != rid:
        return None
    return rid


def _frame(obj: Any) -> Frame:
    if not isinstance(obj, dict):
        raise ProtocolError("frame must be a JSON object")
    kind = obj.get("type")
    if kind == "hello":
        return Hello(
            token=_need(obj, "token", str),
            version=_need(obj, "version", int),
            client=_need(obj, "client", str, "unknown")[:64],
            name=_need(obj, "name", str, "")[:128],
            operator=_need(obj, "operator", str, "")[:256],
            credential=_need(obj, "credential", str, "")[:256],
        )
    if kind == "welcome":
        return Welcome(
            pid=_need(obj, "pid", int), version=_need(obj, "version", int), agent=_need(obj, "agent", str, "")
        )
    if kind == "error":
        return ErrorFrame(code=_need(obj, "code", str), message=_need(obj, "message", str))
    if kind == "req":
        rid = obj.get("id")
        if rid is None or not _is_id(rid):
            raise ProtocolError("field 'id' must be an integer or a non-empty string (≤128 chars)")
        method = _need(obj, "method", str)
        if not method or len(method) > 64:
            raise ProtocolError("field 'method' must be a non-empty string (≤64 chars)")
        return Request(id=rid, method=method, params=_need(obj, "params", dict, {}))
    if kind == "res":
        rid = obj.get("id")
        if rid is not None and not _is_id(rid):
            raise ProtocolError("field 'id' must be an integer or a string")
        ok = _need(obj, "ok", bool)
        if ok:
            return Response(id=rid, ok=True, result=_need(obj, "result", dict, {}))
        err = _need(obj, "error", dict)
        return Response(
            id=rid,
            ok=False,
            error={"code": str(err.get("code", "error")), "message": str(err.get("message", ""))},
        )
    if kind == "event":
        return Event(event=_need(obj, "event", str), data=_need(obj, "data", dict, {}))
    raise ProtocolError(f"unknown frame type {kind!r}")


async def read_frame_line(reader: asyncio.StreamReader) -> bytes:
    """Read one line of at most MAX_FRAME_BYTES; raises ProtocolError on an oversize line and
    asyncio.IncompleteReadError on EOF. The reader must be created with limit > MAX_FRAME_BYTES."""
    import asyncio  # already loaded by whoever holds a StreamReader

    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise ProtocolError(f"frame exceeds the {MAX_FRAME_BYTES}-byte cap") from None
    if len(line) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame exceeds the {MAX_FRAME_BYTES}-byte cap")
    return line


# ---- state paths and the token ---------------------------------------------------------------------


def socket_path(state: Path | None = None) -> Path:
    return (state or statefs.state_dir()) / SOCKET_NAME


def token_path(state: Path | None = None, name: str = TOKEN_NAME) -> Path:
    return (state or statefs.state_dir()) / name


def read_token(state: Path | None = None, name: str = TOKEN_NAME) -> str | None:
    """The token from gateway.json (or `name`), or None when the file is missing or malformed."""
    try:
        text = statefs.read_text(token_path(state, name))
    except (OSError, statefs.StateFileError):
        return None
    if text is None:
        return None
    try:
        data = jsontext.loads(text)
    except ValueError:
        return None
    token = data.get("token") if isinstance(data, dict) else None
    if not (isinstance(token, str) and len(token) >= 16):
        return None
    redact.register(token)  # whoever holds it never hands it to an agent in an error
    return token


def ensure_token(state: Path | None = None, name: str = TOKEN_NAME) -> str:
    """Read the token, creating gateway.json (or `name`; 0600, atomic, under lock) on first use."""
    path = token_path(state, name)
    token = read_token(state, name)
    if token:
        return token
    with statefs.file_lock(path):
        token = read_token(state, name)
        if token:
            return token
        token = secrets.token_urlsafe(24)
        statefs.atomic_write(path, json.dumps({"version": PROTOCOL_VERSION, "token": token}) + "\n")
    redact.register(token)
    return token
