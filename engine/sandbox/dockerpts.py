"""A Docker sandbox's /dev/pts with a cap on its terminals, as bwrap sandboxes' and host runs' have.

Docker mounts a devpts instance of its own in each container with no max=, and every instance but the host's
own draws from one count (kernel.pty.max less kernel.pty.reserve): one command of one agent's container
could open every terminal of it, and until it let go no host run, bwrap sandbox or other container of any
agent could make one (fresh round 18 a). At its start, before any command of the agent's runs in it, the
gateway mounts a fresh instance with max=RUN_PTYS over the container's /dev/pts (its /dev/ptmx is a link to
pts/ptmx, so every terminal made there, a `docker exec -t`'s too, comes from the capped instance). The
container has no CAP_SYS_ADMIN to take it off again. It takes the gateway's root (setns into the
container's mount namespace, from a thread of its own): a gateway of another uid cannot (docs/SECURITY.md).
"""

from __future__ import annotations

import ctypes
import os
import threading

RUN_PTYS = 256  # exechost-hostenter's own-pts instance's max= (engine/commands/hostenter/layers.c)
# Docker's own options for the container's devpts (gid 5: tty), with the cap.
PTS_OPTIONS = f"newinstance,ptmxmode=0666,mode=620,gid=5,max={RUN_PTYS}"

CLONE_FS = 0x200
CLONE_NEWNS = 0x20000
MS_NOSUID, MS_NOEXEC = 2, 8
_libc = ctypes.CDLL(None, use_errno=True)


def _mount_in(ns: int, out: list[str]) -> None:
    """In a thread of its own, which ends afterwards: its own fs context first (unshare CLONE_FS: setns into
    a mount namespace refuses a task sharing it, as every thread of a process does), then the container's
    mount namespace (`ns`) and the mount, nosuid and noexec as Docker's is. Nothing else runs in the thread
    (no import, no path of ours), and no other thread of the gateway changes namespace."""
    if _libc.unshare(CLONE_FS) != 0:
        out.append("unshare: " + os.strerror(ctypes.get_errno()))
    elif _libc.setns(ns, CLONE_NEWNS) != 0:
        out.append("setns: " + os.strerror(ctypes.get_errno()))
    elif _libc.mount(b"devpts", b"/dev/pts", b"devpts", MS_NOSUID | MS_NOEXEC, PTS_OPTIONS.encode()) != 0:
        out.append("mount devpts: " + os.strerror(ctypes.get_errno()))


def usable() -> bool:
    """Whether this process may mount in a container's mount namespace (a root gateway)."""
    return os.geteuid() == 0


def cap_terminals(pid: int, container_id: str) -> str | None:
    """Mount the capped devpts over the just-started container's /dev/pts (`pid`: its init, from the
    engine's inspect). The namespace is opened first and the process checked to be that container's still
    (its cgroup names the container's id): a pid read a moment ago could be another process's by now.
    Why it failed under a root gateway, else None; does nothing under a gateway of another uid
    (documented: docs/SECURITY.md)."""
    if not usable():
        return None
    if pid <= 0 or not container_id:
        return "its init is not running"
    try:
        ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    except OSError as exc:
        return str(exc.strerror)
    try:
        try:
            with open(f"/proc/{pid}/cgroup", encoding="ascii", errors="replace") as fh:
                theirs = container_id in fh.read()
        except OSError:
            theirs = False
        if not theirs:
            return "its init is gone"
        failed: list[str] = []
        worker = threading.Thread(target=_mount_in, args=(ns, failed), name="exechost-devpts", daemon=True)
        worker.start()
        worker.join()
    finally:
        os.close(ns)
    return failed[0] if failed else None
