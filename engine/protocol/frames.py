"""Control-socket protocol v1: frame dataclasses, the JSON-lines codec, and the asyncio client."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from engine import statefs

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 1 << 20  # one JSON line, newline included
HANDSHAKE_TIMEOUT_S = 5.0
SOCKET_NAME = "gateway.sock"
TOKEN_NAME = "gateway.json"  # noqa: S105 - a file name, not a secret
SUN_PATH_MAX = 107
TOPICS = ("sessions", "approvals", "events", "sandboxes")

RequestId = int | str


class ProtocolError(Exception):
    """A frame that is not valid protocol v1 (bad JSON, wrong shape, too large)."""


class GatewayUnavailable(Exception):
    """No gateway answers on the control socket and none could be started."""


class RemoteError(Exception):
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
    type: str = field(default="hello", init=False)


@dataclass
class Welcome:
    pid: int
    version: int = PROTOCOL_VERSION
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
    """One `\\n`-terminated UTF-8 JSON line; refuses to produce a frame the peer would reject."""
    if isinstance(frame, Response):
        payload = frame.to_wire()
    else:
        payload = {f.name: getattr(frame, f.name) for f in fields(frame)}
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
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
    raw = line.encode("utf-8") if isinstance(line, str) else line
    if len(raw) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame exceeds the {MAX_FRAME_BYTES}-byte cap")
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("frame must be a JSON object")
    kind = obj.get("type")
    if kind == "hello":
        return Hello(
            token=_need(obj, "token", str),
            version=_need(obj, "version", int),
            client=_need(obj, "client", str, "unknown")[:64],
            name=_need(obj, "name", str, "")[:128],
        )
    if kind == "welcome":
        return Welcome(pid=_need(obj, "pid", int), version=_need(obj, "version", int))
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


def token_path(state: Path | None = None) -> Path:
    return (state or statefs.state_dir()) / TOKEN_NAME


def read_token(state: Path | None = None) -> str | None:
    """The gateway token from gateway.json, or None when the file is missing or malformed."""
    try:
        text = statefs.read_text(token_path(state))
    except (OSError, statefs.StateFileError):
        return None
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    token = data.get("token") if isinstance(data, dict) else None
    return token if isinstance(token, str) and len(token) >= 16 else None


def ensure_token(state: Path | None = None) -> str:
    """Read the token, creating gateway.json (0600, atomic, under lock) on first use."""
    path = token_path(state)
    token = read_token(state)
    if token:
        return token
    with statefs.file_lock(path):
        token = read_token(state)
        if token:
            return token
        token = secrets.token_urlsafe(24)
        statefs.atomic_write(path, json.dumps({"version": PROTOCOL_VERSION, "token": token}) + "\n")
    return token


# ---- the client ------------------------------------------------------------------------------------


def spawn_gateway(state: Path) -> subprocess.Popen[bytes]:
    """Start `exechost gateway run` detached (own session, output to gateway.log), by module name so
    engine/ never imports runner/."""
    statefs.ensure_private_dir(state)
    log = state / "gateway.log"
    statefs.refuse_symlink(log)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, statefs.FILE_MODE)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "runner", "gateway", "run"],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env={**os.environ, "OPENCLAW_STATE_DIR": str(state)},
        )
    finally:
        os.close(fd)


class ControlClient:
    """One authenticated connection to the gateway: concurrent requests matched by id, plus pushed events."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, welcome: Welcome) -> None:
        self._reader = reader
        self._writer = writer
        self.server_pid = welcome.pid
        self._next_id = 0
        self._pending: dict[RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()
        self._listeners: list[Callable[[Event], None]] = []
        self._closed = False
        self.close_reason: str | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    # -- connecting

    @classmethod
    async def connect(
        cls,
        state_dir: Path | None = None,
        *,
        client: str = "cli",
        name: str = "",
        autostart: bool = True,
        start_timeout: float = 15.0,
        token: str | None = None,
    ) -> ControlClient:
        """Connect and handshake; when nothing answers and `autostart`, start a gateway (one only,
        serialised by a lock across processes) and wait for it."""
        state = state_dir or statefs.state_dir()
        try:
            return await cls._try_connect(state, client, name, token)
        except GatewayUnavailable:
            if not autostart:
                raise
        return await cls._start_and_connect(state, client, name, token, start_timeout)

    @classmethod
    async def _try_connect(cls, state: Path, client: str, name: str, token: str | None) -> ControlClient:
        path = socket_path(state)
        if len(os.fsencode(path)) > SUN_PATH_MAX:
            raise GatewayUnavailable(f"socket path too long ({len(os.fsencode(path))} bytes): {path}")
        try:
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_FRAME_BYTES + 1)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise GatewayUnavailable(f"no gateway is listening on {path} ({exc.strerror})") from None
        except OSError as exc:
            raise GatewayUnavailable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        secret = token or read_token(state)
        if not secret:
            writer.close()
            raise GatewayUnavailable(f"no gateway token in {token_path(state)}")
        try:
            writer.write(encode_frame(Hello(token=secret, client=client, name=name or client)))
            await writer.drain()
            line = await asyncio.wait_for(read_frame_line(reader), HANDSHAKE_TIMEOUT_S)
            frame = decode_frame(line)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ProtocolError) as exc:
            writer.close()
            raise GatewayUnavailable(
                f"handshake with the gateway failed: {exc or type(exc).__name__}"
            ) from None
        if isinstance(frame, ErrorFrame):
            writer.close()
            raise RemoteError(frame.code, frame.message)
        if not isinstance(frame, Welcome) or frame.version != PROTOCOL_VERSION:
            writer.close()
            raise RemoteError("version", f"gateway speaks an unexpected protocol: {frame!r}")
        return cls(reader, writer, frame)

    @classmethod
    async def _start_and_connect(
        cls, state: Path, client: str, name: str, token: str | None, start_timeout: float
    ) -> ControlClient:
        statefs.ensure_private_dir(state)
        lock_path = state / "gateway.start.lock"
        statefs.refuse_symlink(lock_path)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, statefs.FILE_MODE)
        deadline = time.monotonic() + start_timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise GatewayUnavailable(
                            "timed out waiting for another client starting the gateway"
                        ) from None
                    await asyncio.sleep(0.02)
            # Whoever held the lock before us may have started it already.
            with contextlib.suppress(GatewayUnavailable):
                return await cls._try_connect(state, client, name, token)
            proc = spawn_gateway(state)
            last = "gateway did not start"
            while time.monotonic() < deadline:
                try:
                    return await cls._try_connect(state, client, name, token)
                except GatewayUnavailable as exc:
                    last = str(exc)
                if proc.poll() is not None:
                    raise GatewayUnavailable(
                        f"gateway exited with code {proc.returncode}; see {state / 'gateway.log'}"
                    )
                await asyncio.sleep(0.03)
            raise GatewayUnavailable(f"{last} (waited {start_timeout:.0f} s; see {state / 'gateway.log'})")
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- traffic

    async def _read_loop(self) -> None:
        reason = "connection closed by the gateway"
        try:
            while True:
                frame = decode_frame(await read_frame_line(self._reader))
                if isinstance(frame, Response):
                    fut = self._pending.pop(frame.id, None) if frame.id is not None else None
                    if fut is not None and not fut.done():
                        if frame.ok:
                            fut.set_result(frame.result or {})
                        else:
                            err = frame.error or {}
                            fut.set_exception(RemoteError(err.get("code", "error"), err.get("message", "")))
                elif isinstance(frame, Event):
                    for listener in list(self._listeners):
                        listener(frame)
                    self._events.put_nowait(frame)
                elif isinstance(frame, ErrorFrame):
                    reason = f"{frame.code}: {frame.message}"
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except ProtocolError as exc:
            reason = f"protocol error from the gateway: {exc}"
        finally:
            self._closed = True
            self.close_reason = reason
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(reason))
            self._pending.clear()
            self._events.put_nowait(None)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and await its response; raises RemoteError for `ok: false`."""
        if self._closed:
            raise ConnectionError(self.close_reason or "connection closed")
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            self._writer.write(encode_frame(Request(id=rid, method=method, params=params or {})))
            await self._writer.drain()
        except BaseException:
            self._pending.pop(rid, None)
            raise
        return await fut

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call `listener` for every pushed event, in arrival order (in addition to `events()`)."""
        self._listeners.append(listener)

    async def subscribe(self, topics: list[str] | tuple[str, ...] = TOPICS) -> dict[str, Any]:
        return await self.request("subscribe", {"topics": list(topics)})

    async def events(self) -> AsyncIterator[Event]:
        """Pushed events until the connection closes."""
        while True:
            ev = await self._events.get()
            if ev is None:
                self._events.put_nowait(None)
                return
            yield ev

    @property
    def closed(self) -> bool:
        return self._closed

    async def wait_closed(self) -> str:
        """Return (with the reason) once the gateway side of the connection is gone."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._reader_task)
        return self.close_reason or "connection closed"

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader_task

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
