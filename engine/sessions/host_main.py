"""The session host: one small process per state dir that owns every held command, so sessions outlive the
gateway (issue 20) while a command costs a fork/exec, not a Python start (issue 19).

Run as a script (`python -I -S host_main.py <holders dir>`, stdlib only: it imports nothing from a tree
anyone else could write; host_io.py, host_spawn.py and diskroom.py, next to it, are loaded by path). It takes
`host.lock` (one host per dir), detaches (setsid: a SIGKILL or restart of the gateway is not its end),
listens on `host.sock` (0600 in the 0700 dir, same-uid peers only) and serves one gateway at a time
over one multiplexed connection. For each command it starts (fork/exec, own session and process group,
pipes or a PTY) it is the parent, so it alone reaps it and learns its exit code; it

- appends every output chunk, framed, to `<id>.spool` (0600; capped) before or instead of sending it: the
  spool is the buffer, so a slow or absent gateway never stalls a command, and a gateway that attaches
  later is sent the spool from byte 0, then live frames;
- writes `<id>.json` (what the session is) before the spawn, again with the pid once the reply is sent
  (not for a command that already ended: its pid names nothing), and `<id>.exit` (code, signal, time)
  at the end;
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
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import termios
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

if __package__:  # imported (tests, type checks)
    from engine.sessions import diskroom, host_spawn
    from engine.sessions import host_io as hio
else:  # run as a script, isolated (-I: no sys.path entry for our dir): the sibling files, by their paths
    import importlib.util

    def _sibling(name: str) -> Any:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"exechost_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)
        return module

    hio = _sibling("host_io")  # the wire and spool format, shared with the gateway, and per-session I/O
    host_spawn = _sibling("host_spawn")
    diskroom = _sibling("diskroom")  # the reserve the spools leave on the state dir's filesystem

hio.ROOM = diskroom.Room

LOCK_NAME = "host.lock"
MAX_PAYLOAD = 16 * 1024 * 1024
USHORT_MAX = 0xFFFF  # a terminal's rows and columns (struct winsize)
MAX_INPUT_BACKLOG = 16 * 1024 * 1024
IDLE_EXIT_SEC = 10.0  # no gateway and no session this long: the host ends
CHECK_SEC = 2.0  # how often the host checks its socket is still there (state dir deleted?)
KILL_GRACE_SEC = 3.0
LOCK_WAIT_SEC = 5.0
LINGER_SEC = 0.002
LINGER_MAX_BYTES = 256 * 1024


class Host(hio.SessionIO):
    def __init__(self, lock_fd: int) -> None:
        self.lock_fd = lock_fd
        self.sel = selectors.DefaultSelector()
        self.sessions: dict[int, hio.Session] = {}  # chan -> session
        self.by_id: dict[str, hio.Session] = {}
        self.by_pid: dict[int, hio.Session] = {}
        self.next_chan = 1
        self.paused: dict[hio.Session, None] = {}  # sessions not read until the gateway catches up
        self.took_at = time.monotonic()  # when the gateway last took bytes from us
        self.behind: dict[hio.Session, None] = {}  # attached sessions whose spool is ahead of what was sent
        self.spool_fds: OrderedDict[hio.Session, int] = OrderedDict()
        self.client: socket.socket | None = None
        self.hello = False
        self.bye = False
        self.inbuf = bytearray()
        self.out = bytearray()
        self.fd_queue: list[int] = []
        self.exits: list[tuple[str, dict[str, Any]]] = []
        self.metas: list[tuple[hio.Session, object]] = []  # `<id>.json` with the pid, written after the reply
        self.linger: tuple[float, hio.Session] | None = None  # hold our writes until then, or its end
        self.idle_since = time.monotonic()
        self.checked_at = time.monotonic()
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # not SIG_IGN: that would reap for us
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.listener = self._listen()
        st = os.stat(hio.SOCKET_NAME)
        self.socket_id = (st.st_dev, st.st_ino)

    # -- start
    def _listen(self) -> socket.socket:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hio.SOCKET_NAME)  # we hold the lock: whatever is there is stale
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(hio.SOCKET_NAME)
        finally:
            os.umask(old)
        os.chmod(hio.SOCKET_NAME, 0o600)
        sock.listen(16)
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, "accept")
        return sock

    # -- loop
    def run(self) -> None:
        while True:
            timeout = CHECK_SEC if self.linger is None else max(0.0, self.linger[0] - time.monotonic())
            for key, mask in self.sel.select(timeout):
                try:
                    self._event(key, mask)
                except Exception as exc:  # one session's failure is never the host's end
                    hio.log(f"event {key.data!r}: {type(exc).__name__}: {exc}")
            self._catch_up()
            self._resume_paused()
            now = time.monotonic()
            if self.linger is not None:
                until, s = self.linger
                if now >= until or (s.exit_sent and s.eof_sent) or len(self.out) >= LINGER_MAX_BYTES:
                    self.linger = None
            if self.linger is None:
                self._flush()
                metas, self.metas = self.metas, []
                for held, meta in metas:
                    if held.exit is None:  # an ended command's pid names nothing (adoption reads it live)
                        self._write_meta(held, meta)
                if self.exits:
                    self._write_exits()
            if now - self.checked_at >= CHECK_SEC:
                self.checked_at = now
                if not self._reachable():
                    self._abandon()
                    return
            if self.client is not None or self.sessions:
                self.idle_since = now
            elif self.bye or now - self.idle_since >= IDLE_EXIT_SEC:
                self._exit()
                return

    def _event(self, key: selectors.SelectorKey, mask: int) -> None:
        data = key.data
        if isinstance(data, hio.Session):
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
        self.bye = False
        conn.setblocking(False)
        self.client = conn
        self.hello = False
        self.sel.register(conn, selectors.EVENT_READ, "client")

    def _drop_client(self) -> None:
        self.linger = None
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

    def _reply(self, req: object, result: dict[str, Any]) -> None:
        self._send(
            hio.REPLY, req if isinstance(req, int) and 0 <= req < 2**32 else 0, json.dumps(result).encode()
        )

    def _flush(self) -> None:
        if self.client is None:
            return
        try:
            while self.out:
                n = self.client.send(self.out)
                del self.out[:n]
                self.took_at = time.monotonic()
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
            data, fds, flags, _ = socket.recv_fds(self.client, 262144, hio.MAX_FDS)
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
        while len(buf) - pos >= hio.HEADER.size:
            size, kind, chan = hio.HEADER.unpack_from(buf, pos)
            if size > MAX_PAYLOAD:
                self._drop_client()
                return
            end = pos + hio.HEADER.size + size
            if end > len(buf):
                break
            payload = bytes(buf[pos + hio.HEADER.size : end])
            pos = end
            try:
                self._command(kind, chan, payload)
            except Exception as exc:  # one bad command fails alone: escaping here kept these frames in
                # `inbuf`, read again after every later read, and no command behind them ever ran
                hio.log(f"command {kind} on {chan}: {type(exc).__name__}: {exc}")
            if self.client is None:
                return
        del buf[:pos]

    def _command(self, kind: int, chan: int, payload: bytes) -> None:
        if not self.hello:
            self._hello(kind, payload)
            return
        on_session = SESSION_COMMANDS.get(kind)
        if on_session is not None:
            s = self.sessions.get(chan)
            if s is not None:
                on_session(self, s, payload)
            return
        handler = COMMANDS.get(kind)
        if handler is not None:
            handler(self, json.loads(payload) if payload else {})

    def _hello(self, kind: int, payload: bytes) -> None:
        msg = json.loads(payload) if kind == hio.HELLO else {}
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]  # how many sessions the gateway may send
        hello = {"version": hio.VERSION, "pid": os.getpid(), "fdLimit": limit, "inputDone": True}
        self._send(hio.HELLO, 0, json.dumps(hello).encode())
        if msg.get("version") != hio.VERSION:
            self._flush()
            self._drop_client()  # another format: the gateway says why and runs without us
            return
        self.hello = True

    def _take_fds(self, msg: dict[str, Any]) -> list[int]:
        count = msg.get("nfds", 0) if isinstance(msg.get("nfds", 0), int) else 0
        fds, self.fd_queue = self.fd_queue[:count], self.fd_queue[count:]
        return fds

    def _cmd_spawn(self, msg: dict[str, Any]) -> None:
        fds = self._take_fds(msg)
        try:
            s = self._spawn(msg, fds)
            self._reply(msg.get("req"), {"chan": s.chan, "pid": s.pid, "pty": s.pty})
            # A quick command's reply, output, EOF and exit go in one write: one wake-up of the
            # gateway instead of two. A command still running when the linger ends is answered then.
            self.linger = (time.monotonic() + LINGER_SEC, s)
            # The pid goes to `<id>.json` after the reply is sent (the claim before the spawn is what
            # a next gateway relies on): one file write less between the command and its result.
            self.metas.append((s, msg.get("meta")))
        except Exception as exc:  # the command could not start: say why
            err = getattr(exc, "errno", None)
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            reply = {"error": f"{type(exc).__name__}: {exc}", "errno": err, "fdLimit": limit}
            self._reply(msg.get("req"), reply)
        finally:
            for fd in fds:
                os.close(fd)

    def _cmd_hold(self, msg: dict[str, Any]) -> None:
        fds = self._take_fds(msg)
        try:
            s = self._hold(msg, fds)
        except Exception as exc:
            for fd in fds:
                os.close(fd)
            self._reply(msg.get("req"), {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._reply(msg.get("req"), {"chan": s.chan, "pid": 0, "pty": False})
        self._write_meta(s, msg.get("meta"))
        if s.status_buf:  # after the reply: the gateway knows the channel before its exit
            self._status(s, b"")

    def _cmd_list(self, msg: dict[str, Any]) -> None:
        rows = [
            {"id": s.sid, "chan": s.chan, "pid": s.pid, "exited": s.exit is not None}
            for s in self.sessions.values()
        ]
        self._reply(msg.get("req"), {"sessions": rows})

    def _cmd_attach(self, msg: dict[str, Any]) -> None:
        s = self.by_id.get(msg.get("id"))  # type: ignore[arg-type]
        if s is None or s.collected:
            self._reply(msg.get("req"), {"error": "unknown session"})
            return
        s.attached, s.sent, s.eof_sent, s.exit_sent = True, 0, False, False
        s.in_done = s.in_told = 0  # this gateway counts from here: it is told what is held now
        reply = {"chan": s.chan, "pid": s.pid, "pty": s.pty, "inputHeld": len(s.inbuf)}
        self._reply(msg.get("req"), reply)
        self.behind[s] = None  # the spool from byte 0, then live

    def _cmd_forget(self, msg: dict[str, Any]) -> None:
        if not hio.valid_id(msg.get("id")):
            return
        self.metas = [(s, meta) for s, meta in self.metas if s.sid != msg["id"]]  # never written back
        for suffix in ("json", "spool", "exit", "done"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{msg['id']}.{suffix}")

    def _cmd_bye(self, msg: dict[str, Any]) -> None:
        """A gateway that stops on purpose: with nothing left to hold, we go too (it closes next)."""
        self.bye = True

    # -- one session's commands

    def _session_write(self, s: hio.Session, payload: bytes) -> None:
        """The gateway charged these bytes to the agent's input budget (engine.sessions.quota), which is
        below MAX_INPUT_BACKLOG; the cap here is for a gateway that did not. Bytes not kept are told as
        done at once, so the gateway's count stays exact."""
        if s.stdin_fd is not None and len(s.inbuf) + len(payload) <= MAX_INPUT_BACKLOG:
            s.inbuf += payload
            self._flush_input(s)
        else:
            s.in_done += len(payload)
            self._tell_input(s)

    def _session_eof(self, s: hio.Session, payload: bytes) -> None:
        if s.pty:
            if s.stdin_fd is not None:
                s.inbuf += b"\x04"  # a terminal has no half-close: EOT is what a user's ^D sends
                self._flush_input(s)
        elif s.sock is not None or s.stdin_fd is not None:
            s.shut_pending = True
            self._flush_input(s)

    def _session_resize(self, s: hio.Session, payload: bytes) -> None:
        if s.pty and s.stdin_fd is not None and s.pid:  # a held terminal is resized by its owner
            msg = json.loads(payload)
            rows, cols = (min(max(1, int(msg[k])), USHORT_MAX) for k in ("rows", "cols"))
            size = struct.pack("HHHH", rows, cols, 0, 0)
            fcntl.ioctl(s.stdin_fd, termios.TIOCSWINSZ, size)

    def _session_signal(self, s: hio.Session, payload: bytes) -> None:
        if s.exit is None and s.pid:  # not reaped: the group cannot be a recycled one
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(s.pid, int(json.loads(payload)["sig"]))

    def _session_close(self, s: hio.Session, payload: bytes) -> None:
        """The gateway recorded the end (or gave up on strays): stop reading."""
        s.collected = True
        s.attached = False
        self._close_held_stdin(s)
        for fd in list(s.streams):
            self._close_stream(s, fd)
        self._close_spool(s)
        self.behind.pop(s, None)
        if s.exit is not None:
            self._remove(s)

    # -- spawning
    def _spawn(self, msg: dict[str, Any], fds: list[int]) -> hio.Session:
        sid = msg["id"]
        if not hio.valid_id(sid) or sid in self.by_id:
            raise ValueError(f"bad or duplicate session id {sid!r}")
        claimed = self._claim(sid, msg.get("meta"))
        # A host-view run's status pipe (hio.status_pipe): its write end goes with the received fds, at its
        # own number, and is closed with them after the spawn (_cmd_spawn).
        targets = [t for t in msg.get("fds") or () if isinstance(t, int)]
        argv, status_fd, status_w = hio.status_pipe(list(msg["argv"]), max([2, *targets]))
        if status_w is not None:
            msg = {**msg, "argv": argv, "fds": [*(msg.get("fds") or ()), status_w]}
            fds.append(status_w)
        try:
            started = host_spawn.start(msg, fds)
        except BaseException:
            if status_fd is not None:
                os.close(status_fd)
            if claimed:  # nothing ran: the file must not say otherwise
                with contextlib.suppress(OSError):
                    os.unlink(f"{sid}.json")
            raise
        s = hio.Session(sid, self.next_chan, int(msg.get("spoolCap") or 64 * 1024 * 1024))
        self.next_chan += 1
        s.popen, s.pid, s.pty = started.popen, started.popen.pid, started.pty
        s.streams, s.stdin_fd, s.sock = started.streams, started.stdin_fd, started.sock
        s.status_fd = status_fd
        s.attached = True
        self.sessions[s.chan] = s
        self.by_id[sid] = s
        self.by_pid[s.pid] = s
        for fd in s.streams:
            os.set_blocking(fd, False)
            self._update(s, fd)
        return s

    def _hold(self, msg: dict[str, Any], fds: list[int]) -> hio.Session:
        """Hold streams someone else started (a sandbox command's FIFOs): spooled and relayed like a
        child's, its end read from the status stream; signals are the gateway's to send (s.pid stays 0)."""
        sid, names = msg.get("id"), msg.get("streams")
        if not hio.valid_id(sid) or sid in self.by_id:
            raise ValueError(f"bad or duplicate session id {sid!r}")
        if not isinstance(names, list) or len(names) != len(fds) or not {"status", "pty"} & set(names):
            raise ValueError("held streams do not match the descriptors")
        s = hio.Session(str(sid), self.next_chan, int(msg.get("spoolCap") or 64 * 1024 * 1024))
        seen = msg.get("status")  # status bytes the gateway read before handing over (an exit, maybe)
        s.status_buf = seen.encode("latin-1")[-512:] if isinstance(seen, str) else b""
        for name, fd in zip(names, fds, strict=True):
            if name == "stdin":
                s.stdin_fd = fd
            elif name == "pty":  # a terminal stream both ways (a `docker exec -t` socket)
                s.streams[fd], s.stdin_fd, s.pty = 2, fd, True
            elif name in hio.HELD_STREAMS:
                s.streams[fd] = hio.HELD_STREAMS[name]
            else:
                raise ValueError(f"unknown held stream {name!r}")
            os.set_blocking(fd, False)
        self.next_chan += 1
        s.attached = True
        self.sessions[s.chan] = s
        self.by_id[s.sid] = s
        for fd in s.streams:
            self._update(s, fd)
        return s

    @staticmethod
    def _claim(sid: str, meta: object) -> bool:
        """`<id>.json` before the spawn, or no spawn: a next gateway that finds no file for a run it was
        starting may then start it (it never ran), while one that finds it never runs it twice. A full
        disk or no inode left (an agent can do that) is an error here, not a command that ran unrecorded."""
        if not isinstance(meta, dict):
            return False
        try:
            hio.write_file(f"{sid}.json", json.dumps(meta).encode(), atomic=False)
        except OSError as exc:
            # Made but not filled (ENOSPC after the open): an empty claim would tell the next gateway a
            # run that never started may have, so it would never start it. Nothing started: no claim.
            with contextlib.suppress(OSError):
                os.unlink(f"{sid}.json")
            raise OSError(exc.errno, f"session file not written, so not started ({exc.strerror})") from exc
        return True

    @staticmethod
    def _write_meta(s: hio.Session, meta: object) -> None:
        """`<id>.json` again, with the pid: what the session is, for the next gateway (never its env).
        Replaced whole (a failure keeps the claim written before the spawn)."""
        if isinstance(meta, dict):
            try:
                row = {**meta, "pid": s.pid} if s.pid else meta  # a held command's pid is its owner's
                hio.write_file(f"{s.sid}.json", json.dumps(row).encode(), atomic=s.popen is not None)
            except OSError as exc:
                hio.log(f"session file of {s.sid} not written: {exc}")

    # -- the end
    def _reachable(self) -> bool:
        """Our socket file is still the one we bound: when it (or the whole state dir) was removed, no
        gateway can ever reach these sessions again, so the host ends them, as the gateway stops itself."""
        try:
            st = os.stat(hio.SOCKET_NAME)
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
            st = os.stat(hio.SOCKET_NAME)
            if (st.st_dev, st.st_ino) == self.socket_id:  # never someone else's file at that path
                os.unlink(hio.SOCKET_NAME)
        self.listener.close()
        self._drop_client()


# The gateway's commands, by frame kind: those on one session's channel, and the host's own.
SESSION_COMMANDS: dict[int, Callable[[Host, hio.Session, bytes], None]] = {
    hio.WRITE: Host._session_write,
    hio.EOF: Host._session_eof,
    hio.RESIZE: Host._session_resize,
    hio.SIGNAL: Host._session_signal,
    hio.CLOSE: Host._session_close,
}
COMMANDS: dict[int, Callable[[Host, dict[str, Any]], None]] = {
    hio.SPAWN: Host._cmd_spawn,
    hio.HOLD: Host._cmd_hold,
    hio.LIST: Host._cmd_list,
    hio.ATTACH: Host._cmd_attach,
    hio.FORGET: Host._cmd_forget,
    hio.BYE: Host._cmd_bye,
}


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


def _dropped(signum: int, frame: object) -> None:
    """The host outlives its gateway's terminal (SIGHUP) and a ^C or ^\\ there (SIGINT, SIGQUIT)."""


def main() -> int:
    if len(sys.argv) != 2:
        return 2
    os.chdir(sys.argv[1])  # every path below is short and relative to the holders dir
    # Detach: the gateway reaps this first process at once; the host lives on in a new session.
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    # SIGHUP and SIGINT are caught and dropped, not ignored: an ignored signal stays ignored across exec, so
    # every command started here would ignore them too (^C typed into a PTY session did nothing); a caught
    # one is reset to the default by exec. SIGQUIT too: a gateway started by `&` in a script (job control
    # off) inherits SIGINT and SIGQUIT ignored, and would hand that on. (SIGPIPE: Popen restores it.)
    signal.signal(signal.SIGHUP, _dropped)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, _dropped)
    signal.signal(signal.SIGQUIT, _dropped)
    host_spawn.raise_open_file_limit()
    try:
        lock = _take_lock()
        if lock is None:
            sys.stdout.write("busy\n")  # another host serves this dir
            sys.stdout.flush()
            return 0
        with contextlib.suppress(OSError):
            if os.stat(hio.LOG_NAME).st_size > 1024 * 1024:
                os.truncate(hio.LOG_NAME, 0)
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
    hio.log("started")
    host.run()
    hio.log("ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
