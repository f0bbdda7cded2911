"""The session host's per-command I/O: every output chunk into the spool and, while the gateway keeps up,
to it; input to the command; exits from SIGCHLD. Also the wire format both sides share (the gateway imports
this module for it). Stdlib only: host_main.py loads it by path."""

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
import time
from collections import OrderedDict
from typing import Any

# What makes a session's spool Room (engine.sessions.diskroom.Room); host_main sets it, the gateway's
# imports of the wire format leave it None.
ROOM: Any = None

VERSION = 1
# The words a run in the gateway's host view starts with (engine.commands.hostview's head; stdlib only
# here, so the same two words, kept equal by a test): bwrap reports a command killed by SIGINT/SIGQUIT as
# exit 128+n, read back as the signal.
VIEW_HEAD = ("/usr/bin/env", "--ignore-signal=INT,QUIT,TSTP")
_VIEW_SIGNALS = (signal.SIGINT, signal.SIGQUIT)
# Such a run in a bwrap of its own starts the helper's `status` mode right after bwrap's `--`
# (engine.commands.hostview.tail; the same words, kept equal by a test): NO_STATUS there becomes the write
# end of a pipe whose read end the spawner keeps, and the helper writes the command's own wait status to
# it, which bwrap cannot tell (it says 128+n for a signal n, as a command's own `exit 130` does).
STATUS_WORDS = ("status", "-")


def exit_of(args: Any, raw: int) -> tuple[int | None, str | None]:
    """os.waitstatus_to_exitcode's `raw` as (exit code, signal name); a host-view run with no status pipe
    (no helper): its 128+n for SIGINT/SIGQUIT as n, the one guess left where nothing better was told."""
    if raw < 0:
        try:
            return None, signal.Signals(-raw).name
        except ValueError:
            return None, f"SIG{-raw}"
    if isinstance(args, (list, tuple)) and tuple(args[:2]) == VIEW_HEAD and raw - 128 in _VIEW_SIGNALS:
        return None, signal.Signals(raw - 128).name
    return raw, None


def status_pipe(argv: list[str], above: int = 2) -> tuple[list[str], int | None, int | None]:
    """`argv` with its status slot (STATUS_WORDS after bwrap's `--`) made a pipe's write end, the read end
    (kept, non-blocking: `status_exit` reads it) and the write end (passed to the child, then closed);
    `argv` itself and None, None for any other run. The write end's number is above `above`: the numbers
    the child's other passed fds are put at must not be it."""
    if tuple(argv[:2]) != VIEW_HEAD:
        return argv, None, None
    # `-- HELPER status - -- HELPER check-cwd`: the view's words, before any of the command's.
    at = next((i for i in range(2, len(argv) - 5) if _status_slot(argv, i)), None)
    if at is None:
        return argv, None, None
    read, write = os.pipe()
    if write <= above:
        try:
            moved = fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, above + 1)
        except OSError:
            os.close(read)
            raise
        finally:
            os.close(write)
        write = moved
    os.set_blocking(read, False)
    return [*argv[: at + 1], str(write), *argv[at + 2 :]], read, write


def _status_slot(argv: list[str], i: int) -> bool:
    """Whether argv[i:i + 2] is the helper's STATUS_WORDS right after bwrap's `--`."""
    return (
        argv[i] == STATUS_WORDS[0]
        and argv[i + 1] == STATUS_WORDS[1]
        and argv[i - 2] == "--"
        and argv[i + 2] == "--"
        and argv[i + 3] == argv[i - 1]
        and argv[i + 4] == "check-cwd"
    )


def status_exit(fd: int, args: Any, raw: int) -> tuple[int | None, str | None]:
    """The run's exit as the helper told it through `fd` (then closed): the command's own wait status.
    Nothing told (the helper did not get that far): `raw` as it is, a code or a signal, never 128+n read
    as a signal."""
    try:
        told = os.read(fd, 64)
    except OSError:
        told = b""
    finally:
        os.close(fd)
    line = told.split(b"\n", 1)[0]
    if told.count(b"\n") == 1 and told.endswith(b"\n") and line.isdigit() and len(line) <= 10:
        with contextlib.suppress(ValueError):
            return exit_of(None, os.waitstatus_to_exitcode(int(line)))
    return exit_of(None, raw)


SOCKET_NAME = "host.sock"
LOG_NAME = "host.log"
HEADER = struct.Struct(">IBI")
SPOOL_HEADER = struct.Struct(">BI")
READ_CHUNK = 65536
DRAIN_READS = 16  # at an exit, up to 1 MiB per stream read before the exit is told (a pipe holds 64 KiB)
HIGH_WATER = 4 * 1024 * 1024  # bytes queued to the gateway beyond which output is only spooled
STALLED_SEC = 5.0  # a gateway that took no byte for this long is not waited for (see _gateway_behind)
CATCH_UP_CHUNK = 256 * 1024
SPOOL_FDS = 64  # spool files kept open (the most recently written)
MAX_FDS = 64  # per SPAWN: sealed copies of verified files (one SCM_RIGHTS message)
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")

# gateway -> host
HELLO, SPAWN, WRITE, EOF, RESIZE, SIGNAL, LIST, ATTACH, CLOSE, FORGET, BYE, HOLD = range(1, 13)
# host -> gateway (HELLO too)
REPLY, OUT_STDOUT, OUT_STDERR, OUT_PTY, EXITED, OUT_EOF = 20, 30, 31, 32, 40, 41
# How many bytes of a session's input the host no longer holds (written to the command, or dropped with its
# stdin), since the gateway attached: 8 bytes, cumulative. The gateway counts what it sent less this
# against the agent's input budget (engine.sessions.quota); hosts that say `inputDone` in their hello.
INPUT_DONE = 42
INPUT_DONE_SIZE = struct.Struct(">Q")
OUT_KINDS = (OUT_STDOUT, OUT_STDERR, OUT_PTY)
# A held session's status stream (HOLD: a sandbox command's FIFOs): "pid N" / "exit N" lines, parsed here.
STATUS = 3
HELD_STREAMS = {"stdout": 0, "stderr": 1, "status": STATUS}


def frame(kind: int, chan: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, chan) + payload


def valid_id(sid: object) -> bool:
    return isinstance(sid, str) and 0 < len(sid) <= 64 and sid[0] != "-" and set(sid) <= ID_CHARS


class Session:
    """One command the host holds."""

    __slots__ = (
        "attached",
        "capped",
        "chan",
        "collected",
        "eof",
        "eof_sent",
        "events",
        "exit",
        "exit_sent",
        "in_done",
        "in_told",
        "inbuf",
        "paused",
        "pid",
        "popen",
        "pty",
        "room",
        "sent",
        "shut_pending",
        "sid",
        "sock",
        "spool_cap",
        "spool_size",
        "status_buf",
        "status_fd",
        "stdin_fd",
        "streams",
    )

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
        self.in_done = 0  # input bytes taken out of `inbuf` (written, or dropped) since the gateway attached
        self.in_told = 0  # what the gateway was last told of it (INPUT_DONE)
        self.shut_pending = False
        self.spool_size = 0
        self.spool_cap = spool_cap
        self.capped = False
        # The spool's share of the state dir's filesystem (engine.sessions.diskroom.Room, set by host_main):
        # a flood stops short of the reserve kept for the gateway's records, as the gateway's own logs do.
        self.room: Any = ROOM() if ROOM is not None else None
        # Past the spool cap with the gateway attached but behind: its output is not read until the gateway
        # catches up (the command waits on its pipe), rather than dropped.
        self.paused = False
        self.sent = 0  # spool bytes the attached gateway has been sent
        self.attached = False
        self.exit: dict[str, Any] | None = None
        self.eof = False
        self.exit_sent = False
        self.eof_sent = False
        self.collected = False
        self.events: dict[int, int] = {}  # fd -> selector events registered
        self.status_buf = b""  # a held session's unfinished status line
        self.status_fd: int | None = None  # a host-view run's status pipe (status_pipe), read at its exit


class SessionIO:
    """Mixed into the Host: what it does for each session's fds. Needs the Host's attributes below."""

    sel: selectors.BaseSelector
    sessions: dict[int, Session]
    by_id: dict[str, Session]
    by_pid: dict[int, Session]
    behind: dict[Session, None]
    paused: dict[Session, None]
    took_at: float
    spool_fds: OrderedDict[Session, int]
    client: socket.socket | None
    out: bytearray
    exits: list[tuple[str, dict[str, Any]]]

    def _write_exits(self) -> None:
        """`<id>.exit` for each command reaped this round: the end outlives us and the gateway."""
        exits, self.exits = self.exits, []
        for sid, info in exits:
            try:
                write_file(f"{sid}.exit", json.dumps(info).encode(), atomic=True)
            except OSError as exc:
                log(f"exit of {sid} not written: {exc}")

    def _send(self, kind: int, chan: int, payload: bytes | memoryview = b"") -> None:
        self.out += HEADER.pack(len(payload), kind, chan)
        self.out += payload

    # -- commands' output
    def _gateway_behind(self, s: Session) -> bool:
        """The gateway is attached to `s`, still taking bytes, but has not taken everything yet (or its queue
        is full). A gateway that took nothing for STALLED_SEC (stopped, hung) is not waited for: a command
        never hangs on it, and what it misses past the spool cap is what it would have missed anyway."""
        return (
            self.client is not None
            and s.attached
            and (s.sent < s.spool_size or len(self.out) >= HIGH_WATER)
            and time.monotonic() - self.took_at < STALLED_SEC
        )

    def _read_output(self, s: Session, fd: int) -> bool:
        """Read once from a readable stream; True when bytes came (there may be more)."""
        if s.capped and s.streams.get(fd) != STATUS and self._gateway_behind(s):
            # Nowhere to put it: the spool is full and the gateway is busy. Stop reading this command until
            # it catches up (the command blocks on its pipe, as under any slow reader); nothing is dropped.
            s.paused = True
            self.paused[s] = None
            for out_fd in list(s.streams):
                self._update(s, out_fd)
            return False
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError as exc:  # EIO: the pty's other side is gone; ECONNRESET: a socket peer reset
            if exc.errno not in (errno.EIO, errno.ECONNRESET):
                raise
            data = b""
        if not data:
            self._close_stream(s, fd)
            return False
        stream = s.streams[fd]
        if stream == STATUS:
            self._status(s, data)
            return True
        size = SPOOL_HEADER.size + len(data)
        live = (
            self.client is not None and s.attached and s.sent == s.spool_size and len(self.out) < HIGH_WATER
        )
        if not s.capped and s.spool_size + size > s.spool_cap:
            s.capped = True  # the gateway keeps its own capped log; beyond this only live frames go
        if not s.capped and s.room is not None and not s.room.take(self._spool_fd(s), size):
            s.capped = True  # the disk's reserve reached: likewise (the gateway's log keeps it too)
        if not s.capped:
            os.write(self._spool_fd(s), SPOOL_HEADER.pack(stream, len(data)) + data)
            s.spool_size += size
            if live:
                s.sent = s.spool_size
            elif s.attached:
                self.behind[s] = None  # the spool is the buffer: sent from there once the gateway drains
        if live:
            self._send(OUT_KINDS[stream], s.chan, data)
        return True

    def _drain(self, s: Session) -> None:
        """What a command wrote before it ended is in its pipes when its exit is known: read it first, so
        the exit reaches the gateway after every byte before it (a gateway that sees the exit reads to EOF
        only while output keeps coming: a busy one judged the late bytes a stray's and lost them). Bounded:
        a stray that inherited the pipe may write forever."""
        for fd in [fd for fd, stream in s.streams.items() if stream != STATUS]:
            for _ in range(DRAIN_READS):
                if fd not in s.streams or not self._read_output(s, fd):
                    break

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

    def _status(self, s: Session, data: bytes) -> None:
        """A held command's status lines: its exit is the host's to record, as a reaped child's is."""
        s.status_buf = (s.status_buf + data)[-512:]
        while b"\n" in s.status_buf:
            line, s.status_buf = s.status_buf.split(b"\n", 1)
            words = line.decode("ascii", "replace").split()
            if len(words) == 2 and words[0] == "exit" and words[1].isdigit():
                self._ended(s, int(words[1]), None)

    def _ended(self, s: Session, code: int | None, sig: str | None) -> None:
        if s.exit is not None:
            return
        s.exit = {"code": code, "signal": sig, "endedAt": int(time.time() * 1000)}
        self._drain(s)
        self.exits.append((s.sid, s.exit))  # written once the gateway has been told (off its wait)
        self._notify(s)
        if s.collected:
            self._remove(s)

    def _close_stream(self, s: Session, fd: int) -> None:
        was_status = s.streams.pop(fd, None) == STATUS
        if fd == s.stdin_fd:
            s.stdin_fd = None
            self._input_dropped(s)
        self._update(s, fd)
        if s.sock is not None and fd == s.sock.fileno():
            s.sock.close()
            s.sock = None
        else:
            os.close(fd)
        if not s.streams and not s.eof:
            s.eof = True
            self._notify(s)
        # A held command's end (after the fd is closed: ending may remove the session and its fds).
        if was_status and s.exit is None:
            self._ended(s, None, "SIGKILL")  # the status writer vanished: the container or its runner died
        elif not s.pid and not s.streams and s.exit is None and s.pty:
            self._ended(s, None, None)  # a held terminal closed: its owner asks the engine for the code

    def _update(self, s: Session, fd: int) -> None:
        """Register `fd` for what it is used for now (output to read, input to write) or for nothing."""
        stream = s.streams.get(fd)
        want = selectors.EVENT_READ if stream is not None and not (s.paused and stream != STATUS) else 0
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
                log(f"spool of {s.sid} unreadable at {s.sent}: skipped")
                pos = s.spool_size - s.sent
            s.sent += pos

    def _resume_paused(self) -> None:
        """Read again from commands paused for a busy gateway once it has caught up with them (or went away:
        with no gateway, output past the cap goes nowhere, as before it paused)."""
        for s in list(self.paused):
            if self._gateway_behind(s):
                continue
            del self.paused[s]
            s.paused = False
            for fd in list(s.streams):
                self._update(s, fd)

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
            args = None
            if s.popen is not None:
                args = s.popen.args
                s.popen.returncode = raw  # reaped here: Popen must never wait on a recycled pid
                s.popen = None
            if s.status_fd is not None:
                code, sig = status_exit(s.status_fd, args, raw)
                s.status_fd = None
            else:
                code, sig = exit_of(args, raw)
            self._ended(s, code, sig)

    def _remove(self, s: Session) -> None:
        self._close_held_stdin(s)
        if s.status_fd is not None:
            os.close(s.status_fd)
            s.status_fd = None
        for fd in list(s.streams):
            self._close_stream(s, fd)
        self._close_spool(s)
        self.behind.pop(s, None)
        self.paused.pop(s, None)
        self.sessions.pop(s.chan, None)
        if self.by_id.get(s.sid) is s:
            del self.by_id[s.sid]

    def _input_dropped(self, s: Session) -> None:
        """The session's held input goes (its stdin is gone): counted as done, and told."""
        s.in_done += len(s.inbuf)
        s.inbuf.clear()
        self._tell_input(s)

    def _tell_input(self, s: Session) -> None:
        if s.in_done != s.in_told and s.attached and not s.collected:
            s.in_told = s.in_done
            self._send(INPUT_DONE, s.chan, INPUT_DONE_SIZE.pack(s.in_done))

    def _flush_input(self, s: Session) -> None:
        try:
            self._write_input(s)
        finally:
            self._tell_input(s)

    def _write_input(self, s: Session) -> None:
        fd = s.stdin_fd
        if fd is None:
            self._input_dropped(s)
            return
        try:
            while s.inbuf:
                n = os.write(fd, s.inbuf)
                del s.inbuf[:n]
                s.in_done += n
        except BlockingIOError:
            pass
        except OSError:  # EPIPE: the command closed its stdin
            self._input_dropped(s)
        if s.shut_pending and not s.inbuf and s.sock is not None:
            s.shut_pending = False
            s.stdin_fd = None
            with contextlib.suppress(OSError):
                s.sock.shutdown(socket.SHUT_WR)
        elif s.shut_pending and not s.inbuf:  # a held command's stdin FIFO: EOF is closing it
            s.shut_pending = False
            self._close_held_stdin(s)
            return
        self._update(s, fd)

    def _close_held_stdin(self, s: Session) -> None:
        """A held session's stdin is a descriptor of its own (a spawned one's is its socket or PTY)."""
        fd = s.stdin_fd
        if fd is None or fd in s.streams or (s.sock is not None and fd == s.sock.fileno()):
            return
        s.stdin_fd = None
        self._input_dropped(s)
        self._update(s, fd)
        with contextlib.suppress(OSError):
            os.close(fd)


def write_file(name: str, data: bytes, *, atomic: bool) -> None:
    """All of `data`, or OSError: a short write (a nearly full disk) is continued, never taken for the
    whole file; an atomic write that fails leaves no temp file. No fsync: these files outlive a gateway or
    host crash, not a power cut (the commands would not)."""
    path = f".{name}.tmp" if atomic else name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[written:]
    except BaseException:
        os.close(fd)
        if atomic:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    os.close(fd)
    if atomic:
        os.replace(path, name)


def log(line: str) -> None:
    with contextlib.suppress(OSError), open(LOG_NAME, "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {line}\n")
