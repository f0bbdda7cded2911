"""Unix-socket hardening shared by every socket we serve: peer credentials, path checks, liveness probe."""

from __future__ import annotations

import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes including the NUL


@dataclass(frozen=True)
class PeerInfo:
    """The connected peer as the kernel reports it (SO_PEERCRED), not as it claims to be."""

    pid: int
    uid: int
    gid: int


def peer_info(sock: socket.socket | None) -> PeerInfo | None:
    """The peer's credentials; None when there is no socket or the kernel will not say."""
    if sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    return PeerInfo(pid=pid, uid=uid, gid=gid)


def socket_path_problem(path: Path) -> str | None:
    """Why `path` cannot be a socket we bind, e.g. "too long (> 107 bytes)", "invalid (symlink)"; else None.

    A symlink, directory or regular file in the way is never replaced: only a socket file may be reclaimed.
    """
    if len(os.fsencode(str(path))) > SUN_PATH_MAX:
        return f"too long (> {SUN_PATH_MAX} bytes)"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "invalid (symlink)"
    if stat.S_ISDIR(st.st_mode):
        return "invalid (directory)"
    if not stat.S_ISSOCK(st.st_mode):
        return "invalid (not a socket)"
    return None


def socket_is_live(path: Path, timeout: float = 0.5) -> bool:
    """A connect probe (blocking: run it in a thread): asyncio's unix server would silently unlink a live
    socket, so a path is only reclaimed when nobody answers on it (pueue's stale check)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True
