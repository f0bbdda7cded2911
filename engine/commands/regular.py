"""Every file a vet or a binding reads is read one way: regular files only, never blocking, never past a cap.

A FIFO (or a device, a socket) planted where a vet expects a file — `.git/HEAD`, `commondir`, a Makefile, a
script operand — must neither hang the thread that decides (nor the event loop that re-vets) nor be taken
for content: it is opened O_NONBLOCK, seen by fstat not to be a regular file, never read, and reported, so
the decision asks and says why (issue 27, round 4)."""

from __future__ import annotations

import errno
import os
import stat

from engine.commands import hostprivate
from engine.statefs import state_dir

__all__ = ["Unreadable", "open_regular", "read_fd", "read_regular"]

# O_NOCTTY: a terminal planted where a file is expected must never become the gateway's controlling tty
# (a daemon is a session leader without one; opening a free pty would hand it ^C and SIGHUP).
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class Unreadable(Exception):
    """A file that cannot be read as content: absent, not a regular file, or over its cap."""

    def __init__(self, path: str, reason: str, code: int = 0, *, over: bool = False) -> None:
        super().__init__(f"{path}: {reason}" if code else f"{path} {reason}")
        self.path = path
        self.reason = reason
        self.errno = code  # the open's errno; 0 when the file is there but not content
        self.over = over  # there, and larger than the reader's cap

    @property
    def absent(self) -> bool:
        """Nothing is there (as opposed to something that is not a file the caller may read)."""
        return self.errno in (errno.ENOENT, errno.ENOTDIR)


def open_regular(path: str, *, follow: bool = True) -> tuple[int, os.stat_result]:
    """An fd on the regular file at `path`, with its fstat. `follow=False` when the caller resolved the
    path already (its last component must then not be a link). Raises Unreadable otherwise."""
    try:
        fd = os.open(path, _FLAGS if follow else _FLAGS | os.O_NOFOLLOW)
    except OSError as exc:
        raise Unreadable(path, exc.strerror or str(exc), exc.errno or errno.EIO) from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise Unreadable(path, exc.strerror or str(exc), exc.errno or errno.EIO) from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Unreadable(path, "is not a regular file")
    return fd, st


def read_fd(fd: int, size: int, limit: int, path: str = "") -> bytes:
    """All of an open regular file (`size`: its fstat size), refused past `limit` bytes."""
    if size > limit:
        raise Unreadable(path, f"has {size} bytes, over the {limit}-byte limit", over=True)
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError as exc:
            raise Unreadable(path, exc.strerror or str(exc), exc.errno or errno.EIO) from None
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise Unreadable(path, f"grew past the {limit}-byte limit while being read", over=True)
        chunks.append(chunk)


def _refuse_hidden(fd: int, path: str) -> None:
    """A vet reads only what a run could: a file that is, as opened (the fd, whatever links led there),
    inside exechost's state dir, which every run's view hides, is refused unread, so neither its bytes
    nor what they parse to reach an ask the agent sees (round 10 d: .git/config -> <state>/config.toml)."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as exc:
        raise Unreadable(path, exc.strerror or str(exc), exc.errno or errno.EIO) from None
    state = os.path.realpath(state_dir()).rstrip("/") + "/"
    if not (opened + "/").startswith(state):
        return
    if opened.startswith(state + hostprivate.ROOT + "/"):
        return  # an agent's private /tmp (engine.commands.hostprivate): what its runs see at /tmp
    raise Unreadable(path, "resolves into exechost's state dir, which no run can see: not read")


def read_regular(path: str, limit: int, *, follow: bool = True, prefix: bool = False) -> bytes:
    """The bytes of the regular file at `path`: all of them (Unreadable past `limit`), or with `prefix`
    its first `limit` bytes (as git reads HEAD: whatever follows is not looked at)."""
    fd, st = open_regular(path, follow=follow)
    try:
        _refuse_hidden(fd, path)
        if not prefix:
            return read_fd(fd, st.st_size, limit, path)
        try:
            return os.pread(fd, limit, 0)
        except OSError as exc:
            raise Unreadable(path, exc.strerror or str(exc), exc.errno or errno.EIO) from None
    finally:
        os.close(fd)
