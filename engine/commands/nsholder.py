"""The namespaces a holder process prints its pid for (the kept view's keeper, an agent's network
namespace's netkeep), held by fd: one owner of how a pid becomes namespace fds safely, how a run gets its
own copies of them, and how they end."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from dataclasses import dataclass

_fds_lock = threading.Lock()  # a holder's fds: copied or closed, never both at once


@dataclass
class Held:
    popen: subprocess.Popen[bytes]
    ns: int  # an fd of the held namespace: it lives while this is open, whatever the holder does
    user: int | None  # an fd of the holder's user namespace when it is not ours (not root)

    def alive(self) -> bool:
        return self.ns >= 0 and self.popen.poll() is None

    def copies(self) -> tuple[int, ...] | None:
        """This run's own copies of the namespace's fd and its user namespace's (to pass to the run and
        close once it is spawned); None once stopped. Never a copy of a number stop() closed and the
        process reused for another file."""
        fds: list[int] = []
        with _fds_lock:
            if self.ns < 0:
                return None
            try:
                for fd in (self.ns, self.user):
                    if fd is not None:
                        fds.append(os.dup(fd))
            except OSError:
                for fd in fds:
                    os.close(fd)
                raise
        return tuple(fds)

    def stop(self) -> None:
        """Its stdin closed (the holder's cue to exit), waited for (killed after 5 s), its fds closed."""
        with contextlib.suppress(OSError):
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        with _fds_lock:
            for fd in (self.ns, self.user):
                if fd is not None and fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self.ns, self.user = -1, None


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
