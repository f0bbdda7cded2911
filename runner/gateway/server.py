"""The gateway's control socket: bind safely, authenticate peers, route frames to one handler per verb."""

from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
import signal
import stat
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import fairpool, pathtrust, statefs, unixsock
from engine.commands import gatewaydirs, hostoutside
from engine.errors import ExecHostError
from engine.protocol.frames import (
    HANDSHAKE_TIMEOUT_S,
    OPERATOR_TOKEN_NAME,
    ErrorFrame,
    Hello,
    ProtocolError,
    RequestId,
    Response,
    Welcome,
    ensure_token,
    socket_path,
)
from engine.protocol.requests import Message
from engine.protocol.stopped import clear_stop
from engine.redact import scrub
from engine.tools import exec_host
from runner.gateway import handshake, limits, pidlock, procvisible
from runner.gateway.connection import Connection
from runner.gateway.credwatch import CredentialWatch
from runner.gateway.handlers import HANDLERS
from runner.gateway.handlers.common import agent_id
from runner.gateway.liveprincipal import proof_holds
from runner.gateway.pidlock import GatewayBusy
from runner.gateway.services import Services
from runner.gateway.tokenfiles import CredentialFiles, GatewayTokens
from runner.gateway.typedreq import typed_request

log = logging.getLogger("exechost.gateway")

MAX_IN_FLIGHT = 512  # concurrent requests per connection; reading pauses beyond this
MAX_BAD_FRAMES = 8
SOCKET_CHECK_SEC = 2.0  # how often the daemon checks that its socket file is still its own
DRAIN_S = 1.0  # how long a client that is being cut off may keep sending before the close


class HostHomeError(Exception):
    """$HOME is not the home host views would protect (engine.commands.hostoutside.home_refused)."""


class GatewayServer(CredentialWatch):
    """Owns the socket, the pid lock and the services; `start()` then `wait_stopped()`."""

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        config_path: str | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
        approval_timeout_ms: int | None = None,
    ) -> None:
        # Resolved once, and used as resolved from here on (in this process, whoever asks state_dir()):
        # a link on the named way, another account's in a sticky dir, may be re-pointed while the gateway
        # runs; its tokens, helpers and config stay in the dir judged at start (fresh round 17 c).
        self._named_state_dir: Path | None = state_dir or statefs.state_dir()
        self.state_dir = statefs.pin_state_dir(self._named_state_dir)
        self.socket_path = socket_path(self.state_dir)
        self.handshake_timeout = handshake_timeout
        try:
            self.services = Services(
                self.state_dir, config_path=config_path, approval_timeout_ms=approval_timeout_ms, server=self
            )
        except BaseException:  # (a refused config): the pin goes with the gateway that was never made
            self._unpin()
            raise
        self._server: asyncio.AbstractServer | None = None
        self._lock_fd: int | None = None
        self._stopped = asyncio.Event()
        # gateway.json and operator.json as they are now: looked at (stat) at every handshake, request and
        # recheck, so a replaced token stops at once and its live holders are dropped (tokenfiles).
        self._tokens = GatewayTokens(self.state_dir)
        self._tokens_seen = 0  # the tokens' generation the last recheck was started for
        self._credentials = CredentialFiles(self.state_dir)
        # By (which socket, peer uid): connections not yet authenticated. Per socket too: every host command
        # runs as the gateway's uid and can reach the agents' socket (its dir is read-only in the host view,
        # the socket reachable), so its silent connections there must not take the main socket's slots,
        # where the operator's console and CLI say hello as that same uid (fresh round 8 o).
        self._handshaking: Counter[tuple[bool, int]] = Counter()
        self._agent_conns: dict[str, set[Connection]] = {}  # each agent's live connections (backlog cap)
        self._intake = limits.Intake()  # bytes of requests being handled, per connection and per agent
        self._revocations = 0  # revokes done: a handshake that overlapped one looks its credential up again
        self._revoking: set[str] = set()  # agents being revoked now: a handshake as one of them is refused
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rechecks: set[asyncio.Task[Any]] = set()  # re-decisions a change started (and their drops)
        self.started_at = time.time()
        self.connections: set[Connection] = set()
        self._socket_ino: int | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._files_watch: asyncio.Task[None] | None = None
        # The agents' socket ([gateway] agentSocket): other Unix accounts, admitted by group, mapped by uid.
        self._agents_server: asyncio.AbstractServer | None = None
        self.agents_socket_path: Path | None = None
        self._agents_ino: int | None = None

    # -- lifecycle

    @property
    def tokens(self) -> GatewayTokens:
        """The gateway's and the operator's tokens as their files hold them now (tokenfiles)."""
        return self._tokens

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            # A start that failed (a refused state dir, a held lock) leaves nothing process-wide behind: the
            # sandbox manager serves every gateway of this process, and its session host was this one's.
            self.services.release_holders()
            self._unpin()
            raise

    async def _start(self) -> None:
        refused = hostoutside.home_refused()
        if refused is not None:
            raise HostHomeError(refused)
        # Trusted only when made now or recorded by a gateway of this account (a host run may have planted
        # it, tokens and all: fresh round 15 b), and recorded before anything is written in it: every
        # other gateway of this account covers it in its host views (fresh round 14 c).
        gatewaydirs.adopt(hostoutside.home_dir(), str(self.state_dir), resolved=True)
        statefs.ensure_private_dir(self.state_dir)
        if len(os.fsencode(self.socket_path)) > unixsock.SUN_PATH_MAX:
            raise GatewayBusy(f"socket path too long (> {unixsock.SUN_PATH_MAX} bytes): {self.socket_path}")
        self._lock_fd = pidlock.take_lock(self.state_dir)
        try:
            pidlock.check_stale_socket(self.socket_path)
            ensure_token(self.state_dir)  # made on first start; read at each handshake from then on
            ensure_token(self.state_dir, OPERATOR_TOKEN_NAME)
            self._tokens_seen = self._tokens.generation()
            self._credentials.changed()  # the first look: what a change is measured from
            # A stamped proof is decided again at each point of use against the config now (liveprincipal),
            # the restored asks' included.
            self.services.approvals.generations.holds = lambda key: proof_holds(
                key, self.services.config(), self._tokens, self.services.store.socket_token_now
            )
            await self.services.start()
            # what this gateway's views hide because its config names it, hidden in every other's too
            exec_host.config_secrets(self.services.config())
            self._loop = asyncio.get_running_loop()
            self.services.live_config.on_change = self.config_changed
            old = os.umask(0o177)  # the socket is born 0600: no window where others could connect
            try:
                self._server = await asyncio.start_unix_server(
                    self._on_connect, path=str(self.socket_path), limit=limits.READ_CHUNK
                )
            finally:
                os.umask(old)
            try:
                os.chmod(self.socket_path, 0o600)
                self._socket_ino = os.lstat(self.socket_path).st_ino
            except FileNotFoundError:
                # removed between its bind and this look (its state dir going away): no inode is ours, so the
                # watchdog stops this gateway cleanly, as it does for a socket removed any time later
                self._socket_ino = -1
            clear_stop(self.state_dir)  # a gateway runs again: clients may start the next one themselves
            await self._start_agents_socket()
            said = procvisible.warning(self.services.config())
            if said is not None:  # (the log is the gateway's stderr)
                log.warning(said)
        except BaseException:
            if self._server is not None:
                self._server.close()
                self._server = None
                with contextlib.suppress(OSError):
                    os.unlink(self.socket_path)
            self._release_lock()
            raise
        self._watchdog = asyncio.get_running_loop().create_task(self._watch_socket())
        self._files_watch = asyncio.get_running_loop().create_task(self._watch_files())
        self.services.adopt_in_background()  # listening first: the kept sessions follow (issue 37)
        self.started_at = time.time()
        log.info("gateway listening on %s (pid %d)", self.socket_path, os.getpid())

    async def _start_agents_socket(self) -> None:
        """`[gateway] agentSocket`: a second socket, 0660 and group `agentGroup`, in a directory only the
        gateway's account can write (0750, same group). The state dir stays 0700: an agent's account can
        reach this socket and nothing of the operator's state."""
        gw = self.services.config().gateway
        if not gw.agent_socket or not gw.agent_group:
            return
        gid = grp.getgrnam(gw.agent_group).gr_gid
        path = Path(gw.agent_socket)
        parent = path.parent
        statefs.refuse_symlink(parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(parent, 0o750)
        st = os.lstat(parent)
        if st.st_uid != os.geteuid() or not stat.S_ISDIR(st.st_mode):
            raise GatewayBusy(f"{parent}: the agents' socket directory must be a directory the gateway owns")
        # Judged as a state dir is, by name and as it resolves, BEFORE it is changed: an account that may
        # write a dir above it moves ours aside and serves the path itself to every agent account, and a
        # dir of ours others may write (a root gateway's /tmp, sticky 1777) is shared, never ours to take
        # over for the agents' group (fresh round 17 c).
        named, real = os.path.abspath(parent), os.path.realpath(parent)
        why = pathtrust.strict_hold(real, os.geteuid())
        if not why and named != real:  # a link on the way is another name to judge: the real one is asked for
            why = f"{named} resolves to {real} (a link on the way); name {real} itself"
        if why:
            raise GatewayBusy(
                f"{path}: the agents' socket directory is not this account's alone: {why}; name a dir of "
                "its own (the gateway makes it), e.g. /run/exechost/agents.sock"
            )
        # chown first, then the mode: at no moment may another account write here or a stranger enter.
        os.chown(parent, -1, gid)
        os.chmod(parent, 0o750)  # noqa: S103 - group-readable on purpose: the agents' group
        self.agents_socket_path = path
        problem = unixsock.socket_path_problem(path)
        if problem is not None:
            raise GatewayBusy(f"{path}: socket path {problem}; refusing to replace it")
        if path.exists():
            if unixsock.socket_is_live(path, timeout=1.0):
                raise GatewayBusy(f"another gateway is answering on {path}")
            os.unlink(path)
        old = os.umask(0o177)  # born 0600, then opened to the group once its group is set
        try:
            self._agents_server = await asyncio.start_unix_server(
                lambda r, w: self._on_connect(r, w, agents_socket=True),
                path=str(path),
                limit=limits.READ_CHUNK,
            )
        finally:
            os.umask(old)
        os.chown(path, -1, gid)
        os.chmod(path, 0o660)
        self._agents_ino = os.lstat(path).st_ino
        log.info("agents' socket on %s (group %s)", path, gw.agent_group)

    def request_stop(self) -> None:
        self._stopped.set()

    async def _watch_socket(self) -> None:
        """A daemon whose socket file was removed (or its state dir deleted) can never be reached again,
        and would keep its sessions running forever: it stops instead."""
        while True:
            await asyncio.sleep(SOCKET_CHECK_SEC)
            try:
                ino: int | None = os.lstat(self.socket_path).st_ino
            except OSError:
                ino = None
            if ino != self._socket_ino:
                log.warning("%s was removed or replaced; stopping", self.socket_path)
                self.request_stop()
                return

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
        await self.stop()

    async def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        for watch in (self._watchdog, self._files_watch):
            if watch is not None:
                watch.cancel()
        with contextlib.suppress(OSError):
            if os.lstat(self.socket_path).st_ino == self._socket_ino:  # never remove a successor's socket
                os.unlink(self.socket_path)
        if self._agents_server is not None and self.agents_socket_path is not None:
            self._agents_server.close()
            with contextlib.suppress(OSError):
                if os.lstat(self.agents_socket_path).st_ino == self._agents_ino:
                    os.unlink(self.agents_socket_path)
        for conn in list(self.connections):
            for task in list(conn.tasks):
                task.cancel()
            await conn.finish()
        await self.services.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2.0)
        self._release_lock()
        self._unpin()
        self._stopped.set()

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            pidlock.release_lock(self._lock_fd)
            self._lock_fd = None

    def _unpin(self) -> None:
        """Once: this gateway no longer holds its state dir's resolved path for the process."""
        named, self._named_state_dir = self._named_state_dir, None
        if named is not None:
            statefs.unpin_state_dir(named)

    # -- connections

    async def _on_connect(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, agents_socket: bool = False
    ) -> None:
        sock = writer.get_extra_info("socket")
        peer = unixsock.peer_info(sock)
        if peer is None:
            writer.close()
            return
        pid, uid = peer.pid, peer.uid
        mapped: str | None = None  # the agent this peer's Unix account is (agents' socket only)
        other_account = uid != os.geteuid()
        if other_account and not agents_socket:
            log.warning("refused peer pid %d uid %d (gateway uid %d)", pid, uid, os.geteuid())
            await handshake.reject(writer, "auth", f"peer uid {uid} is not the gateway's uid {os.geteuid()}")
            return
        slot = (agents_socket, uid)
        if self._handshaking[slot] >= limits.MAX_HANDSHAKING_PER_UID:
            why = f"too many connections from uid {uid} still saying hello"
            await handshake.reject(writer, "overload", why)
            return
        self._handshaking[slot] += 1
        revocations = self._revocations
        try:
            frames = limits.FrameReader(reader)
            hello = await handshake.read_hello(frames, writer, self.handshake_timeout)
            if hello is not None and other_account:
                # Decided after its hello is read, so the refusal reaches the client instead of racing
                # its write. The mapping is read from the current config: an edit applies to new connections.
                mapped = self.services.config().agent_for_uid(uid)
                if mapped is None:
                    log.warning("refused peer pid %d uid %d: no agent has this uid", pid, uid)
                    why = "is not mapped to an agent ([[agents.list]] uid or user)"
                    await handshake.reject(writer, "auth", f"peer uid {uid} {why}")
                    return
            who = None if hello is None else await self._principal(writer, hello, mapped)
            if hello is not None and not other_account:
                self._tokens_now()  # its look may have found a replaced token: the old one's holders go
            if hello and who and await self._revoked_meanwhile(hello, who, revocations):
                await handshake.reject(writer, "auth", "invalid or revoked agent credential")
                who = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug, not the client's fault: it is told (never just dropped) and the log says so once.
            log.exception("handshake failed for peer pid %d uid %d", pid, uid)
            await handshake.reject(writer, "auth", scrub(f"handshake failed: {type(exc).__name__}"))
            return
        finally:
            self._handshaking[slot] -= 1
            if not self._handshaking[slot]:
                del self._handshaking[slot]
        if hello is None or who is None:
            return
        # Admitted by who it proved to be, with no await between the count and the add.
        admitted = [(c.operator, c.agent) for c in self.connections]
        full = limits.refusal(bool(hello.operator), who[0], admitted)
        if full is not None:
            log.warning("refused peer pid %d uid %d: %s", pid, uid, full)
            await handshake.reject(writer, "overload", full)
            return
        conn = Connection(writer, hello, pid, on_close=self._closed)
        conn.agent, conn.credential = who
        conn.presented = hello.credential
        conn.peer_uid = uid
        conn.other_account = other_account
        conn.config_generation = self.services.live_config.generation
        conn.tokens_generation = self._tokens.seen()  # what the handshake just checked its tokens against
        if not conn.operator:
            conn.peers = self._agent_conns.setdefault(conn.agent, set())
            conn.peers.add(conn)
        self.connections.add(conn)
        conn.send(Welcome(pid=os.getpid(), agent="" if conn.operator else conn.agent))
        try:
            await self._serve(conn, frames)
        finally:
            self._intake.give_back(conn, frames.held, request=False)  # a frame it never finished
            self.connections.discard(conn)
            if conn.peers is not None:
                conn.peers.discard(conn)
                if not conn.peers:
                    self._agent_conns.pop(conn.agent, None)
            # Requests already running are kept: an exec's detached work belongs to the gateway.
            await conn.finish()

    def _closed(self, conn: Connection) -> None:
        self.services.connection_closed(conn)
        self._intake.wake()  # its reader may be waiting for room

    async def _principal(
        self, writer: asyncio.StreamWriter, hello: Hello, mapped: str | None
    ) -> tuple[str, str] | None:
        return await handshake.principal(
            writer,
            hello,
            mapped,
            tokens=self._tokens,
            state_dir=self.state_dir,
            config=self.services.config,
        )

    async def _serve(self, conn: Connection, frames: limits.FrameReader) -> None:
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        bad = 0
        reader = frames.reader

        async def charge(size: int) -> bool:  # a frame's bytes as they arrive (limits.FrameReader)
            return await self._intake.take(conn, size, request=False)

        if frames.partial:  # what arrived with the hello
            if not await charge(len(frames.partial)):
                return
            frames.held = len(frames.partial)
        while not conn.closed:
            if conn.reading_paused:  # it does not drain what waits for it: read its next request later
                await conn.wait_room()
                continue
            try:
                line = await frames.line(charge)
            except ProtocolError as exc:
                conn.send(ErrorFrame(code="frame", message=str(exc)))
                await _drain_input(reader)
                return
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                return
            # Its bytes stay charged (frames.held) until its request's charge replaces them
            if conn.revoked:  # read before the revoke paused the transport: never acted upon
                return
            if conn.reading_paused:  # arrived as it stopped draining: acted upon once it drains
                await conn.wait_room()
                if conn.closed or conn.revoked:
                    return
            await slots.acquire()  # before it is decoded: a request waiting for a slot holds its frame alone
            typed: Response | tuple[RequestId, str, Message] | None
            try:
                typed = typed_request(line)
            except ProtocolError as exc:
                slots.release()
                self._frame_done(conn, frames, len(line))
                bad += 1
                error = {"code": "bad_frame", "message": str(exc)}
                conn.send(Response(id=exc.request_id, ok=False, error=error))
                if bad >= MAX_BAD_FRAMES:
                    conn.send(ErrorFrame(code="frame", message="too many malformed frames"))
                    await _drain_input(reader)
                    return
                continue
            # Charged what it holds while it runs: its typed request's values, or its frame's bytes if more
            # (limits.REQUEST_OVERHEAD_BYTES). What it decodes to is not held while it waits for room, only
            # its frame, charged: it is decoded again once the charge is taken.
            size = len(line) if isinstance(typed, Response) else max(len(line), typed[2].held_bytes())
            if not self._intake.fits_now(conn, size, held=len(line)):
                typed = None
            if not await self._intake.take(conn, size, held=len(line)):
                slots.release()
                return
            frames.held -= len(line)
            if typed is None:
                typed = typed_request(line)
            if conn.revoked or not self._still_configured(conn):
                self._intake.give_back(conn, size)
                slots.release()
                if not conn.revoked:
                    await self._drop([conn])
                return
            task = asyncio.get_running_loop().create_task(self._dispatch(conn, typed))
            conn.tasks.add(task)
            task.add_done_callback(self._request_done(conn, slots, size))

    def _frame_done(self, conn: Connection, frames: limits.FrameReader, size: int) -> None:
        """A frame that runs nothing: its bytes are no longer held."""
        frames.held -= size
        self._intake.give_back(conn, size, request=False)

    def _request_done(
        self, conn: Connection, slots: asyncio.Semaphore, size: int
    ) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            conn.tasks.discard(task)
            slots.release()
            self._intake.give_back(conn, size)

        return done

    async def _dispatch(self, conn: Connection, typed: Response | tuple[RequestId, str, Message]) -> None:
        """Every request is answered exactly once: its result, its deliberate error, or `internal` (logged
        once with its traceback) for anything else a handler raises. Its params were decoded once, by
        `typed_request`, into the method's typed request (a bad field: `bad_params` naming the method and the
        field, answered here). A revoked connection, being closed, starts nothing more."""
        if conn.revoked:
            return
        if isinstance(typed, Response):
            conn.send(typed)
            return
        rid, method, msg = typed
        if (
            not conn.operator
        ):  # its blocking work queues as its agent's (engine.fairpool), never the default pool
            fairpool.act_as(str(conn.agent), conn.fair_key)
        try:
            if not conn.operator and msg.agent_id:
                # Every verb alike: an agent's request naming another agent is refused, never honoured.
                agent_id(conn, msg.agent_id)
            await self.services.sessions_ready(msg)
            result: dict[str, Any] = await HANDLERS[method](self.services, conn, msg)
        except ExecHostError as exc:  # deliberate: its code tells the client what kind of failure it is
            # Every error leaves scrubbed of the secrets this process holds (tokens, door URLs).
            response = Response(id=rid, ok=False, error={"code": exc.code, "message": scrub(str(exc))})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("handler %s failed", method)
            text = scrub(f"{type(exc).__name__}: {exc}")
            response = Response(id=rid, ok=False, error={"code": "internal", "message": text})
        else:
            response = Response(id=rid, ok=True, result=result)
        conn.send(response)


async def _drain_input(reader: asyncio.StreamReader) -> None:
    """Before closing on a client: swallow what it still sends (briefly). Closing a Unix socket with unread
    input resets the connection, and the client's next write then fails before it reads our error frame."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_S):
            while await reader.read(1 << 16):
                pass


async def run_gateway(
    state_dir: Path | None = None, *, config_path: str | None = None, ready: asyncio.Event | None = None
) -> None:
    """Serve until SIGTERM/SIGINT or a `shutdown` request; then stop gracefully."""
    statefs.settle_umask()  # before anything it starts inherits the umask of whoever started it
    server = GatewayServer(state_dir, config_path=config_path)
    # what it starts (its session host, helpers) names the dir it judged, not a path through a link
    os.environ["OPENCLAW_STATE_DIR"] = str(server.state_dir)
    server.services.hold_sessions()  # the daemon's sessions outlive it (engine.sessions.host)
    await server.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    if ready is not None:
        ready.set()
    try:
        await server.wait_stopped()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
