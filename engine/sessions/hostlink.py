"""The one connection from a gateway to its session host (host_main.py): frames out, with the verified fds
riding along by SCM_RIGHTS; frames in, dispatched by channel; and finding or starting the host."""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import json
import logging
import os
import select
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from engine import statefs
from engine.sessions import host_io as wire
from engine.sessions import procs
from engine.unixsock import SUN_PATH_MAX, peer_info

log = logging.getLogger("exechost.sessions")

HOST_MAIN = str(Path(__file__).with_name("host_main.py"))
STREAM_OF = {wire.OUT_STDOUT: "stdout", wire.OUT_STDERR: "stderr", wire.OUT_PTY: "pty"}
START_TIMEOUT_SEC = 15.0
REQUEST_TIMEOUT_SEC = 30.0
DRAIN_HIGH = 1024 * 1024
LOST_CHECK_SEC = 0.2
LAZY_SEC = 0.05
BACKLOG_HIGH = 16 * 1024 * 1024
BACKLOG_LOW = 4 * 1024 * 1024
# Open files a host keeps for itself, never counted as room for sessions: the spool files it keeps open
# (host_io.SPOOL_FDS), its sockets, lock and selector, and a session file being written.
FD_RESERVE = 128
_background: set[asyncio.Task[None]] = set()


class Channel(Protocol):
    """What a session's frames are delivered to (engine.sessions.host.HostProcess)."""

    def on_output(self, kind: int, data: bytes) -> None: ...

    def on_eof(self) -> None: ...

    def on_exit(self, msg: dict[str, Any]) -> None: ...

    def on_lost(self, host_alive: bool = False) -> None: ...

    def on_input_done(self, done: int) -> None: ...

    def on_input_held(self, held: int) -> None: ...


ChannelFactory = Callable[[int, dict[str, Any]], Channel]


class HostLink:
    """The one connection to the host: frames out (fds ride along by SCM_RIGHTS), frames in, dispatched
    to each session's Channel (a HostProcess). Reads and writes straight on the non-blocking socket."""

    def __init__(self, sock: socket.socket, host_pid: int, fd_limit: int = 0) -> None:
        self.sock = sock
        self.host_pid = host_pid
        self._loop = asyncio.get_running_loop()
        self._out: deque[list[Any]] = deque()  # [bytes-like, fds]
        self._queued = 0
        self._writing = False
        self._lazy = bytearray()
        self._backlog = 0
        self._paused = False
        self._lazy_timer: asyncio.TimerHandle | None = None
        self._drained = asyncio.Event()
        self._drained.set()
        self._inbuf = bytearray()
        self._req = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.chans: dict[int, Channel] = {}
        self._attach: dict[int, ChannelFactory] = {}  # req -> what makes the reply's channel
        self.closed = False
        self.fd_limit = fd_limit  # the host's RLIMIT_NOFILE (its hello, or its last EMFILE); 0: unknown
        self.input_done = False  # the host tells how much input it no longer holds (its hello: INPUT_DONE)
        # What the sessions opened over this link hold in the host, as counted here (a pipe session 2 fds,
        # a terminal 1, a held one what was handed over): the room left for new ones.
        self.fds_used = 0
        self._chan_fds: dict[int, int] = {}
        self._ceiling: int | None = None  # fds_used when the host last said EMFILE
        self._loop.add_reader(sock.fileno(), self._on_readable)

    # -- out
    def send(
        self, kind: int, chan: int, payload: bytes = b"", fds: tuple[int, ...] = (), *, lazy: bool = False
    ) -> None:
        """Queue a frame and write at once; `lazy` (bookkeeping: CLOSE, FORGET) rides behind the next frame
        or goes a moment later, so the host is not woken while the gateway answers the call that ended."""
        if self.closed:
            raise BrokenPipeError("the session host is gone")
        data = wire.HEADER.pack(len(payload), kind, chan) + payload
        if lazy:
            self._lazy += data
            if self._lazy_timer is None:
                self._lazy_timer = self._loop.call_later(LAZY_SEC, self._send_lazy)
            return
        if self._lazy:  # after this frame: the host answers it first
            data += bytes(self._lazy)
            self._lazy.clear()
        if fds:
            self._out.append([data, tuple(os.dup(fd) for fd in fds)])  # ours until sent
        elif self._out and not self._out[-1][1] and isinstance(self._out[-1][0], bytearray):
            self._out[-1][0] += data
        else:
            self._out.append([bytearray(data), ()])
        self._queued += len(data)
        if not self._writing:
            self._flush()

    def _send_lazy(self) -> None:
        self._lazy_timer = None
        if self._lazy and not self.closed:
            data = bytes(self._lazy)
            self._lazy.clear()
            self._out.append([bytearray(data), ()])
            self._queued += len(data)
            if not self._writing:
                self._flush()

    def _flush(self) -> None:
        try:
            while self._out:
                item = self._out[0]
                data, fds = item
                if fds:
                    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                    n = self.sock.sendmsg([data], rights)
                    for fd in fds:  # the kernel took its own references with the first byte
                        os.close(fd)
                    item[1] = ()
                else:
                    n = self.sock.send(data)
                self._queued -= n
                if n < len(data):
                    item[0] = bytearray(memoryview(data)[n:])
                    break
                self._out.popleft()
        except BlockingIOError:
            pass
        except OSError:
            self._lost()
            return
        if self._out and not self._writing:
            self._writing = True
            self._loop.add_writer(self.sock.fileno(), self._on_writable)
        elif not self._out and self._writing:
            self._writing = False
            self._loop.remove_writer(self.sock.fileno())
        if self._queued < DRAIN_HIGH:
            self._drained.set()
        else:
            self._drained.clear()

    def _on_writable(self) -> None:
        self._flush()

    async def drain(self) -> None:
        if not self._drained.is_set() and not self.closed:
            await self._drained.wait()

    async def request(
        self,
        kind: int,
        msg: dict[str, Any],
        fds: tuple[int, ...] = (),
        opening: ChannelFactory | None = None,
    ) -> dict[str, Any]:
        self._req = self._req % 0xFFFFFFF0 + 1
        req = self._req
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[req] = fut
        if opening is not None:
            self._attach[req] = opening
        try:
            self.send(kind, 0, json.dumps({**msg, "req": req}).encode(), fds)
            return await asyncio.wait_for(fut, REQUEST_TIMEOUT_SEC)
        finally:
            self._pending.pop(req, None)
            self._attach.pop(req, None)

    async def open_session(
        self,
        kind: int,
        msg: dict[str, Any],
        factory: ChannelFactory,
        fds: tuple[int, ...] = (),
        *,
        cost: int = 2,
    ) -> Channel:
        """SPAWN, HOLD or ATTACH: `factory(chan, reply)` makes the channel as its reply is read, so no frame
        of it that follows in the same read is missed.

        `cost`: the fds the session will hold in the host. A new session (not ATTACH: what the host holds
        already is always taken back) is refused here, with EMFILE, when the host has no room left for it
        beside its FD_RESERVE; checked and counted before anything is sent, so concurrent spawns never
        overcommit a host."""
        if kind != wire.ATTACH and not self.room(cost):
            limit = f"{self.fds_used} of its {self.fd_limit} open files taken by sessions"
            raise OSError(errno.EMFILE, f"the session host is full ({limit})")
        self.fds_used += cost
        try:
            result = await self.request(kind, msg, fds, factory)
        except BaseException:
            self._uncount(cost)
            raise
        if "error" in result:
            self._uncount(cost)
            err = result.get("errno")
            if isinstance(result.get("fdLimit"), int):
                self.fd_limit = result["fdLimit"]
            if err == errno.EMFILE:
                self._ceiling = self.fds_used  # full for now (its own count): room again once sessions end
            text = f"the session host could not start the command: {result['error']}"
            raise OSError(err, text) if isinstance(err, int) else OSError(text)
        chan = int(result["chan"])
        channel = self.chans.get(chan)
        if channel is None:
            self._uncount(cost)
            raise OSError("the session host lost the session")
        self._uncount(self._chan_fds.get(chan, 0))
        self._chan_fds[chan] = cost
        return channel

    def _uncount(self, cost: int) -> None:
        if not self.closed:  # (a lost link counts nothing any more)
            self.fds_used -= cost

    def room(self, cost: int) -> bool:
        """Whether the host can take a session holding `cost` more fds and keep its own FD_RESERVE."""
        if self._ceiling is not None and self.fds_used + cost > self._ceiling:
            return False
        return not self.fd_limit or self.fds_used + cost + FD_RESERVE <= self.fd_limit

    def release(self, chan: int) -> None:
        self.chans.pop(chan, None)
        self._uncount(self._chan_fds.pop(chan, 0))

    def forget(self, session_id: str) -> bool:
        if self.closed:
            return False
        self.send(wire.FORGET, 0, json.dumps({"id": session_id}).encode(), lazy=True)
        return True

    # -- in
    def _on_readable(self) -> None:
        try:
            data = self.sock.recv(262144)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost()
            return
        buf = self._inbuf
        buf += data
        pos = 0
        while len(buf) - pos >= wire.HEADER.size:
            size, kind, chan = wire.HEADER.unpack_from(buf, pos)
            end = pos + wire.HEADER.size + size
            if end > len(buf):
                break
            try:
                self._frame(kind, chan, bytes(buf[pos + wire.HEADER.size : end]))
            except (ValueError, TypeError, KeyError) as exc:  # one bad frame is skipped, never re-read
                log.error("bad frame %d from the session host: %s", kind, exc)
            pos = end
        del buf[:pos]

    def queued_output(self, delta: int) -> None:
        """Output read from the host and not yet taken by the session manager. Past BACKLOG_HIGH we stop
        reading the host: its queue fills and it keeps the rest in the spools until we catch up."""
        self._backlog += delta
        if not self._paused and self._backlog > BACKLOG_HIGH and not self.closed:
            self._paused = True
            self._loop.remove_reader(self.sock.fileno())
        elif self._paused and self._backlog < BACKLOG_LOW and not self.closed:
            self._paused = False
            self._loop.add_reader(self.sock.fileno(), self._on_readable)

    def _frame(self, kind: int, chan: int, payload: bytes) -> None:
        if kind in STREAM_OF:
            handle = self.chans.get(chan)
            if handle is not None:
                handle.on_output(kind, payload)
        elif kind == wire.OUT_EOF:
            if (handle := self.chans.get(chan)) is not None:
                handle.on_eof()
        elif kind == wire.EXITED:
            if (handle := self.chans.get(chan)) is not None:
                handle.on_exit(json.loads(payload))
        elif kind == wire.INPUT_DONE:
            if (handle := self.chans.get(chan)) is not None:
                handle.on_input_done(wire.INPUT_DONE_SIZE.unpack(payload)[0])
        elif kind == wire.REPLY:
            result = json.loads(payload)
            factory = self._attach.pop(chan, None)
            if factory is not None and isinstance(result.get("chan"), int):
                handle = self.chans[result["chan"]] = factory(result["chan"], result)
                if isinstance(result.get("inputHeld"), int):  # an attach: what the host holds already
                    handle.on_input_held(result["inputHeld"])
            fut = self._pending.get(chan)
            if fut is not None and not fut.done():
                fut.set_result(result)

    def _lost(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self.sock.fileno())
            if self._writing:
                self._loop.remove_writer(self.sock.fileno())
        for _, fds in self._out:
            for fd in fds:
                os.close(fd)
        self._out.clear()
        self._drained.set()
        self.sock.close()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("the session host is gone"))
        chans, self.chans = self.chans, {}
        self._chan_fds.clear()
        self.fds_used = 0
        if chans:
            task = self._loop.create_task(self._report_lost(list(chans.values())))
            _background.add(task)
            task.add_done_callback(_background.discard)

    async def _report_lost(self, handles: list[Channel]) -> None:
        """Died, or alive and serving another gateway? Asked a moment later: a killed host closes its
        sockets a little before /proc shows it gone."""
        await asyncio.sleep(LOST_CHECK_SEC)
        alive = bool(self.host_pid) and await asyncio.to_thread(procs.alive, self.host_pid)
        for handle in handles:
            handle.on_lost(alive)

    def close(self, *, bye: bool = False) -> None:
        """This gateway stops (not a death: the sessions go on in the host). `bye`: the host may end now
        if it holds nothing."""
        if self.closed:
            return
        with contextlib.suppress(OSError):
            self._send_lazy()  # CLOSE and FORGET first: a BYE with sessions still held is ignored
            if bye:
                self.send(wire.BYE, 0)
        self.chans.clear()
        self._lost()


def _connect(path: Path) -> tuple[socket.socket, dict[str, Any]]:
    """Connect and say hello (blocking: run in a thread). Raises OSError when nobody (usable) answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5)
        sock.connect(str(path))
        peer = peer_info(sock)
        if peer is None or peer.uid != os.getuid():
            raise OSError("the session host socket belongs to another user")
        sock.sendall(wire.frame(wire.HELLO, 0, json.dumps({"version": wire.VERSION}).encode()))
        head = _recv_exact(sock, wire.HEADER.size)
        size, kind, _ = wire.HEADER.unpack(head)
        hello = json.loads(_recv_exact(sock, size)) if kind == wire.HELLO and size < 65536 else {}
        if not isinstance(hello, dict) or hello.get("version") != wire.VERSION:
            said = hello.get("version") if isinstance(hello, dict) else None
            raise OSError(f"the session host speaks version {said}, not {wire.VERSION}")
        sock.setblocking(False)
        return sock, hello
    except BaseException:
        sock.close()
        raise


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("the session host closed the connection")
        data += chunk
    return data


def _start_host(directory: Path) -> str:
    """Start a host for `directory` (it detaches); its first line: `ready PID`, `busy` or `error …`."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", HOST_MAIN, str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_SEC)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else "error: no answer"
    finally:
        proc.stdout.close()
        proc.wait()  # the first process exits at once; the host lives on, detached
    return line


def open_host(directory: Path) -> tuple[socket.socket, dict[str, Any]]:
    """A connection to the dir's host, started when none answers, and its hello (blocking: run in a
    thread)."""
    statefs.ensure_private_dir(directory)
    path = directory / wire.SOCKET_NAME
    if len(os.fsencode(str(path))) > SUN_PATH_MAX:
        raise OSError(f"socket path {path} too long (> {SUN_PATH_MAX} bytes)")
    problem: str = ""
    for _ in range(3):
        try:
            return _connect(path)
        except OSError as exc:
            problem = str(exc)
            if "version" in problem or "another user" in problem:
                raise
        line = _start_host(directory)
        if line.startswith("error"):
            raise OSError(f"the session host did not start: {line}")
        if not line:
            problem = "the session host exited without a word"
    raise OSError(problem)
