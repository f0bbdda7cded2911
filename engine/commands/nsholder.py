"""The namespaces a holder process prints its pid for (the kept view's keeper, an agent's network
namespace's netkeep), taken by fd: one owner of how a pid becomes namespace fds safely."""

from __future__ import annotations

import os
import subprocess


def take(popen: subprocess.Popen[bytes], kind: str) -> tuple[int, int, int | None] | None:
    """(pid, fd of its `kind` namespace, fd of its user namespace or None when it is ours) from the pid
    the holder prints first; None when it printed no pid or ended before its namespaces were opened (the
    caller stops it). Opened by pid: still the holder's only if it is still there (a pid can be reused),
    and never this process's own namespace."""
    assert popen.stdout is not None
    fds: list[int] = []
    try:
        pid = int(popen.stdout.readline())
        for name in (kind, "user"):
            fds.append(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
        if popen.poll() is not None or os.fstat(fds[0]).st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino:
            raise OSError("the holder ended before its namespaces were taken")
    except (ValueError, OSError):
        for fd in fds:
            os.close(fd)
        return None
    finally:
        popen.stdout.close()
    ns, user = fds
    if os.fstat(user).st_ino == os.stat("/proc/self/ns/user").st_ino:
        os.close(user)
        return pid, ns, None
    return pid, ns, user
