"""A session's holder: the small process that owns one command's pipes or PTY so it outlives the gateway.

Run as a script (`python -I -S holder_main.py`, stdlib only, so it starts fast and imports nothing from a
tree anyone else could write). It reads its spec as one JSON line on stdin, detaches (fork, setsid: a
SIGKILL or a restart of the gateway is not its end), starts the command as its own child (so it alone
can reap it and learn its exit code), and then, until the command has exited and its output is drained:

- appends every output chunk, framed, to the session's spool file (0600; capped), so output written while
  no gateway runs is kept;
- serves one gateway at a time on a Unix socket (0600, same-uid peers only): on `attach` it sends the
  spool from the start, then live frames; `write`, `close-stdin`, `resize` and `close` act on the command;
- writes the exit (code, signal, time) atomically to the exit file, and tells an attached gateway.

Frames (spool and socket alike): 1 byte stream (0 stdout, 1 stderr, 2 pty, 255 control JSON), 4 bytes
big-endian length, the bytes. The gateway sends JSON lines.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import sys
import termios
import time

STREAMS = {"stdout": 0, "stderr": 1, "pty": 2}
CONTROL = 255
HEADER = struct.Struct(">BI")
READ_CHUNK = 65536
MAX_CLIENT_BACKLOG = 16 * 1024 * 1024  # a gateway this far behind is dropped (it re-attaches)
MAX_LINE = 1024 * 1024
SOCKET_CHECK_SEC = 2.0  # how often the holder checks its socket is still there (state dir deleted?)
KILL_GRACE_SEC = 3.0


def _frame(stream: int, data: bytes) -> bytes:
    return HEADER.pack(stream, len(data)) + data


def _control(obj: dict) -> bytes:
    return _frame(CONTROL, json.dumps(obj).encode())


class Holder:
    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.sel = selectors.DefaultSelector()
        self.fds: dict[int, int] = {}  # child output fd -> stream id
        self.stdin_fd: int | None = None
        self.master: int | None = None
        self.pid = 0
        self.pidfd: int | None = None
        self.exit: dict | None = None
        self.exited_at = 0.0
        self.client: socket.socket | None = None
        self.client_in = b""
        self.client_out = bytearray()
        self.collected = False  # a gateway recorded the end and said `close`
        self.attached = False  # the connected gateway asked for the spool; live frames follow it
        self.socket_id = (0, 0)
        self.checked_at = time.monotonic()
        self.spool_cap = int(spec.get("spoolCap") or 64 * 1024 * 1024)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self.spool = os.open(spec["spool"], flags, 0o600)
        self.spool_size = os.fstat(self.spool).st_size
        self.listener = self._listen(spec["socket"])

    # -- start
    def _listen(self, path: str) -> socket.socket:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(4)
        sock.setblocking(False)
        st = os.stat(path)
        self.socket_id = (st.st_dev, st.st_ino)
        self.sel.register(sock, selectors.EVENT_READ, "accept")
        return sock

    def start(self) -> None:
        spec = self.spec
        argv, env, cwd = spec["argv"], spec["env"], spec["cwd"]
        if spec.get("pty"):
            master, slave = os.openpty()
            os.set_inheritable(slave, False)
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", spec["rows"], spec["cols"], 0, 0))
            pid = os.fork()
            if pid == 0:
                try:
                    os.setsid()
                    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                    for fd in (0, 1, 2):
                        os.dup2(slave, fd)
                    place_fds(spec.get("fds") or [], [int(n) for n in spec.get("passFds") or []])
                    os.chdir(cwd)
                    os.execvpe(argv[0], argv, env)  # noqa: S606 - the argv the policy decided on
                finally:
                    os._exit(127)
            os.close(slave)
            self.master = self.stdin_fd = master
            self.fds[master] = STREAMS["pty"]
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            in_r, in_w = os.pipe() if spec.get("stdin", True) else (None, None)
            pid = os.fork()
            if pid == 0:
                try:
                    os.setsid()
                    os.dup2(in_r if in_r is not None else os.open(os.devnull, os.O_RDONLY), 0)
                    os.dup2(out_w, 1)
                    os.dup2(err_w, 2)
                    place_fds(spec.get("fds") or [], [int(n) for n in spec.get("passFds") or []])
                    os.chdir(cwd)
                    os.execvpe(argv[0], argv, env)  # noqa: S606 - the argv the policy decided on
                finally:
                    os._exit(127)
            for child_end in (out_w, err_w, in_r):
                if child_end is not None:
                    os.close(child_end)
            self.fds[out_r] = STREAMS["stdout"]
            self.fds[err_r] = STREAMS["stderr"]
            self.stdin_fd = in_w
        for fd in spec.get("fds") or []:  # the command holds its copies now
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pid = pid
        for fd in self.fds:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, "out")
        self.pidfd = os.pidfd_open(pid)
        self.sel.register(self.pidfd, selectors.EVENT_READ, "exit")

    # -- loop
    def run(self) -> None:
        while True:
            # Done only when a gateway has taken the end (`close`): a command that ends while no gateway
            # runs (or before the first one attached) waits here, spool and exit on disk, to be collected.
            if self.exit is not None and self.collected and not self.fds:
                self._finish()
                return
            if not self._reachable():
                self._abandon()
                return
            for key, _ in self.sel.select(SOCKET_CHECK_SEC):
                kind = key.data
                if kind == "out":
                    self._read_output(key.fd)
                elif kind == "exit":
                    self._reap()
                elif kind == "accept":
                    self._accept()
                elif kind == "client":
                    self._client_io()

    def _read_output(self, fd: int) -> None:
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:  # EIO: the pty's other side is gone (all holders of the slave exited)
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self._drop_fd(fd)
            return
        frame = _frame(self.fds[fd], data)
        if self.spool_size + len(frame) <= self.spool_cap:
            os.write(self.spool, frame)
            self.spool_size += len(frame)
        self._send(frame)

    def _drop_fd(self, fd: int) -> None:
        self.sel.unregister(fd)
        self.fds.pop(fd, None)
        if fd != self.master:
            os.close(fd)
        if not self.fds:
            self._send(_control({"type": "eof"}))

    def _reap(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid == 0:
            return
        assert self.pidfd is not None
        self.sel.unregister(self.pidfd)
        os.close(self.pidfd)
        raw = os.waitstatus_to_exitcode(status)
        code: int | None = raw if raw >= 0 else None
        sig = None
        if raw < 0:
            try:
                sig = signal.Signals(-raw).name
            except ValueError:
                sig = f"SIG{-raw}"
        self.exit = {"type": "exit", "code": code, "signal": sig, "endedAt": int(time.time() * 1000)}
        self._write_exit(self.exit)
        self._send(_control(self.exit))

    def _write_exit(self, exit_info: dict) -> None:
        path = self.spec["exit"]
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(exit_info))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def _reachable(self) -> bool:
        """Our socket file is still the one we bound: when it (or the whole state dir) was removed, no
        gateway can ever reach this session again, so the holder ends it, as the gateway stops itself."""
        now = time.monotonic()
        if now - self.checked_at < SOCKET_CHECK_SEC:
            return True
        self.checked_at = now
        try:
            st = os.stat(self.spec["socket"])
        except FileNotFoundError:
            return False
        except OSError:
            return True
        return (st.st_dev, st.st_ino) == self.socket_id

    def _abandon(self) -> None:
        if self.exit is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, sig)
                deadline = time.monotonic() + KILL_GRACE_SEC
                while time.monotonic() < deadline:
                    if os.waitpid(self.pid, os.WNOHANG)[0] != 0:
                        return
                    time.sleep(0.05)
        self._close_all()

    def _finish(self) -> None:
        os.fsync(self.spool)
        if self.client is not None:
            self.client.setblocking(True)
            with contextlib.suppress(OSError):
                self.client.sendall(bytes(self.client_out))
        self._close_all()

    def _close_all(self) -> None:
        with contextlib.suppress(OSError):
            st = os.stat(self.spec["socket"])
            if (st.st_dev, st.st_ino) == self.socket_id:  # never someone else's file at that path
                os.unlink(self.spec["socket"])
        for fd in list(self.fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    # -- the gateway
    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.close()
            return
        if self.client is not None:  # a new gateway replaces the old one
            self._drop_client()
        conn.setblocking(False)
        self.client = conn
        self.attached = False
        self.client_in = b""
        self.client_out = bytearray()
        self.sel.register(conn, selectors.EVENT_READ, "client")

    def _drop_client(self) -> None:
        if self.client is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self.client)
        self.client.close()
        self.client = None
        self.client_out = bytearray()

    def _send(self, frame: bytes) -> None:
        if self.client is None or not self.attached:
            return  # before `attach`, the spool replay will carry this frame
        self.client_out += frame
        if len(self.client_out) > MAX_CLIENT_BACKLOG:
            self._drop_client()
            return
        self._flush()

    def _flush(self) -> None:
        if self.client is None:
            return
        try:
            while self.client_out:
                n = self.client.send(self.client_out)
                del self.client_out[:n]
        except BlockingIOError:
            pass
        except OSError:
            self._drop_client()
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.client_out else 0)
        self.sel.modify(self.client, events, "client")

    def _client_io(self) -> None:
        assert self.client is not None
        self._flush()
        if self.client is None:
            return
        try:
            data = self.client.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop_client()
            return
        self.client_in += data
        if len(self.client_in) > MAX_LINE:
            self._drop_client()
            return
        while b"\n" in self.client_in:
            line, self.client_in = self.client_in.split(b"\n", 1)
            try:
                self._command(json.loads(line))
            except (ValueError, TypeError, KeyError, OSError):
                continue

    def _command(self, msg: dict) -> None:
        op = msg.get("op")
        if op == "attach":
            self._attach()
        elif op == "write" and self.stdin_fd is not None:
            self._write_stdin(base64.b64decode(msg["data"]))
        elif op == "close-stdin" and self.stdin_fd is not None:
            if self.master is not None:
                self._write_stdin(b"\x04")
            else:
                os.close(self.stdin_fd)
                self.stdin_fd = None
        elif op == "resize" and self.master is not None:
            size = struct.pack("HHHH", int(msg["rows"]), int(msg["cols"]), 0, 0)
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)
        elif op == "close":  # the gateway has what it needs (or gave up on strays): stop reading
            self.collected = True
            for fd in list(self.fds):
                self._drop_fd(fd)

    def _attach(self) -> None:
        """Everything so far from the spool, then live: the gateway rebuilds the session from byte 0."""
        self.attached = True
        hello = {"type": "hello", "pid": self.pid, "pty": self.master is not None}
        self.client_out += _control(hello)
        with open(self.spec["spool"], "rb") as fh:
            self.client_out += fh.read(self.spool_size)
        if self.exit is not None:
            self.client_out += _control(self.exit)
        if not self.fds:
            self.client_out += _control({"type": "eof"})
        self._flush()

    def _write_stdin(self, data: bytes) -> None:
        assert self.stdin_fd is not None
        view = memoryview(data)
        os.set_blocking(self.stdin_fd, True)
        try:
            while view:
                view = view[os.write(self.stdin_fd, view) :]
        finally:
            os.set_blocking(self.stdin_fd, False)


def read_spec() -> tuple[dict | None, list[int]]:
    """The spec line from stdin, a Unix socket: the fds the command must find at fixed numbers (sealed
    copies of verified content, /proc/self/fd/N in its argv) come with it as SCM_RIGHTS."""
    sock = socket.socket(fileno=0)
    data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 64)
    while data and not data.endswith(b"\n"):
        more = sock.recv(1 << 16)
        if not more:
            break
        data += more
    sock.detach()  # fd 0 stays ours to replace with /dev/null later
    for fd in fds:
        os.set_inheritable(fd, False)  # only place_fds's copies reach the command
    if not data.strip():
        return None, fds
    return json.loads(data), fds


def place_fds(received: list[int], targets: list[int]) -> None:
    """In the child: each received fd at the number the command was given (inheritable), whatever fds sit
    there now (the pipes' own numbers are close-on-exec and already copied to 0-2)."""
    floor = max([*targets, *received, 2]) + 1
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in received]
    for fd, target in zip(high, targets, strict=True):
        os.dup2(fd, target, inheritable=True)


def main() -> int:
    spec, fds = read_spec()
    if spec is None:
        return 0  # a spare nobody needed (its gateway stopped): nothing to hold
    targets = [int(n) for n in spec.get("passFds") or []]
    if len(targets) != len(fds):
        sys.stdout.write(json.dumps({"error": "the command's fds did not arrive"}) + "\n")
        sys.stdout.flush()
        return 1
    spec["fds"] = fds
    # Detach: the gateway reaps this first process at once; the holder lives on in a new session.
    if os.fork() > 0:
        os._exit(0)  # no interpreter teardown: the gateway is waiting for this exit
    os.setsid()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        holder = Holder(spec)
        holder.start()
    except Exception as exc:
        sys.stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        sys.stdout.flush()
        return 1
    sys.stdout.write(json.dumps({"pid": holder.pid, "holder": os.getpid()}) + "\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    holder.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
