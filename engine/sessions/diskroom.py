"""Room kept on the state dir's filesystem for the gateway's own records: an agent's output logs stop short of
it, so a flood of output never leaves an ask, a decision or another agent's run nowhere to be written."""

from __future__ import annotations

import os

# What the logs leave free: a thirty-second of the filesystem, at least RESERVE_MIN and at most RESERVE_MAX
# (the gateway's records are small: a decision is one line of history, an ask one small file).
RESERVE_MIN = 256 * 1024
RESERVE_MAX = 16 * 1024 * 1024
RESERVE_SHARE = 32
# Inodes the logs leave free likewise (each log is one; a session's records a few more).
INODES_MIN = 64
# A log writes on while it has this much beyond the reserve, looking again after an eighth of what it had:
# several sessions writing at once take at most what was free between them, never the reserve.
SLACK = 64 * 1024
LOOK_AGAIN = 8
# A chunk of output (up to 1 MiB) that the room left does not hold is logged in pieces of this size.
PIECE = 64 * 1024


def reserve(st: os.statvfs_result) -> tuple[int, int]:
    """(bytes, inodes) the logs leave free on a filesystem of this shape."""
    size = st.f_blocks * st.f_frsize
    room = min(RESERVE_MAX, max(RESERVE_MIN, size // RESERVE_SHARE))
    return room, max(INODES_MIN, st.f_files // RESERVE_SHARE) if st.f_files else 0


def has_room(st: os.statvfs_result) -> bool:
    """Whether a new log may be made here (one more inode, and a piece of bytes beyond the reserve)."""
    room, inodes = reserve(st)
    free = st.f_bavail * st.f_frsize
    return free >= room + SLACK + PIECE and (not inodes or st.f_favail > inodes)


class Room:
    """One log's right to write: it looks at its filesystem (fstatvfs) only when what it was allowed at the
    last look is spent, so a flood costs one look per eighth of the spare room, not one per chunk."""

    def __init__(self) -> None:
        self.allowed = 0

    def holds(self, size: int) -> bool:
        """Whether `size` bytes fit in what the last look allowed (no look now)."""
        return size <= self.allowed

    def take(self, fd: int, size: int) -> bool:
        """Whether `size` more bytes may be written to `fd`'s file (and they are counted if so)."""
        if size <= self.allowed:
            self.allowed -= size
            return True
        try:
            st = os.fstatvfs(fd)
        except OSError:
            return False
        spare = st.f_bavail * st.f_frsize - reserve(st)[0]
        if spare < size + SLACK:
            self.allowed = 0
            return False
        self.allowed = max(spare // LOOK_AGAIN, size) - size
        return True
