"""The session host: one small process per state dir that owns every held command, so sessions outlive the
gateway (issue 20) while a command costs a fork/exec, not a Python start (issue 19).

Run as a script (`python -I -S host_main.py <holders dir>`, stdlib only: it imports nothing from a tree
anyone else could write). It takes `host.lock` (one host per dir), detaches (setsid: a SIGKILL or restart of
the gateway is not its end), listens on `host.sock` (0600 in the 0700 dir, same-uid peers only) and serves
one gateway at a time over one multiplexed connection. For each command it starts (fork/exec, own session
and process group, pipes or a PTY) it is the parent, so it alone reaps it and learns its exit code; it

- appends every output chunk, framed, to `<id>.spool` (0600; capped) before or instead of sending it: the
  spool is the buffer, so a slow or absent gateway never stalls a command, and a gateway that attaches
  later is sent the spool from byte 0, then live frames;
- writes `<id>.json` (what the session is) at spawn and `<id>.exit` (code, signal, time) at the end;
- keeps a finished session until a gateway has collected its end (`CLOSE`).

Per idle session it holds two fds for pipes (a socketpair end for stdin+stdout, a pipe for stderr; two
pipes when stdin is closed) and one for a PTY (its master); spool files are opened per batch from a small
cache; exits come from SIGCHLD, not one pidfd each. If this process dies, its commands lose their pipes
(they see EPIPE or EOF); the next gateway reports such sessions as ended ("session host died").

Wire frames (both ways): 4 bytes payload length, 1 byte kind, 4 bytes channel (big-endian), the payload.
Spool frames: 1 byte stream (0 stdout, 1 stderr, 2 pty), 4 bytes length, the bytes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections import OrderedDict
from typing import Any

VERSION = 1
SOCKET_NAME = "host.sock"
LOCK_NAME = "host.lock"
LOG_NAME = "host.log"
HEADER = struct.Struct(">IBI")
SPOOL_HEADER = struct.Struct(">BI")
MAX_PAYLOAD = 16 * 1024 * 1024
MAX_FDS = 64  # per SPAWN: sealed copies of verified files
READ_CHUNK = 65536
HIGH_WATER = 4 * 1024 * 1024  # bytes queued to the gateway beyond which output is only spooled
CATCH_UP_CHUNK = 256 * 1024
SPOOL_FDS = 64  # spool files kept open (the most recently written)
MAX_INPUT_BACKLOG = 16 * 1024 * 1024
IDLE_EXIT_SEC = 10.0  # no gateway and no session this long: the host ends
CHECK_SEC = 2.0  # how often the host checks its socket is still there (state dir deleted?)
KILL_GRACE_SEC = 3.0
LOCK_WAIT_SEC = 5.0
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")

# gateway -> host
HELLO, SPAWN, WRITE, EOF, RESIZE, SIGNAL, LIST, ATTACH, CLOSE, FORGET, BYE = range(1, 12)
# host -> gateway (HELLO too)
REPLY, OUT_STDOUT, OUT_STDERR, OUT_PTY, EXITED, OUT_EOF = 20, 30, 31, 32, 40, 41
OUT_KINDS = (OUT_STDOUT, OUT_STDERR, OUT_PTY)
STDOUT, STDERR, PTY = 0, 1, 2


def frame(kind: int, chan: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, chan) + payload


def valid_id(sid: object) -> bool:
    return isinstance(sid, str) and 0 < len(sid) <= 64 and sid[0] != "-" and set(sid) <= ID_CHARS


class Session:
    """One command the host holds."""

    __slots__ = (
        "sid", "chan", "pid", "popen", "pty", "sock", "streams", "stdin_fd", "inbuf", "shut_pending",
        "spool_size", "spool_cap", "capped", "sent", "attached", "exit", "eof", "exit_sent", "eof_sent",
        "collected", "events",
    )  # fmt: skip

    def __init__(self, sid: str, chan: int, spool_cap: int) -> None:
        self.sid = sid
        self.chan = chan
        self.pid = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self.pty = False
        self.sock: socket.socket | None = None  # the stdin+stdout socketpair end
        self.streams: dict[int, int] = {}  # fd -> stream (0 stdout, 1 stderr, 2 pty)
        self.stdin_fd: int | None = None
        self.inbuf = bytearray()
        self.shut_pending = False
        self.spool_size = 0
        self.spool_cap = spool_cap
        self.capped = False
        self.sent = 0  # spool bytes the attached gateway has been sent
        self.attached = False
        self.exit: dict[str, Any] | None = None
        self.eof = False
        self.exit_sent = False
        self.eof_sent = False
        self.collected = False
        self.events: dict[int, int] = {}  # fd -> selector events registered


def _child_setup(pty: bool, moves: list[tuple[int, int]]) -> Any:
    """Runs in the child: take the PTY as controlling terminal; put each received fd at the number the
    command names it by (/proc/self/fd/N), staged above every number involved so none overwrites another."""

    def setup() -> None:  # pragma: no cover - runs in the forked child
        if pty:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        top = max([2, *(s for s, _ in moves), *(d for _, d in moves)]) + 1
        staged = [(fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, top), dst) for src, dst in moves]
        for tmp, dst in staged:
            os.dup2(tmp, dst)

    return setup if pty or moves else None


class Host:
    def __init__(self, lock_fd: int) -> None:
        self.lock_fd = lock_fd
        self.sel = selectors.DefaultSelector()
        self.sessions: dict[int, Session] = {}  # chan -> session
        self.by_id: dict[str, Session] = {}
        self.by_pid: dict[int, Session] = {}
        self.next_chan = 1
        self.behind: dict[Session, None] = {}  # attached sessions whose spool is ahead of what was sent
        self.spool_fds: OrderedDict[Session, int] = OrderedDict()
        self.client: socket.socket | None = None
        self.hello = False
        self.inbuf = bytearray()
        self.out = bytearray()
        self.fd_queue: list[int] = []
        self.idle_since = time.monotonic()
        self.checked_at = time.monotonic()
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # not SIG_IGN: that would reap for us
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.listener = self._listen()
        st = os.stat(SOCKET_NAME)
        self.socket_id = (st.st_dev, st.st_ino)

    # -- start
    def _listen(self) -> socket.socket:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET_NAME)  # we hold the lock: whatever is there is stale
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(SOCKET_NAME)
        finally:
            os.umask(old)
        os.chmod(SOCKET_NAME, 0o600)
        sock.listen(16)
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, "accept")
        return sock

    # -- loop
    def run(self) -> None:
        while True:
            timeout = CHECK_SEC
            for key, mask in self.sel.select(timeout):
                try:
                    self._event(key, mask)
                except Exception as exc:  # one session's failure is never the host's end
                    _log(f"event {key.data!r}: {type(exc).__name__}: {exc}")
            self._catch_up()
            self._flush()
            now = time.monotonic()
            if now - self.checked_at >= CHECK_SEC:
                self.checked_at = now
                if not self._reachable():
                    self._abandon()
                    return
            if self.client is not None or self.sessions:
                self.idle_since = now
            elif now - self.idle_since >= IDLE_EXIT_SEC:
                self._exit()
                return

    def _event(self, key: selectors.SelectorKey, mask: int) -> None:
        data = key.data
        if isinstance(data, Session):
            if mask & selectors.EVENT_WRITE:
                self._flush_input(data)
            if mask & selectors.EVENT_READ and key.fd in data.streams:
                self._read_output(data, key.fd)
        elif data == "client":
            if mask & selectors.EVENT_WRITE:
                self._flush()
            if mask & selectors.EVENT_READ and self.client is not None:
                self._client_read()
        elif data == "wake":
            with contextlib.suppress(OSError):
                while os.read(self.wake_r, 512):
                    pass
            self._reap()
        elif data == "accept":
            self._accept()

    # -- commands' output
    def _read_output(self, s: Session, fd: int) -> None:
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:  # EIO: the pty's other side is gone; ECONNRESET: a socket peer reset
            if exc.errno not in (errno.EIO, errno.ECONNRESET):
                raise
            data = b""
        if not data:
            self._close_stream(s, fd)
            return
        stream = s.streams[fd]
        size = SPOOL_HEADER.size + len(data)
        live = (
            self.client is not None and s.attached and s.sent == s.spool_size and len(self.out) < HIGH_WATER
        )
        if not s.capped and s.spool_size + size > s.spool_cap:
            s.capped = True  # the gateway keeps its own capped log; beyond this only live frames go
        if not s.capped:
            os.write(self._spool_fd(s), SPOOL_HEADER.pack(stream, len(data)) + data)
            s.spool_size += size
            if live:
                s.sent = s.spool_size
            elif s.attached:
                self.behind[s] = None  # the spool is the buffer: sent from there once the gateway drains
        if live:
            self._send(OUT_KINDS[stream], s.chan, data)

    def _spool_fd(self, s: Session) -> int:
        fd = self.spool_fds.get(s)
        if fd is not None:
            self.spool_fds.move_to_end(s)
            return fd
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(f"{s.sid}.spool", flags, 0o600)
        self.spool_fds[s] = fd
        while len(self.spool_fds) > SPOOL_FDS:
            _, old = self.spool_fds.popitem(last=False)
            os.close(old)
        return fd

    def _close_spool(self, s: Session) -> None:
        fd = self.spool_fds.pop(s, None)
        if fd is not None:
            os.close(fd)

    def _close_stream(self, s: Session, fd: int) -> None:
        s.streams.pop(fd, None)
        if fd == s.stdin_fd:
            s.stdin_fd = None
            s.inbuf.clear()
        self._update(s, fd)
        if s.sock is not None and fd == s.sock.fileno():
            s.sock.close()
            s.sock = None
        else:
            os.close(fd)
        if not s.streams and not s.eof:
            s.eof = True
            self._notify(s)

    def _update(self, s: Session, fd: int) -> None:
        """Register `fd` for what it is used for now (output to read, input to write) or for nothing."""
        want = selectors.EVENT_READ if fd in s.streams else 0
        if fd == s.stdin_fd and s.inbuf:
            want |= selectors.EVENT_WRITE
        have = s.events.get(fd, 0)
        if want == have:
            return
        if not have:
            self.sel.register(fd, want, s)
        elif not want:
            self.sel.unregister(fd)
        else:
            self.sel.modify(fd, want, s)
        if want:
            s.events[fd] = want
        else:
            s.events.pop(fd, None)

    def _catch_up(self) -> None:
        """Send attached sessions' spool beyond what the gateway has, while it keeps up."""
        while self.behind and self.client is not None and len(self.out) < HIGH_WATER:
            s = next(iter(self.behind))
            if not s.attached or s.sent >= s.spool_size:
                del self.behind[s]
                self._notify(s)
                continue
            try:
                chunk = os.pread(self._spool_fd(s), min(s.spool_size - s.sent, CATCH_UP_CHUNK), s.sent)
            except OSError:
                chunk = b""
            pos = 0
            while pos + SPOOL_HEADER.size <= len(chunk):
                stream, size = SPOOL_HEADER.unpack_from(chunk, pos)
                end = pos + SPOOL_HEADER.size + size
                if end > len(chunk):
                    break
                kind = OUT_KINDS[stream] if stream < len(OUT_KINDS) else OUT_STDOUT
                self._send(kind, s.chan, chunk[pos + SPOOL_HEADER.size : end])
                pos = end
            if pos == 0:
                _log(f"spool of {s.sid} unreadable at {s.sent}: skipped")
                pos = s.spool_size - s.sent
            s.sent += pos

    def _notify(self, s: Session) -> None:
        """EOF and exit reach the gateway only after every output byte before them."""
        if self.client is None or not s.attached or s.sent < s.spool_size:
            return
        if s.eof and not s.eof_sent:
            s.eof_sent = True
            self._send(OUT_EOF, s.chan)
        if s.exit is not None and not s.exit_sent:
            s.exit_sent = True
            self._send(EXITED, s.chan, json.dumps(s.exit).encode())

    # -- exits
    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            s = self.by_pid.pop(pid, None)
            if s is None:
                continue
            raw = os.waitstatus_to_exitcode(status)
            if s.popen is not None:
                s.popen.returncode = raw  # reaped here: Popen must never wait on a recycled pid
                s.popen = None
            sig = None
            if raw < 0:
                try:
                    sig = signal.Signals(-raw).name
                except ValueError:
                    sig = f"SIG{-raw}"
            s.exit = {"code": raw if raw >= 0 else None, "signal": sig, "endedAt": int(time.time() * 1000)}
            try:
                _write_file(f"{s.sid}.exit", json.dumps(s.exit).encode(), atomic=True)
            except OSError as exc:
                _log(f"exit of {s.sid} not written: {exc}")
            self._notify(s)
            if s.collected:
                self._remove(s)

    def _remove(self, s: Session) -> None:
        for fd in list(s.streams):
            self._close_stream(s, fd)
        self._close_spool(s)
        self.behind.pop(s, None)
        self.sessions.pop(s.chan, None)
        if self.by_id.get(s.sid) is s:
            del self.by_id[s.sid]

    # -- the gateway
    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.close()  # another user: not a word
            return
        self._drop_client()  # a new gateway replaces the old one
        conn.setblocking(False)
        self.client = conn
        self.hello = False
        self.sel.register(conn, selectors.EVENT_READ, "client")

    def _drop_client(self) -> None:
        if self.client is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self.client)
        self.client.close()
        self.client = None
        self.inbuf.clear()
        self.out.clear()
        for fd in self.fd_queue:
            os.close(fd)
        self.fd_queue.clear()
        self.behind.clear()
        for s in self.sessions.values():
            s.attached = False

    def _send(self, kind: int, chan: int, payload: bytes | memoryview = b"") -> None:
        self.out += HEADER.pack(len(payload), kind, chan)
        self.out += payload

    def _reply(self, req: object, result: dict[str, Any]) -> None:
        self._send(REPLY, req if isinstance(req, int) and 0 <= req < 2**32 else 0, json.dumps(result).encode())

    def _flush(self) -> None:
        if self.client is None:
            return
        try:
            while self.out:
                n = self.client.send(self.out)
                del self.out[:n]
        except BlockingIOError:
            pass
        except OSError:
            self._drop_client()
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)
        self.sel.modify(self.client, events, "client")

    def _client_read(self) -> None:
        assert self.client is not None
        try:
            data, fds, flags, _ = socket.recv_fds(self.client, 262144, MAX_FDS)
        except BlockingIOError:
            return
        except OSError:
            data, fds, flags = b"", [], 0
        self.fd_queue.extend(fds)
        if not data or flags & socket.MSG_CTRUNC:
            self._drop_client()
            return
        self.inbuf += data
        pos = 0
        buf = self.inbuf
        while len(buf) - pos >= HEADER.size:
            size, kind, chan = HEADER.unpack_from(buf, pos)
            if size > MAX_PAYLOAD:
                self._drop_client()
                return
            end = pos + HEADER.size + size
            if end > len(buf):
                break
            payload = bytes(buf[pos + HEADER.size : end])
            pos = end
            try:
                self._command(kind, chan, payload)
            except (ValueError, TypeError, KeyError, OSError, AttributeError) as exc:
                _log(f"command {kind} on {chan}: {type(exc).__name__}: {exc}")
            if self.client is None:
                return
        del buf[:pos]

    def _command(self, kind: int, chan: int, payload: bytes) -> None:
        if not self.hello:
            msg = json.loads(payload) if kind == HELLO else {}
            self._send(HELLO, 0, json.dumps({"version": VERSION, "pid": os.getpid()}).encode())
            if msg.get("version") != VERSION:
                self._flush()
                self._drop_client()  # another format: the gateway says why and runs without us
                return
            self.hello = True
            return
        if kind in (WRITE, EOF, RESIZE, SIGNAL, CLOSE):
            s = self.sessions.get(chan)
            if s is not None:
                self._session_command(kind, s, payload)
            return
        msg = json.loads(payload) if payload else {}
        if kind == SPAWN:
            fds, self.fd_queue = self.fd_queue[: int(msg.get("nfds", 0))], self.fd_queue[int(msg.get("nfds", 0)) :]
            try:
                self._reply(msg.get("req"), self._spawn(msg, fds))
            except Exception as exc:  # the command could not start: say why
                self._reply(msg.get("req"), {"error": f"{type(exc).__name__}: {exc}"})
            finally:
                for fd in fds:
                    os.close(fd)
        elif kind == LIST:
            rows = [{"id": s.sid, "pid": s.pid, "pty": s.pty, "exited": s.exit is not None} for s in self.sessions.values()]
            self._reply(msg.get("req"), {"sessions": rows})
        elif kind == ATTACH:
            s = self.by_id.get(msg.get("id"))  # type: ignore[arg-type]
            if s is None or s.collected:
                self._reply(msg.get("req"), {"error": "unknown session"})
                return
            s.attached, s.sent, s.eof_sent, s.exit_sent = True, 0, False, False
            self._reply(msg.get("req"), {"chan": s.chan, "pid": s.pid, "pty": s.pty})
            self.behind[s] = None  # the spool from byte 0, then live
        elif kind == FORGET and valid_id(msg.get("id")):
            for suffix in ("json", "spool", "exit", "done"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{msg['id']}.{suffix}")
        elif kind == BYE and not self.sessions:
            self.idle_since = -IDLE_EXIT_SEC  # a gateway that stops on purpose: nothing left to hold

    def _session_command(self, kind: int, s: Session, payload: bytes) -> None:
        if kind == WRITE:
            if s.stdin_fd is not None and len(s.inbuf) + len(payload) <= MAX_INPUT_BACKLOG:
                s.inbuf += payload
                self._flush_input(s)
        elif kind == EOF:
            if s.pty:
                if s.stdin_fd is not None:
                    s.inbuf += b"\x04"  # a terminal has no half-close: EOT is what a user's ^D sends
                    self._flush_input(s)
            elif s.sock is not None:
                s.shut_pending = True
                self._flush_input(s)
        elif kind == RESIZE:
            if s.pty and s.stdin_fd is not None:
                msg = json.loads(payload)
                size = struct.pack("HHHH", int(msg["rows"]), int(msg["cols"]), 0, 0)
                fcntl.ioctl(s.stdin_fd, termios.TIOCSWINSZ, size)
        elif kind == SIGNAL:
            if s.exit is None and s.pid:  # not reaped: the group cannot be a recycled one
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(s.pid, int(json.loads(payload)["sig"]))
        elif kind == CLOSE:  # the gateway recorded the end (or gave up on strays): stop reading
            s.collected = True
            s.attached = False
            for fd in list(s.streams):
                self._close_stream(s, fd)
            self._close_spool(s)
            self.behind.pop(s, None)
            if s.exit is not None:
                self._remove(s)

    def _flush_input(self, s: Session) -> None:
        fd = s.stdin_fd
        if fd is None:
            s.inbuf.clear()
            return
        try:
            while s.inbuf:
                del s.inbuf[: os.write(fd, s.inbuf)]
        except BlockingIOError:
            pass
        except OSError:  # EPIPE: the command closed its stdin
            s.inbuf.clear()
        if s.shut_pending and not s.inbuf and s.sock is not None:
            s.shut_pending = False
            s.stdin_fd = None
            with contextlib.suppress(OSError):
                s.sock.shutdown(socket.SHUT_WR)
        self._update(s, fd)

    # -- spawning
    def _spawn(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        sid = msg["id"]
        targets = [int(t) for t in msg.get("fds") or ()]
        if not valid_id(sid) or sid in self.by_id:
            raise ValueError(f"bad or duplicate session id {sid!r}")
        if len(targets) != len(fds) or any(t < 3 for t in targets):
            raise ValueError("passed descriptors do not match the spec")
        argv, env, cwd = list(msg["argv"]), dict(msg["env"]), msg.get("cwd") or None
        pty = bool(msg.get("pty"))
        s = Session(sid, self.next_chan, int(msg.get("spoolCap") or 64 * 1024 * 1024))
        # Popen marks every pass_fds number inheritable in the child, so each must be open here: a
        # number we do not use gets a placeholder until the child has started.
        placeholders = [t for t, src in zip(targets, fds) if not _is_open(t) and os.dup2(src, t, False) >= 0]
        try:
            return self._start(s, msg, argv, env, cwd, pty, _child_setup(pty, list(zip(fds, targets))), targets)
        finally:
            for fd in placeholders:
                os.close(fd)

    def _start(
        self, s: Session, msg: dict[str, Any], argv: list[str], env: dict[str, str], cwd: str | None,
        pty: bool, setup: Any, targets: list[int],
    ) -> dict[str, Any]:  # fmt: skip
        sid = s.sid
        common: dict[str, Any] = {
            "cwd": cwd, "env": env, "close_fds": True, "pass_fds": targets, "start_new_session": True,
            "preexec_fn": setup,
        }  # fmt: skip
        if pty:
            master, slave = os.openpty()
            try:
                size = struct.pack("HHHH", int(msg.get("rows") or 40), int(msg.get("cols") or 120), 0, 0)
                fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
                popen = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, **common)
            except BaseException:
                os.close(master)
                raise
            finally:
                os.close(slave)
            s.pty = True
            s.streams[master] = PTY
            s.stdin_fd = master
        elif msg.get("stdin", True):
            mine, theirs = socket.socketpair()
            err_r, err_w = os.pipe()
            try:
                child = theirs.fileno()
                popen = subprocess.Popen(argv, stdin=child, stdout=child, stderr=err_w, **common)
            except BaseException:
                mine.close()
                os.close(err_r)
                raise
            finally:
                theirs.close()
                os.close(err_w)
            mine.setblocking(False)
            s.sock = mine
            s.streams[mine.fileno()] = STDOUT
            s.streams[err_r] = STDERR
            s.stdin_fd = mine.fileno()
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                popen = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, **common
                )
            except BaseException:
                os.close(out_r)
                os.close(err_r)
                raise
            finally:
                os.close(out_w)
                os.close(err_w)
            s.streams[out_r] = STDOUT
            s.streams[err_r] = STDERR
        self.next_chan += 1
        s.popen = popen
        s.pid = popen.pid
        s.attached = True
        self.sessions[s.chan] = s
        self.by_id[sid] = s
        self.by_pid[s.pid] = s
        for fd in s.streams:
            os.set_blocking(fd, False)
            self._update(s, fd)
        meta = msg.get("meta")
        if isinstance(meta, dict):
            try:
                _write_file(f"{sid}.json", json.dumps({**meta, "pid": s.pid}).encode(), atomic=False)
            except OSError as exc:
                _log(f"session file of {sid} not written: {exc}")
        return {"chan": s.chan, "pid": s.pid, "pty": s.pty}

    # -- the end
    def _reachable(self) -> bool:
        """Our socket file is still the one we bound: when it (or the whole state dir) was removed, no
        gateway can ever reach these sessions again, so the host ends them, as the gateway stops itself."""
        try:
            st = os.stat(SOCKET_NAME)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        return (st.st_dev, st.st_ino) == self.socket_id

    def _abandon(self) -> None:
        running = [s for s in self.sessions.values() if s.exit is None and s.pid]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for s in running:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(s.pid, sig)
            deadline = time.monotonic() + KILL_GRACE_SEC
            while time.monotonic() < deadline and any(s.exit is None for s in running):
                self._reap()
                time.sleep(0.05)
        self._exit()

    def _exit(self) -> None:
        with contextlib.suppress(OSError):
            st = os.stat(SOCKET_NAME)
            if (st.st_dev, st.st_ino) == self.socket_id:  # never someone else's file at that path
                os.unlink(SOCKET_NAME)
        self.listener.close()
        self._drop_client()


def _is_open(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
    except OSError:
        return False
    return True


def _write_file(name: str, data: bytes, *, atomic: bool) -> None:
    """No fsync: these files outlive a gateway or host crash, not a power cut (the commands would not)."""
    path = f".{name}.tmp" if atomic else name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    if atomic:
        os.replace(path, name)


def _log(line: str) -> None:
    with contextlib.suppress(OSError):
        with open(LOG_NAME, "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {line}\n")


def _take_lock() -> int | None:
    fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_SEC
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def main() -> int:
    if len(sys.argv) != 2:
        return 2
    os.chdir(sys.argv[1])  # every path below is short and relative to the holders dir
    # Detach: the gateway reaps this first process at once; the host lives on in a new session.
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        lock = _take_lock()
        if lock is None:
            sys.stdout.write("busy\n")  # another host serves this dir
            sys.stdout.flush()
            return 0
        with contextlib.suppress(OSError):
            if os.stat(LOG_NAME).st_size > 1024 * 1024:
                os.truncate(LOG_NAME, 0)
        host = Host(lock)
    except Exception as exc:
        sys.stdout.write(f"error {type(exc).__name__}: {exc}\n")
        sys.stdout.flush()
        return 1
    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    _log("started")
    host.run()
    _log("ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
