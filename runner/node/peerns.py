"""Who may speak on node.sock: a peer of our uid in our own mount, PID and user namespaces. A gateway's
host run is that uid too, but every host run (and every run a node starts) is in a view of its own, a new
mount and PID namespace (engine.commands.hostview), so it cannot be a gateway link of a node service on
the same machine and account (fresh round 10 a), nor pose as that service to a link's relay."""

from __future__ import annotations

import contextlib
import os
import signal
import socket

NAMESPACES = ("mnt", "pid", "user")
# SO_PEERPIDFD (Linux 6.5): a pidfd of the very process that connected, taken by the kernel at connect,
# so no pid reused after the peer died can stand in for it. Python names it from 3.13 on.
_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)


def _peer_pidfd(sock: socket.socket, pid: int) -> int | None:
    try:
        return int(sock.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD))
    except OSError:
        pass
    with contextlib.suppress(OSError):  # an older kernel: the pid, pinned as soon as we can
        return os.pidfd_open(pid)
    return None


def _namespaces(pid: str) -> tuple[str, ...] | None:
    try:
        return tuple(os.readlink(f"/proc/{pid}/ns/{name}") for name in NAMESPACES)
    except OSError:
        return None


def outside_our_namespaces(sock: socket.socket | None, pid: int) -> str | None:
    """Why the peer (pid `pid` by SO_PEERCRED) is not in this process's namespaces; None when it is. Fails
    closed: a peer whose namespaces cannot be read, or that is gone once they were, is refused."""
    if sock is None or pid <= 0:
        return "the kernel did not say which process the peer is"
    pidfd = _peer_pidfd(sock, pid)
    if pidfd is None:
        return f"peer pid {pid} is gone"
    try:
        theirs = _namespaces(str(pid))
        try:
            signal.pidfd_send_signal(pidfd, 0)  # still that very process: /proc/<pid> was its own
        except OSError:
            return f"peer pid {pid} is gone"
    finally:
        os.close(pidfd)
    if theirs is None:
        return f"the namespaces of peer pid {pid} cannot be read"
    if theirs != _namespaces("self"):
        return f"peer pid {pid} runs in a view of its own (other namespaces): not a gateway link"
    return None
