"""A browser sandbox's socket dir on a tiny filesystem of its own: its socat makes the CDP and noVNC sockets
there, so the dir is the container's to write, and as a plain dir of the state dir (<state>/b/<hash>) one
compromised browser filled the disk the gateway's journal and approvals are written to (fresh round 17 a).

A root gateway mounts a tmpfs of SIZE bytes and INODES inodes there (nosuid, nodev, noexec) before Docker
binds it, as engine.sandbox.wsfs does a workspace: a socket takes an inode and no block, so two sockets fit
and nothing else of note does. It outlives the gateway as a mount does (a later start finds it mounted and
keeps it; a reboot leaves the empty dir, mounted again at the next start). Not root, or a Docker engine in
another mount namespace (it would bind the dir under the mount): a plain dir, as docs/SECURITY.md says.
"""

from __future__ import annotations

import ctypes
import logging
import os

from engine.sandbox import wsfs

log = logging.getLogger(__name__)

SIZE = 64 * 1024
INODES = 16  # the dir, two sockets, and room for a socat restarting
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8

_said: set[str] = set()  # dirs left plain, said once in the log


def ensure(path: str) -> bool:
    """`path` (an existing, empty or socket-only dir the caller made) a capped tmpfs of its own: True when
    it is one (now or before), False when it stays a plain dir."""
    if os.path.ismount(path):
        return True
    if not wsfs.enabled() or not wsfs.docker_sees_our_mounts():
        if path not in _said:
            _said.add(path)
            log.warning("browser socket dir %s stays a plain dir (uncapped): not root, or Docker apart", path)
        return False
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        options = f"size={SIZE},nr_inodes={INODES},mode=0700".encode()
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        # by the fd: never a path a link could be swapped into
        if libc.mount(b"tmpfs", f"/proc/self/fd/{fd}".encode(), b"tmpfs", flags, options) != 0:
            err = ctypes.get_errno()
            if path not in _said:
                _said.add(path)
                log.warning("browser socket dir %s stays a plain dir (uncapped): %s", path, os.strerror(err))
            return False
        return True
    finally:
        os.close(fd)
