"""One gateway per state dir: the pid file it holds locked for its life, and the socket path it may take."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from engine import statefs, unixsock


class GatewayBusy(Exception):
    """Another live gateway owns the state dir's socket."""


def take_lock(state_dir: Path) -> int:
    """Hold gateway.pid locked for the daemon's life (its fd is returned): a second daemon fails here
    instead of racing."""
    path = state_dir / "gateway.pid"
    statefs.refuse_symlink(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, statefs.FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise GatewayBusy(f"a gateway is already running (pid {other or '?'}) for {state_dir}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def check_stale_socket(socket_path: str | Path) -> None:
    """A live socket is never stolen; a dead one (no listener) is removed. Anything else is refused."""
    path = Path(socket_path)
    problem = unixsock.socket_path_problem(path)
    if problem is not None:
        raise GatewayBusy(f"{path}: socket path {problem}; refusing to replace it")
    if not path.exists():
        return
    if unixsock.socket_is_live(path, timeout=1.0):
        raise GatewayBusy(f"another gateway is answering on {path}")
    os.unlink(path)


def release_lock(fd: int) -> None:
    """Let gateway.pid go, emptied first: the next gateway takes the lock."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)
