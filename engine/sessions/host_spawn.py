"""How the session host starts a command: fork/exec in its own session, pipes, a socketpair or a PTY, and
verified fds put at the numbers the command names them by. Stdlib only (the host runs with `-I -S`)."""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import signal
import socket
import struct
import subprocess
import termios
from dataclasses import dataclass, field
from typing import Any

STDOUT, STDERR, PTY = 0, 1, 2
FDS_WANTED = 65536
# How long a run in the host view may take to hand over the terminal it makes (a bound on a stuck
# helper, so the session host is not held; a helper hands it over in a few ms).
TERMINAL_WAIT_SEC = 30.0
_SAID_MAX = 4096


@dataclass
class Started:
    """A started command and the host's ends of its stdio: `streams` maps each fd to read to its stream."""

    popen: subprocess.Popen[bytes]
    streams: dict[int, int] = field(default_factory=dict)
    stdin_fd: int | None = None
    sock: socket.socket | None = None  # the stdin+stdout socketpair end
    pty: bool = False


def start(msg: dict[str, Any], fds: list[int]) -> Started:
    """Start `msg`'s argv (JSON from the gateway); `fds` received by SCM_RIGHTS go to `msg["fds"]`."""
    targets = [int(t) for t in msg.get("fds") or ()]
    if len(targets) != len(fds) or any(t < 3 for t in targets):
        raise ValueError("passed descriptors do not match the spec")
    # Popen marks every pass_fds number inheritable in the child, so each must be open here. A number we do
    # not use gets the received fd itself until the child has started: nothing is left to move in the
    # child, which keeps Popen on its vfork path (no preexec_fn: ~1.5 ms less per command than a fork of
    # this process running Python in the child). Only a number the host uses itself is moved in the child.
    placeholders = []
    moves = []
    for target, src in zip(targets, fds, strict=True):
        if target == src:
            continue
        if _is_open(target):
            moves.append((src, target))
        else:
            placeholders.append(os.dup2(src, target, inheritable=False))
    pty = bool(msg.get("pty"))
    in_view = pty and bool(msg.get("ptyInView"))
    common: dict[str, Any] = {
        "cwd": msg.get("cwd") or None,
        "env": dict(msg["env"]),
        "close_fds": True,
        "pass_fds": targets,
        "start_new_session": True,
        "preexec_fn": _child_setup(pty and not in_view, moves),
    }
    try:
        if pty:
            cols, rows = int(msg.get("cols") or 120), int(msg.get("rows") or 40)
            if in_view:
                popen, master = start_view_pty(list(msg["argv"]), common, cols, rows)
                return Started(popen, {master: PTY}, master, pty=True)
            return _start_pty(list(msg["argv"]), common, cols, rows)
        return _start_pipes(list(msg["argv"]), common, stdin=bool(msg.get("stdin", True)))
    finally:
        for fd in placeholders:
            os.close(fd)


def _start_pty(argv: list[str], common: dict[str, Any], cols: int, rows: int) -> Started:
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        popen = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, **common)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return Started(popen, {master: PTY}, master, pty=True)


def start_view_pty(
    argv: list[str], popen_args: dict[str, Any], cols: int, rows: int
) -> tuple[subprocess.Popen[bytes], int]:
    """(Popen, master) of a run whose terminal the host view makes in the run's own /dev/pts
    (exechost-hostenter with a PTY word): the helper has a socket as stdout and stderr, sends the master
    over it, and waits for our go, given once the terminal has the session's size. Anything it says
    instead (it could not make the terminal) is the error. `popen_args` must start a new session: the
    helper is the terminal's session leader."""
    mine, theirs = socket.socketpair()
    try:
        child = theirs.fileno()
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=child, stderr=child, **popen_args)
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    try:
        return popen, _receive_terminal(mine, cols, rows)
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
        raise
    finally:
        mine.close()


def _receive_terminal(sock: socket.socket, cols: int, rows: int) -> int:
    sock.settimeout(TERMINAL_WAIT_SEC)
    said = b""
    space = socket.CMSG_SPACE(array.array("i").itemsize)
    while True:
        try:
            data, ancillary, _flags, _addr = sock.recvmsg(_SAID_MAX, space, socket.MSG_CMSG_CLOEXEC)
        except TimeoutError:
            raise OSError("the host view made no terminal in time") from None
        fds = array.array("i")
        for level, kind, cdata in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(cdata[: len(cdata) - len(cdata) % fds.itemsize])
        if fds:
            master, extra = fds[0], fds[1:]
            for fd in extra:
                os.close(fd)
            try:
                fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                sock.sendall(b"G")
            except BaseException:
                os.close(master)
                raise
            return master
        if not data:
            text = said.decode("utf-8", "replace").strip() or "it ended without one"
            raise OSError(f"the host view made no terminal: {text}")
        said = (said + data)[-_SAID_MAX:]


def _start_pipes(argv: list[str], common: dict[str, Any], *, stdin: bool) -> Started:
    """With stdin: one socketpair carries stdin and stdout (one fd here, not two); stderr is a pipe."""
    err_r, err_w = os.pipe()
    if stdin:
        mine, theirs = socket.socketpair()
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
        return Started(popen, {mine.fileno(): STDOUT, err_r: STDERR}, mine.fileno(), mine)
    out_r, out_w = os.pipe()
    try:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, **common)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    return Started(popen, {out_r: STDOUT, err_r: STDERR})


def _child_setup(pty: bool, moves: list[tuple[int, int]]) -> Any:
    """Runs in the child: take the PTY as controlling terminal; put each received fd at the number the
    command names it by (/proc/self/fd/N), staged above every number involved so none overwrites another.
    None (the fast vfork path) when there is nothing to do."""

    def setup() -> None:  # pragma: no cover - runs in the forked child
        if pty:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            # The host ignores SIGINT/SIGQUIT and an ignored signal survives exec: without this, ^C
            # typed into the terminal would do nothing (as engine.sessions.pty does for plain children).
            for sig in (signal.SIGINT, signal.SIGQUIT):
                signal.signal(sig, signal.SIG_DFL)
        top = max([2, *(s for s, _ in moves), *(d for _, d in moves)]) + 1
        staged = [(fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, top), dst) for src, dst in moves]
        for tmp, dst in staged:
            os.dup2(tmp, dst)

    return setup if pty or moves else None


def _is_open(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
    except OSError:
        return False
    return True


def raise_open_file_limit() -> None:
    """Two fds per idle pipe session: the soft limit goes to the hard one, and, where we may (root), to
    FDS_WANTED, so the host is not what stops 10,000 sessions."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in ((max(hard, FDS_WANTED), max(hard, FDS_WANTED)), (hard, hard)):
        if soft >= target[0]:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, target)
            return
        except (ValueError, OSError):
            continue
