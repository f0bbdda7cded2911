"""The kernel's own word that this process's mount table changed, so a cache of it needs no TTL."""

from __future__ import annotations

import os
import select
import threading

MOUNTINFO = "/proc/self/mountinfo"
MOUNT_NS = "/proc/self/ns/mnt"


class MountWatch:
    """An fd of /proc/self/mountinfo kept open and polled with a zero timeout: the kernel raises
    POLLPRI|POLLERR on it once per change of the fd's mount namespace (a mount, an unmount, a move, a
    propagation change) after the last poll, and a poll clears it. `changed()` is asked before the table
    is read (a change between the two is read anyway and reported once more: a re-read, never a miss).

    The fd is of the namespace it was opened in and its poll state is shared by every process holding
    the same open file: it is reopened (and the answer is "changed") when this process is another one
    (a fork would otherwise consume the parent's event) or in another mount namespace (setns, unshare)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd = -1
        self._pid = 0
        self._ns = ""
        self._poll: select.poll | None = None

    def changed(self) -> bool:
        """True when the mount table may differ from when this was last asked (always, the first time)."""
        with self._lock:
            try:
                ns = os.readlink(MOUNT_NS)  # ("mnt:[inode]": half a stat's cost on procfs)
            except OSError:
                return True  # (no /proc: nothing to watch, so nothing is ever trusted)
            if self._poll is None or self._pid != os.getpid() or self._ns != ns:
                self._reopen(ns)
                return True
            events = self._poll.poll(0)
            return any(mask & (select.POLLPRI | select.POLLERR | select.POLLNVAL) for _, mask in events)

    def _reopen(self, ns: str) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # (in a forked child: its own copy, the parent's watch is untouched)
            self._fd, self._poll = -1, None
        try:
            self._fd = os.open(MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLPRI | select.POLLERR)
        self._pid, self._ns = os.getpid(), ns
