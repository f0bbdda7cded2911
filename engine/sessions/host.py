"""The gateway's side of the session host (host_main.py): one connection, every held session over it.

`HostLauncher` starts (or re-attaches to) the state dir's session host and runs each gateway-host command
in it; each comes back as a `HostProcess`, the same `ProcessHandle` the session manager drives for a local
child. In `<state>/holders/` (0700), next to `host.sock`, each session keeps `<id>.json` (what it is),
`<id>.spool` (every output byte, framed) and `<id>.exit` (its end), all written by the host, and `<id>.done`
(written here once its end was reported). A new gateway adopts what it finds there (engine.sessions.adopt).
When the host cannot be started, commands run as plain children (a log line says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import statefs
from engine.commands.offargv import carried
from engine.sessions import host_io as wire
from engine.sessions import procs
from engine.sessions.hostlink import STREAM_OF, ChannelFactory, HostLink, open_host
from engine.sessions.launcher import DEFAULT_TERM, Launcher, ProcessHandle, RunSpec

log = logging.getLogger("exechost.sessions")

HOLDERS_DIR = "holders"
SPOOL_HEADER_SIZE = wire.SPOOL_HEADER.size
RESTART_EVERY_SEC = 5.0  # a host that died is started again for new commands, at most this often
HOST_DIED = "session host died"
HOST_LOST = "session host connection taken over by another gateway"
META_VERSION = 1
DEFAULT_SPOOL_CAP = 64 * 1024 * 1024


def stream_kind(stream: int) -> int:
    """The wire kind of a spool frame's stream byte."""
    return wire.OUT_KINDS[stream] if 0 <= stream < len(wire.OUT_KINDS) else wire.OUT_STDOUT


@dataclass(frozen=True)
class HeldPaths:
    """A held session's files in the holders dir."""

    directory: Path
    session_id: str

    def _p(self, suffix: str) -> Path:
        return self.directory / f"{self.session_id}.{suffix}"

    @property
    def meta(self) -> Path:
        return self._p("json")

    @property
    def spool(self) -> Path:
        return self._p("spool")

    @property
    def exit(self) -> Path:
        return self._p("exit")

    @property
    def ran(self) -> Path:
        """Written before a command runs as the gateway's own child (no host): it may have run."""
        return self._p("ran")

    @property
    def done(self) -> Path:
        """Written once a gateway recorded the end: the next one lists it without reporting it again."""
        return self._p("done")

    def read_done(self) -> dict[str, Any] | None:
        return _read_json(self.done)

    def read_exit(self) -> dict[str, Any] | None:
        return _read_json(self.exit)

    def remove(self) -> None:
        for path in (self.meta, self.spool, self.exit, self.done, self.ran):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        raw = statefs.read_text(path)
        data = json.loads(raw) if raw else None
    except (OSError, ValueError, statefs.StateFileError):
        return None
    return data if isinstance(data, dict) else None


def session_meta(session_id: str, spec: RunSpec) -> dict[str, Any]:
    """What a new gateway needs to list the session again (never the env: it may carry secrets)."""
    return {
        "version": META_VERSION,
        "sessionId": session_id,
        "command": spec.command,
        "cwd": spec.cwd,
        "scopeKey": spec.scope_key,
        "sessionKey": spec.session_key,
        "host": spec.host,
        "name": spec.name,
        "pty": spec.pty,
        "marker": spec.marker,
        "startedAt": spec.started_at or time.time_ns() // 1_000_000,
        "timeoutSec": spec.timeout_sec,
        "notifyOnExit": spec.notify_on_exit,
        "notifyOnExitEmptySuccess": spec.notify_on_exit_empty_success,
        "operator": spec.operator,
        "inputRefused": spec.input_refused,
        "inputRefusedUnlessFull": spec.input_refused_unless_full,
    }


class HostProcess:
    """The ProcessHandle of a session in the host (`link` set), or of one whose host is gone (`link=None`:
    its output is the spool, its end the exit file or "session host died")."""

    def __init__(
        self, paths: HeldPaths, link: HostLink | None, chan: int, *, pid: int | None, pty: bool, marker: str
    ) -> None:
        self.paths = paths
        self.pid = pid
        self.pty = pty
        self._marker = marker
        self._link = link
        self._chan = chan
        self._exit: asyncio.Future[tuple[int | None, str | None]] = asyncio.get_running_loop().create_future()
        self.ended_at: int | None = None
        self.end_reason: str | None = None
        self._eof = False
        self._stdin_closed = link is None
        self._closed = False
        self._queue: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        self._unread = 0  # bytes queued here from the live link, not yet read
        # Input sent to the host (or held there when we attached) and what it says it no longer holds:
        # the difference is what it keeps for this command, charged to the agent (engine.sessions.quota).
        self._in_sent = 0
        self._in_done = 0

    @property
    def live(self) -> bool:
        return self._link is not None

    # -- from the host
    def on_output(self, kind: int, data: bytes) -> None:
        if not self._eof:
            self._queue.put_nowait((STREAM_OF.get(kind, "stdout"), data))
            if self._link is not None:
                self._unread += len(data)
                self._link.queued_output(len(data))

    def on_input_done(self, done: int) -> None:
        self._in_done = max(self._in_done, done)

    def on_input_held(self, held: int) -> None:
        self._in_sent, self._in_done = max(0, held), 0

    @property
    def input_held(self) -> int:
        """Bytes of input the host keeps for this command, not yet read by it (0: none, or a host too
        old to tell, whose own per-session cap then bounds it)."""
        link = self._link
        if link is None or not link.input_done or self._exit.done():
            return 0
        return max(0, self._in_sent - self._in_done)

    def on_eof(self) -> None:
        if not self._eof:
            self._eof = True
            self._queue.put_nowait(None)

    def on_exit(self, msg: dict[str, Any]) -> None:
        if self._exit.done():
            return
        code, sig = msg.get("code"), msg.get("signal")
        self.ended_at = msg.get("endedAt") if isinstance(msg.get("endedAt"), int) else None
        self._exit.set_result(
            (code if isinstance(code, int) else None, sig if isinstance(sig, str) else None)
        )

    def on_lost(self, host_alive: bool = False) -> None:
        """The host went away: what its exit file says, or that it died (its commands lost their pipes).
        A host still alive (it took another gateway's connection over ours) keeps its commands."""
        self._unqueue()
        was_live, self._link = self._link is not None, None
        self._stdin_closed = True
        if not self._exit.done():
            written = self.paths.read_exit()
            if written is None:
                self.end_reason = HOST_LOST if host_alive else HOST_DIED
                if was_live and not host_alive:  # without its pipes the command is unreachable: end it
                    asyncio.get_running_loop().run_in_executor(None, end_orphans, self._marker)
            self.on_exit(written or {"code": None, "signal": None})
        self.on_eof()

    # -- ProcessHandle
    async def wait(self) -> tuple[int | None, str | None]:
        return await asyncio.shield(self._exit)

    async def read(self) -> tuple[str, bytes] | None:
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)
        elif self._unread:
            self._unread -= len(item[1])
            if self._link is not None:
                self._link.queued_output(-len(item[1]))
        return item

    def _unqueue(self) -> None:
        """Output nobody will read any more no longer holds the link's reading back."""
        if self._unread and self._link is not None:
            self._link.queued_output(-self._unread)
        self._unread = 0

    @property
    def stdin_open(self) -> bool:
        return not self._stdin_closed and not self._closed

    async def write(self, data: bytes) -> None:
        if not self.stdin_open or self._link is None:
            raise BrokenPipeError("stdin is closed")
        self._in_sent += len(data)
        self._link.send(wire.WRITE, self._chan, data)
        await self._link.drain()

    async def close_stdin(self) -> None:
        if self._stdin_closed:
            return
        if self._link is not None:
            self._link.send(wire.EOF, self._chan)
            self._in_sent += 1 if self.pty else 0  # (a terminal's EOF is an EOT byte in its input)
        self._stdin_closed = True

    def resize(self, cols: int, rows: int) -> None:
        if self.pty and not self._closed and self._link is not None:
            self._link.send(wire.RESIZE, self._chan, json.dumps({"cols": cols, "rows": rows}).encode())

    def signal_group(self, sig: int) -> None:
        if self._exit.done():
            return
        if self._link is not None:  # the host signals only a group it has not reaped (no recycled pid)
            self._link.send(wire.SIGNAL, self._chan, json.dumps({"sig": int(sig)}).encode())
        elif self.pid is not None:
            procs.signal_group(self.pid, sig)

    def stdio_holders(self) -> list[procs.ProcInfo]:
        return []  # the host owns the pipes; it stops reading on `close`

    async def terminate(self, grace: float = procs.KILL_GRACE_SEC) -> list[procs.ProcInfo]:
        if self.pid is None or (self._exit.done() and self._eof):
            return []
        return await procs.kill_tree(self.pid, marker=self._marker, grace=grace)

    recorded = False  # the end is on disk already (`done`: a gateway before this one reported it)

    def collected(self, outcome: dict[str, Any]) -> None:
        """The manager recorded the end (and reported it): say so on disk, for the next gateway. Once, and
        without fsync: a `done` lost with a power cut only means the next gateway reports the end again,
        while two fsyncs per session (5 ms here) were most of the time a restart took to adopt 10,000."""
        if self.recorded:
            return
        self.recorded = True
        path = self.paths.done
        tmp = path.with_name(f".{path.name}.tmp")
        with contextlib.suppress(OSError):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, json.dumps(outcome).encode())
            finally:
                os.close(fd)
            os.replace(tmp, path)

    def forget(self) -> None:
        """The session's row is gone (cleanup, `process remove`): so are its files."""
        if self._link is not None and self._link.forget(self.paths.session_id):
            return
        self.paths.remove()

    def forgetter(self) -> Callable[[], None]:
        """`forget`, holding only the link and the paths: what a settled session keeps of its handle
        (the handle itself, its queue and future, ~3 KB, goes)."""
        link, paths = self._link, self.paths

        def forget() -> None:
            if link is not None and link.forget(paths.session_id):
                return
            paths.remove()

        return forget

    def close(self) -> None:
        """The manager recorded the end: the host stops reading and forgets it (its files stay while the
        session is listed, so a restarted gateway lists it too)."""
        if self._closed:
            return
        self._closed = True
        self._stdin_closed = True
        self._unqueue()
        if self._link is not None:
            self._link.send(wire.CLOSE, self._chan, lazy=True)
            self._link.release(self._chan)
        self.on_eof()

    def detach(self) -> None:
        """Leave the session running in the host (a gateway that stops without killing it)."""
        self._unqueue()
        if self._link is not None:
            self._link.release(self._chan)
        self._closed = True
        self.on_eof()


def end_orphans(marker: str) -> None:
    """A host that died left its commands without pipes: end what still carries the session's marker."""
    if not marker:
        return
    for proc in procs.scan(marker=marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)


# (paths, link or None, channel, session file) -> the handle of a held session
HeldFactory = Callable[[HeldPaths, "HostLink | None", int, dict[str, Any]], HostProcess]


class HostLauncher:
    """Runs each command in the session host; `fallback` (a LocalLauncher) when the host is unavailable."""

    def __init__(
        self,
        directory: Path,
        fallback: Launcher,
        spool_cap: int = DEFAULT_SPOOL_CAP,
        held_kinds: dict[str, HeldFactory] | None = None,
    ) -> None:
        self.directory = directory
        self.fallback = fallback
        self.spool_cap = spool_cap
        self.link: HostLink | None = None
        self.problem: str | None = None
        self._tried_at = 0.0
        self._connecting: asyncio.Future[HostLink | None] | None = None
        self._live_seen: set[str] = set()  # what the host held at the last list (adoption)
        # Handles for sessions the host holds but did not start (HOLD), by the `held` kind in their
        # session file: their owner (engine.sandbox) signals them its own way, now and after adoption.
        self.held_kinds: dict[str, HeldFactory] = {} if held_kinds is None else held_kinds

    def paths(self, session_id: str) -> HeldPaths:
        return HeldPaths(self.directory, session_id)

    def never_started(self, session_id: str) -> bool:
        """No command ever ran as this session: the host writes a session's file once it has spawned it,
        and the host held nothing under this id when last asked (a spawn whose file it had not written
        yet). Anything else is "maybe"."""
        paths = self.paths(session_id)
        return not paths.meta.exists() and not paths.ran.exists() and session_id not in self._live_seen

    def _claim_fallback(self, session_id: str) -> None:
        """`<id>.ran` before a command runs without the host, or it does not run: as the host's own session
        file, so that a next gateway finding none knows the command never ran (never_started)."""
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.directory, 0o700)
            fd = os.open(
                self.paths(session_id).ran, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            os.close(fd)
        except OSError as exc:
            raise OSError(exc.errno, f"session file not written, so not started ({exc.strerror})") from exc

    def open_file_limit_text(self, running: int) -> str:
        """Why a spawn failed with EMFILE: the host's limit (2 fds per pipe session, 1 per PTY)."""
        limit = self.link.fd_limit if self.link is not None else 0
        return (
            f"Too many open files: the session host's limit is {limit or 'reached'} and {running} sessions "
            f"are running (2 fds each, 1 for a PTY). Remove finished or unneeded sessions (process remove), "
            "or raise the hard limit (LimitNOFILE= in the service unit, ulimit -Hn) and restart the gateway "
            "and its session host."
        )

    async def connect(self) -> HostLink | None:
        """The live link, (re)connecting or starting the host when needed (at most every few seconds)."""
        if self.link is not None and not self.link.closed:
            return self.link
        if self._connecting is not None:
            return await asyncio.shield(self._connecting)
        if self._tried_at and time.monotonic() - self._tried_at < RESTART_EVERY_SEC:
            return None
        self._tried_at = time.monotonic()
        self._connecting = asyncio.get_running_loop().create_future()
        link: HostLink | None = None
        try:
            sock, hello = await asyncio.to_thread(open_host, self.directory)
            pid, limit = hello.get("pid"), hello.get("fdLimit")
            pid = pid if isinstance(pid, int) else 0
            link = self.link = HostLink(sock, pid, limit if isinstance(limit, int) else 0)
            link.input_done = hello.get("inputDone") is True
            if self.problem is not None:
                log.info("session host (pid %d) is back for %s", pid, self.directory)
            self.problem = None
        except (OSError, ValueError) as exc:
            if self.problem != str(exc):
                log.error(
                    "session host unavailable for %s (%s): gateway-host sessions run as plain children "
                    "and do not survive a gateway restart",
                    self.directory,
                    exc,
                )
            self.problem = str(exc)
        finally:
            self._connecting.set_result(link)
            self._connecting = None
        return link

    async def list_live(self) -> dict[str, dict[str, Any]]:
        link = await self.connect()
        if link is None:
            return {}
        result = await link.request(wire.LIST, {})
        live = {row["id"]: row for row in result.get("sessions", []) if isinstance(row, dict)}
        self._live_seen = set(live)
        return live

    def release_unlisted(self, ids: set[str], live: dict[str, dict[str, Any]]) -> None:
        """Sessions the host holds with no session file (a gateway died between forgetting one and telling
        the host): nobody can list them, so the host may let them go once they end."""
        link = self.link
        if link is None or link.closed:
            return
        for sid in ids:
            chan = live[sid].get("chan")
            if isinstance(chan, int) and not self.paths(sid).meta.exists():
                link.send(wire.CLOSE, chan, lazy=True)

    def held_factory(self, meta: dict[str, Any]) -> HeldFactory | None:
        kind = meta.get("held")
        return self.held_kinds.get(kind) if isinstance(kind, str) else None

    async def attach(
        self, paths: HeldPaths, *, pty: bool, marker: str, meta: dict[str, Any] | None = None
    ) -> HostProcess | None:
        link = self.link
        if link is None or link.closed:
            return None
        held = self.held_factory(meta or {})
        factory = _factory(link, paths, pty, marker)
        if held is not None:

            def factory(chan: int, reply: dict[str, Any]) -> HostProcess:
                return held(paths, link, chan, meta or {})

        try:
            cost = 1 if pty else 4 if held is not None else 2  # (a held one: up to its four FIFOs)
            handle = await link.open_session(wire.ATTACH, {"id": paths.session_id}, factory, cost=cost)
        except (OSError, ConnectionError):
            return None
        assert isinstance(handle, HostProcess)
        return handle

    async def close(self, *, bye: bool = True) -> None:
        if self.link is not None:
            self.link.close(bye=bye)
            self.link = None

    async def hold(
        self,
        session_id: str,
        fds: tuple[int, ...],
        streams: list[str],
        meta: dict[str, Any],
        make: HeldFactory,
        status: bytes = b"",
        output_cap: int | None = None,
    ) -> HostProcess | None:
        """Hand streams someone else started to the host (a sandbox command's FIFOs: stdout, stderr,
        status, stdin): it spools and relays them, and they outlive this gateway. None: no host here.
        `output_cap`: the session's share of its agent's output budget, which caps the spool as a spawned
        command's (else the host's own cap: a sandbox command's spool passed its agent's whole budget)."""
        link = await self.connect() if wire.valid_id(session_id) else None
        if link is None or len(fds) > wire.MAX_FDS:
            return None
        paths = self.paths(session_id)
        spool_cap = min(output_cap or self.spool_cap, self.spool_cap)
        msg = {"id": session_id, "streams": streams, "nfds": len(fds), "spoolCap": spool_cap}
        msg["meta"], msg["status"] = meta, status.decode("latin-1")

        def factory(chan: int, reply: dict[str, Any]) -> HostProcess:
            return make(paths, link, chan, meta)

        try:
            handle = await link.open_session(wire.HOLD, msg, factory, fds, cost=len(fds))
        except ConnectionError as exc:
            raise OSError(f"the session host is gone: {exc}") from None
        assert isinstance(handle, HostProcess)
        return handle

    async def spawn(self, spec: RunSpec) -> ProcessHandle:
        session_id = spec.session_id or ""
        link = await self.connect() if wire.valid_id(session_id) else None
        if link is None or len(spec.pass_fds) > wire.MAX_FDS:  # (more fds than one message carries)
            if not wire.valid_id(session_id):
                return await self.fallback.spawn(spec)
            await asyncio.to_thread(self._claim_fallback, session_id)
            try:
                handle = await self.fallback.spawn(spec)
            except BaseException:
                self.paths(session_id).remove()  # nothing ran
                raise
            # The claim goes with the session's row (the manager calls a handle's `forget` on drop).
            setattr(handle, "forget", self.paths(session_id).remove)  # noqa: B010
            return handle
        paths = self.paths(session_id)
        env = dict(os.environ if spec.env is None else spec.env)
        env[procs.MARKER_ENV] = spec.marker
        if spec.pty:
            env.setdefault("TERM", DEFAULT_TERM)
        # The command's text in the environment, never on an argv (engine.commands.offargv).
        argv, env = carried(spec.resolved_argv(), env)
        msg = {
            "id": session_id,
            "argv": argv,
            "env": env,
            "cwd": spec.cwd or os.getcwd(),
            "pty": spec.pty,
            "ptyInView": spec.pty_in_view,
            "cols": spec.cols,
            "rows": spec.rows,
            "stdin": spec.wants_stdin(),
            "spoolCap": min(spec.output_cap or self.spool_cap, self.spool_cap),
            "fds": list(spec.pass_fds),
            "nfds": len(spec.pass_fds),
            "meta": session_meta(session_id, spec),
        }
        try:
            factory = _factory(link, paths, spec.pty, spec.marker)
            cost = 1 if spec.pty else 2
            held = await link.open_session(wire.SPAWN, msg, factory, tuple(spec.pass_fds), cost=cost)
        except ConnectionError as exc:
            raise OSError(f"the session host is gone: {exc}") from None
        assert isinstance(held, HostProcess)  # what _factory makes
        return held


def _factory(link: HostLink, paths: HeldPaths, pty: bool, marker: str) -> ChannelFactory:
    """What makes a session's HostProcess as the host's reply (channel, pid, pty) is read."""

    def make(chan: int, reply: dict[str, Any]) -> HostProcess:
        pid = reply.get("pid")
        return HostProcess(
            paths,
            link,
            chan,
            pid=pid if isinstance(pid, int) else None,
            pty=bool(reply.get("pty", pty)),
            marker=marker,
        )

    return make
