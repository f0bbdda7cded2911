"""The control-socket client: connect (starting a gateway when none answers), request, receive events."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from engine import principals, statefs
from engine.protocol.daemonenv import daemon_env
from engine.protocol.frames import (
    HANDSHAKE_TIMEOUT_S,
    MAX_FRAME_BYTES,
    ErrorFrame,
    Event,
    GatewayNotAnswering,
    GatewayUnavailable,
    ProtocolError,
    RemoteError,
    Request,
    RequestId,
    Response,
    Welcome,
    decode_frame,
    encode_frame,
    read_frame_line,
)
from engine.protocol.handshake import (
    dial_path,
    foreign_server,
    gateway_secret,
    hello,
    identity,
    shared_socket,
    welcome_or_raise,
)
from engine.protocol.methods import TOPICS
from engine.protocol.requests import ApprovalsPending, Message, SessionsList, Subscribe, method_and_params
from engine.protocol.stopped import read_stop, stopped_error

# Who this client is stays with this client: the daemon serves every principal, so it starts with none.
_CLIENT_IDENTITY_ENV = (principals.CREDENTIAL_ENV, "EXECHOST_AGENT_TOKEN_FILE", principals.SOCKET_ENV)


def _daemon_env() -> dict[str, str]:
    """The starting client's env as the daemon may take it: named keys only (engine.protocol.daemonenv)."""
    env = daemon_env(os.environ)
    return {k: v for k, v in env.items() if k not in _CLIENT_IDENTITY_ENV}


def spawn_gateway(state: Path) -> subprocess.Popen[bytes]:
    """Start `exechost gateway run` detached (own session, output to gateway.log), by module name so
    engine/ never imports runner/. `-P`: the cwd is not put on its import path (every host run could
    write `/`, and the host view refuses a gateway that imports from a dir runs can write)."""
    statefs.ensure_private_dir(state)
    log = state / "gateway.log"
    statefs.refuse_symlink(log)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, statefs.FILE_MODE)
    try:
        return subprocess.Popen(
            [sys.executable, "-P", "-m", "runner", "gateway", "run"],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env={**_daemon_env(), "OPENCLAW_STATE_DIR": str(state)},
        )
    finally:
        os.close(fd)


def _last_line(log: Path) -> str:
    """The daemon's last words (a config error, a refused file), so the caller sees why at once."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][-400:] if lines else "no log output"


# Waits before each retry of a handshake the gateway cut off unanswered (ControlClient._settled_connect).
HANDSHAKE_RETRY_DELAYS = (0.1, 0.5)


class HandshakeCut(GatewayUnavailable):
    """The gateway closed the connection without answering its hello (nothing was acted upon)."""


class ControlClient:
    """One authenticated connection to the gateway: concurrent requests matched by id, plus pushed events."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, welcome: Welcome) -> None:
        self._reader = reader
        self._writer = writer
        self.server_pid = welcome.pid
        self.agent = welcome.agent  # who the gateway takes this connection to be ("" = operator)
        self.started_gateway = False  # this connect started the gateway (callers may say so)
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
        operator: bool = False,
        agent: str | None = None,
        credential: str | None = None,
    ) -> ControlClient:
        """Connect and handshake; when nothing answers and `autostart`, start a gateway (one only,
        serialised by a lock across processes) and wait for it.

        Who the connection is (never a request field): the operator (`operator`), an agent by its
        credential (`credential`, else $EXECHOST_AGENT_TOKEN / $EXECHOST_AGENT_TOKEN_FILE, else — on the
        operator's own account — `agent`'s file under the state dir), else `main`. With
        $EXECHOST_GATEWAY_SOCKET (the agents' socket) the peer's Unix account says who it is."""
        # Resolved once: the token read and the socket dialled are in one dir, whatever a link on the named
        # way (another account's, in a sticky dir) is re-pointed to meanwhile (fresh round 17 c).
        state = Path(os.path.realpath(state_dir or statefs.state_dir()))
        # The operator role is claimed only by the console and the operator's CLI verbs, never by agents.
        role, cred = identity(state, operator=operator, agent=agent, credential=credential)
        if shared_socket(operator):
            autostart = False  # another account's gateway: never start one of our own
        try:
            return await cls._settled_connect(state, client, name, token, role, cred)
        except GatewayNotAnswering:
            raise  # one is there: a second would only fail on its lock
        except GatewayUnavailable:
            if not autostart:
                raise
        return await cls._start_and_connect(state, client, name, token, start_timeout, role, cred)

    @classmethod
    async def _settled_connect(
        cls, state: Path, client: str, name: str, token: str | None, role: str = "", cred: str = ""
    ) -> ControlClient:
        """`_try_connect`, again when the gateway cut the handshake off before answering it: a gateway whose
        loop stalled past its hello timeout (a restart under load) closes with the hello unread, and the
        client sees a reset. Nothing is acted upon before a handshake ends, so a retry is always safe."""
        for delay in HANDSHAKE_RETRY_DELAYS:
            try:
                return await cls._try_connect(state, client, name, token, role, cred)
            except HandshakeCut:
                await asyncio.sleep(delay)
        return await cls._try_connect(state, client, name, token, role, cred)

    @classmethod
    async def _try_connect(
        cls, state: Path, client: str, name: str, token: str | None, role: str = "", cred: str = ""
    ) -> ControlClient:
        path = dial_path(state, operator=bool(role))
        try:
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_FRAME_BYTES + 1)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise GatewayUnavailable(f"no gateway is listening on {path} ({exc.strerror})") from None
        except OSError as exc:
            raise GatewayUnavailable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        # Asked of the kernel before any token leaves: the server is this account's (or root's), as the
        # gateway asks of its clients and of its session host; another account's socket at this path
        # (a state dir it may write) gets nothing. The agents' socket of another account's gateway is
        # that account's by design and takes no token.
        foreign = foreign_server(writer.get_extra_info("socket"), path, operator=bool(role))
        if foreign is not None:
            writer.close()
            raise foreign
        try:
            secret = gateway_secret(state, token, operator=bool(role))
        except GatewayUnavailable:
            writer.close()
            raise
        try:
            writer.write(encode_frame(hello(secret, client, name, role, cred)))
            with contextlib.suppress(OSError):  # refused before our hello: its error frame is still there
                await writer.drain()
            line = await asyncio.wait_for(read_frame_line(reader), HANDSHAKE_TIMEOUT_S)
            frame = decode_frame(line)
        except TimeoutError:
            writer.close()
            raise GatewayNotAnswering(
                f"the gateway on {path} accepted the connection but did not answer within "
                f"{HANDSHAKE_TIMEOUT_S:g} s (stopped, e.g. by SIGSTOP, or overloaded); "
                "try again once it is back"
            ) from None
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
            writer.close()
            cut = isinstance(exc, (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError))
            raise (HandshakeCut if cut else GatewayUnavailable)(
                f"handshake with the gateway failed: {exc or type(exc).__name__}"
            ) from None
        try:
            welcome = welcome_or_raise(frame)
        except RemoteError as exc:
            writer.close()
            if exc.code == "handshake" and str(exc.message).startswith("no hello within"):
                raise HandshakeCut(
                    f"the gateway did not read this client's hello in time: {exc.message}"
                ) from None
            raise
        return cls(reader, writer, welcome)

    @classmethod
    async def _start_and_connect(
        cls,
        state: Path,
        client: str,
        name: str,
        token: str | None,
        start_timeout: float,
        role: str = "",
        cred: str = "",
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
                return await cls._try_connect(state, client, name, token, role, cred)
            stop = read_stop(state)
            if stop is not None:  # the operator's decision: wait for a gateway, never start one behind it
                raise stopped_error(state, stop)
            proc = spawn_gateway(state)
            last = "gateway did not start"
            while time.monotonic() < deadline:
                try:
                    connected = await cls._try_connect(state, client, name, token, role, cred)
                    connected.started_gateway = True
                    return connected
                except GatewayUnavailable as exc:
                    last = str(exc)
                if proc.poll() is not None:
                    log = state / "gateway.log"
                    raise GatewayUnavailable(
                        f"gateway exited with code {proc.returncode}: {_last_line(log)}; see {log}"
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

    async def request(self, method: str | Message, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request (a typed message, engine.protocol.requests) and await its response; raises
        RemoteError for `ok: false`."""
        method, params = method_and_params(method, params)
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

    async def pending_approvals(self) -> list[dict[str, Any]]:
        """Every pending approval, oldest first: the gateway pages the list to keep frames under the cap."""
        rows: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await self.request(ApprovalsPending(cursor=cursor))
            rows += page.get("approvals") or []
            if not page.get("next"):
                return rows
            cursor = page["next"]

    async def list_sessions(self, query: SessionsList | None = None) -> list[dict[str, Any]]:
        """Every row of `sessions.list` (newest first), fetched page by page under the frame cap."""
        rows: list[dict[str, Any]] = []
        page_query = query or SessionsList()
        while True:
            page = await self.request(page_query)
            rows += page.get("sessions") or []
            if not page.get("next"):
                return rows
            page_query = dataclasses.replace(page_query, cursor=page["next"])

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call `listener` for every pushed event, in arrival order (in addition to `events()`)."""
        self._listeners.append(listener)

    async def subscribe(self, topics: list[str] | tuple[str, ...] = TOPICS) -> dict[str, Any]:
        return await self.request(Subscribe(topics=list(topics)))

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
