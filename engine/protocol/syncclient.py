"""A blocking control-socket client for one-shot CLI verbs: no asyncio, so `exechost exec -- true` does not
pay ~40 ms of event-loop imports to send one request (issue 19). It never starts a gateway: when nothing
answers, the caller falls back to the asyncio client, which does."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import statefs
from engine.protocol.frames import (
    HANDSHAKE_TIMEOUT_S,
    MAX_FRAME_BYTES,
    ErrorFrame,
    Event,
    GatewayNotAnswering,
    GatewayNotRunning,
    GatewayUnavailable,
    ProtocolError,
    RemoteError,
    Request,
    Response,
    decode_frame,
    encode_frame,
)
from engine.protocol.handshake import (
    dial_path,
    foreign_server,
    gateway_secret,
    hello,
    identity,
    welcome_or_raise,
)
from engine.protocol.requests import Message, method_and_params


class SyncClient:
    """One authenticated connection, one request at a time; pushed events go to the caller's callback."""

    def __init__(self, sock: socket.socket, pid: int, agent: str) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._next_id = 0
        self.server_pid = pid
        self.agent = agent

    @classmethod
    def connect(
        cls,
        state_dir: Path | None = None,
        *,
        client: str = "cli",
        name: str = "",
        operator: bool = False,
        agent: str | None = None,
        credential: str | None = None,
    ) -> SyncClient:
        """Connect and handshake, presenting the same proof as ControlClient.connect; GatewayUnavailable
        when no gateway answers (the caller may start one)."""
        # Resolved once: the token read and the socket dialled are in one dir (as ControlClient.connect).
        state = Path(os.path.realpath(state_dir or statefs.state_dir()))
        role, cred = identity(state, operator=operator, agent=agent, credential=credential)
        path = dial_path(state, operator=operator)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                sock.connect(str(path))
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                raise GatewayNotRunning(f"no gateway is listening on {path} ({exc.strerror})") from None
            except OSError as exc:
                raise GatewayUnavailable(f"cannot connect to {path}: {exc.strerror or exc}") from None
            foreign = foreign_server(sock, path, operator=operator)
            if foreign is not None:
                raise foreign
            secret = gateway_secret(state, None, operator=operator)
            self = cls(sock, 0, "")
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            try:
                # Refused before our hello is read: the gateway's error frame is still there to read.
                with contextlib.suppress(OSError):
                    sock.sendall(encode_frame(hello(secret, client, name, role, cred)))
                frame = decode_frame(self._line())
            except TimeoutError:
                raise GatewayNotAnswering(
                    f"the gateway on {path} accepted the connection but did not answer within "
                    f"{HANDSHAKE_TIMEOUT_S:g} s (stopped, e.g. by SIGSTOP, or overloaded); "
                    "try again once it is back"
                ) from None
            except (OSError, ConnectionError, ProtocolError) as exc:
                raise GatewayUnavailable(
                    f"handshake with the gateway failed: {exc or type(exc).__name__}"
                ) from None
            welcome = welcome_or_raise(frame)
        except BaseException:
            sock.close()
            raise
        self.server_pid, self.agent = welcome.pid, welcome.agent
        return self

    def _line(self) -> bytes:
        """One frame line; ConnectionError at EOF, ProtocolError past the cap."""
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                if len(line) > MAX_FRAME_BYTES:
                    raise ProtocolError(f"frame exceeds the {MAX_FRAME_BYTES}-byte cap")
                return line
            if len(self._buf) > MAX_FRAME_BYTES:
                raise ProtocolError(f"frame exceeds the {MAX_FRAME_BYTES}-byte cap")
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed by the gateway")
            self._buf += chunk

    def request(
        self,
        method: str | Message,
        params: dict[str, Any] | None = None,
        *,
        on_event: Callable[[Event], None] | None = None,
        tick: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its response (RemoteError for `ok: false`, ConnectionError when the
        gateway goes away). Events that arrive meanwhile go to `on_event`; `tick` runs about once a second
        while nothing arrives (a countdown on a terminal)."""
        method, params = method_and_params(method, params)
        self._next_id += 1
        rid = self._next_id
        self._sock.settimeout(None)
        self._sock.sendall(encode_frame(Request(id=rid, method=method, params=params or {})))
        self._sock.settimeout(1.0 if tick is not None else None)
        while True:
            try:
                frame = decode_frame(self._line())
            except TimeoutError:
                if tick is not None:
                    tick()
                continue
            except ProtocolError as exc:
                raise ConnectionError(f"protocol error from the gateway: {exc}") from None
            if isinstance(frame, Response) and frame.id == rid:
                if frame.ok:
                    return frame.result or {}
                err = frame.error or {}
                raise RemoteError(err.get("code", "error"), err.get("message", ""))
            if isinstance(frame, Event) and on_event is not None:
                on_event(frame)
            elif isinstance(frame, ErrorFrame):
                raise ConnectionError(f"{frame.code}: {frame.message}")

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
