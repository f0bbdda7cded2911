"""A Docker sandbox's /dev/pts with a cap on its terminals, as bwrap sandboxes' and host runs' have.

Docker mounts a devpts instance of its own in each container with no max=, and every instance but the host's
own draws from one count (kernel.pty.max less kernel.pty.reserve): one command of one agent's container
could open every terminal of it, and until it let go no host run, bwrap sandbox or other container of any
agent could make one (fresh round 18 a). At its start, before any command of the agent's runs in it, the
gateway mounts a fresh instance with max=RUN_PTYS over the container's /dev/pts (its /dev/ptmx is a link to
pts/ptmx, so every terminal made there, a `docker exec -t`'s too, comes from the capped instance). The
container has no CAP_SYS_ADMIN to take it off again. It takes the gateway's root (setns into the
container's mount namespace): a gateway of another uid cannot, and `sandbox explain` says so.
"""

from __future__ import annotations

import os
import subprocess
import sys

RUN_PTYS = 256  # exechost-hostenter's own-pts instance's max= (engine/commands/hostenter/layers.c)
# Docker's own options for the container's devpts (gid 5: tty), with the cap.
PTS_OPTIONS = f"newinstance,ptmxmode=0666,mode=620,gid=5,max={RUN_PTYS}"

# In a child of its own (setns into a mount namespace refuses a threaded process): the namespace is the fd
# the gateway opened and checked (its number argv[2]), mounted by libc's mount(2), nosuid and noexec as
# Docker's is.
_MOUNT = (
    "import ctypes,os,sys\n"
    "c=ctypes.CDLL(None,use_errno=True)\n"
    "if c.setns(int(sys.argv[2]),0x20000)!=0: sys.exit('setns: '+os.strerror(ctypes.get_errno()))\n"
    "if c.mount(b'devpts',b'/dev/pts',b'devpts',2|8,sys.argv[1].encode())!=0:\n"
    " sys.exit('mount devpts: '+os.strerror(ctypes.get_errno()))\n"
)


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
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _MOUNT, PTS_OPTIONS, str(ns)],
            pass_fds=(ns,),
            capture_output=True,
            text=True,
            check=False,
            env={},
            cwd="/",
        )
    finally:
        os.close(ns)
    if done.returncode != 0:
        return done.stderr.strip() or f"exit {done.returncode}"
    return None
