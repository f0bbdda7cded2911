"""Finding and killing all a command started: its process group, stdio holders, marked descendants."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Collection
from dataclasses import dataclass

# Every local command carries this variable; descendants inherit it even after setsid or a double fork,
# so a kill can find daemons that left the process group (the approach of Jenkins' ProcessTreeKiller).
MARKER_ENV = "EXECHOST_SESSION"
KILL_GRACE_SEC = 3.0
_POLL_SEC = 0.05


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    comm: str
    reason: str  # "stdio" (holds the session's pipes/terminal) or "marker" (inherited the session env)

    def to_dict(self) -> dict[str, object]:
        return {"pid": self.pid, "comm": self.comm, "reason": self.reason}


def _state(pid: int) -> tuple[str, str] | None:
    """(comm, state letter) from /proc/<pid>/stat; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    lpar, rpar = raw.find("("), raw.rfind(")")
    if lpar < 0 or rpar < 0:
        return None
    return raw[lpar + 1 : rpar], raw[rpar + 2 : rpar + 3]


def alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    info = _state(pid)
    return info is not None and info[1] not in ("Z", "X")


def _holds(pid: int, targets: Collection[str]) -> bool:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{name}") in targets:
                return True
    return False


def _marker_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return None
    key = f"{MARKER_ENV}=".encode()
    start = 0 if env.startswith(key) else env.find(b"\0" + key) + 1
    if start == 0 and not env.startswith(key):
        return None
    end = env.find(b"\0", start)
    return env[start + len(key) : end if end >= 0 else None].decode("utf-8", "replace")


def scan(
    *, fd_targets: Collection[str] = (), marker: str | None = None, markers: Collection[str] = ()
) -> list[ProcInfo]:
    """Live processes (other than us) holding one of `fd_targets` open or carrying one of the markers."""
    me = os.getpid()
    wanted = set(markers) | ({marker} if marker else set())
    found: list[ProcInfo] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        reason = None
        if fd_targets and _holds(pid, fd_targets):
            reason = "stdio"
        elif wanted and _marker_of(pid) in wanted:
            reason = "marker"
        if reason is None:
            continue
        info = _state(pid)
        if info is None or info[1] in ("Z", "X"):
            continue
        found.append(ProcInfo(pid, info[0], reason))
    return found


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a whole process group; False if the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_groups() -> set[int]:
    """Process groups with a live (non-zombie) member. kill(-pgid, 0) alone counts zombies, which
    linger wherever PID 1 does not reap (containers)."""
    groups: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] not in (b"Z", b"X"):
            groups.add(int(fields[2]))
    return groups


def _any_alive(pgids: Collection[int], pids: Collection[int]) -> bool:
    if any(alive(pid) for pid in pids):
        return True
    candidates = [g for g in pgids if signal_group(g, 0)]
    return bool(candidates) and not live_groups().isdisjoint(candidates)


def _signal_many(pgids: Collection[int], pids: Collection[int], sig: int) -> None:
    for pgid in pgids:
        signal_group(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _signal_all(pgid: int, pids: Collection[int], sig: int) -> None:
    _signal_many((pgid,), pids, sig)


async def kill_all(pgids: Collection[int], markers: Collection[str], grace: float = KILL_GRACE_SEC) -> None:
    """kill_tree for many commands at once with one /proc scan per step (gateway shutdown)."""
    stragglers = {p.pid for p in await asyncio.to_thread(scan, markers=markers)}
    for sig in (signal.SIGTERM, signal.SIGCONT):
        _signal_many(pgids, stragglers, sig)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while loop.time() < deadline:
        if not await asyncio.to_thread(_any_alive, pgids, stragglers):
            return
        await asyncio.sleep(_POLL_SEC * 2)
    late = {p.pid for p in await asyncio.to_thread(scan, markers=markers)}
    _signal_many(pgids, stragglers | late, signal.SIGKILL)


async def kill_tree(
    pgid: int,
    *,
    marker: str | None,
    fd_targets: Collection[str] = (),
    grace: float = KILL_GRACE_SEC,
) -> list[ProcInfo]:
    """SIGTERM the group and every straggler, wait `grace`, SIGKILL what is left. Returns stragglers."""
    stragglers = await asyncio.to_thread(scan, fd_targets=fd_targets, marker=marker)
    pids = {p.pid for p in stragglers}
    _signal_all(pgid, pids, signal.SIGTERM)
    _signal_all(pgid, pids, signal.SIGCONT)  # a stopped process only sees SIGTERM once continued
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while loop.time() < deadline:
        if not await asyncio.to_thread(_any_alive, (pgid,), pids):
            return stragglers
        await asyncio.sleep(_POLL_SEC)
    # Re-scan: a daemon may have forked again during the grace period.
    late = await asyncio.to_thread(scan, fd_targets=fd_targets, marker=marker)
    _signal_all(pgid, pids | {p.pid for p in late}, signal.SIGKILL)
    return stragglers + [p for p in late if p.pid not in pids]


FDS_PER_SESSION = 4  # a plain child: stdin, stdout and stderr pipes and the pidfd of a background command


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a daemon that keeps thousands of sessions needs
    ~4 fds each; the usual soft limit of 1,024 stops it near 250). Returns (soft, hard) as now set."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def open_file_limit_text(running: int) -> str:
    """Why a spawn failed with EMFILE/ENFILE, in words the operator can act on."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"Too many open files: the gateway's limit is {soft} and {running} sessions are running "
        f"({FDS_PER_SESSION} fds each). Remove finished or unneeded sessions (process remove), or raise "
        "the hard limit (LimitNOFILE= in the service unit, ulimit -Hn) and restart the gateway."
    )
