"""Each agent's private dirs (engine.commands.hostprivate) on a filesystem of their own, capped in bytes and
inodes: as plain dirs under the state dir, one agent's /tmp filled the state dir's disk, and another agent's
run and the operator's decisions had nowhere to be written (fresh round 10 b).

The agent's directory (<state>/hostprivate/<agent>) is a tmpfs mounted in the gateway's mount namespace
the first time one of its runs needs it, so every run of the agent (the kept view, a pinned run's own
bwrap, a background session) binds its private dirs from it, and it outlives the gateway as a mount does
(a later gateway finds it mounted and keeps it). Its cap is the smallest of MAX_BYTES, a sixteenth of the
machine's memory and an eighth of the state dir's filesystem (a small state dir is a small machine), and an
eighth of that filesystem's inodes: its pages are RAM or swap, never the state dir's disk. Mounting needs
root: a gateway that is not root keeps plain dirs, and docs/SECURITY.md says so.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

log = logging.getLogger(__name__)

MAX_BYTES = 1 << 30
MAX_INODES = 1 << 18
SHARE = 8  # of the state dir's filesystem, bytes and inodes
MEMORY_SHARE = 16
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MNT_DETACH = 2

_lock = threading.Lock()
_refused: set[str] = set()  # dirs whose mount failed once: plain dirs (said once in the log)


def caps(state: str) -> tuple[int, int]:
    """(bytes, inodes) an agent's private dirs may hold, from the state dir's filesystem and the memory."""
    st = os.statvfs(state)
    size = st.f_blocks * st.f_frsize
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    nbytes = min(MAX_BYTES, size // SHARE, memory // MEMORY_SHARE)
    inodes = min(MAX_INODES, st.f_files // SHARE) if st.f_files else MAX_INODES
    return max(nbytes, 1 << 20), max(inodes, 64)


def ensure(top: str, state: str) -> bool:
    """`top` (an agent's dir, made 0700) a capped tmpfs of its own: True when it is one (made now or
    before), False when it stays a plain dir (not root, or the mount refused)."""
    with _lock:
        if os.path.ismount(top):
            return True
        if os.geteuid() != 0 or top in _refused:
            return False
        nbytes, inodes = caps(state)
        options = f"size={nbytes},nr_inodes={inodes},mode=0700".encode()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(b"tmpfs", os.fsencode(top), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
            _refused.add(top)
            log.warning("%s stays a plain dir (uncapped): mount: %s", top, os.strerror(ctypes.get_errno()))
            return False
        return True


def mounted(state: str) -> list[str]:
    """The private dirs mounted now under `state` (<state>/hostprivate/<agent>), deepest first."""
    return _below(os.path.join(os.path.realpath(state), "hostprivate"))


def _below(top: str) -> list[str]:
    """The mountpoints below `top` now, deepest first."""
    top = top.rstrip(os.sep) + os.sep
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            words = line.split()
            point = unescape(words[4]) if len(words) > 4 else ""
            if point.startswith(top):
                points.append(point)
    return sorted(set(points), key=len, reverse=True)


def detach_all(state: str) -> int:
    """Every private dir mounted under `state` detached (lazily: a run still inside keeps its files until
    it ends), for whoever removes the state dir itself; how many were."""
    return _detach(mounted(state))


def detach_below(root: str) -> int:
    """Every mount below `root` detached, whatever made it (an agent's capped /tmp, a sandbox workspace's
    own filesystem), for whoever removes `root` itself (the demo as it quits); how many were."""
    return _detach(_below(os.path.realpath(root)))


def _detach(points: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    done = 0
    for point in points:
        if libc.umount2(os.fsencode(point), _MNT_DETACH) == 0:
            done += 1
    return done


def unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field
