"""A bwrap sandbox's share of the host: its pids cgroup, and the RAM its tmpfs may pin."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from engine import statefs
from engine.sandbox import bwrapmemory, hostcpu
from engine.sandbox.bwraprecords import list_sandboxes, runtime_dir
from engine.sandbox.docker_ops import SandboxUnavailable
from engine.sandbox.ownergroups import AGENT_PIDS_SHARE, HOST_GROUP, INSTALL_PIDS_SHARE, KEPT_GROUPS, made
from engine.sandbox.rambudget import (
    AGENT_MEMORY_SHARE,
    AGENT_TCP_SHARE,
    INSTALL_MEMORY_SHARE,
    SHM_BYTES,
    TMPFS_BYTES,
    mem_total,
    tcp_max,
)
from engine.sandbox.settings import slugify, state_id

log = logging.getLogger(__name__)


def sweep_cgroups() -> None:
    """Empty pids cgroups of this install's sandboxes that are gone (one whose last task a slow init had
    not reaped yet when the sandbox was removed). Under the start lock: a starting sandbox's group is made,
    and its record written, before its keeper enters it, so it is empty but never unrecorded here."""
    if not _cgroup_bases():
        return
    statefs.ensure_private_dir(runtime_dir())
    with budget_lock():
        rows = list_sandboxes()
        live = {str(r.get("cgroup")) for r in rows}
        bwrapmemory.sweep({str(r.get("memoryCgroup")) for r in rows})
        hostcpu.sweep({str(r.get("cpuCgroup")) for r in rows})
        for base in _cgroup_bases():
            install = base / f"exechost-{state_id()}"
            # Owners' groups (and those an earlier layout made directly under the base), emptied ones last.
            for group in [*install.glob("*/*"), *install.glob("*"), *base.glob(f"exechost-{state_id()}-*")]:
                if group.is_dir() and str(group) not in live and group.name not in KEPT_GROUPS:
                    with contextlib.suppress(OSError):
                        group.rmdir()


def kill_cgroup(path: str) -> None:
    """SIGKILL every task of the sandbox's pids cgroup, each through a pidfd taken while it was still a
    member (a pid read from cgroup.procs may be another process's by the time a kill by number arrives)."""
    name = path.removeprefix("/sys/fs/cgroup/pids")
    try:
        with open(f"{path}/cgroup.procs") as fh:
            pids = [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            with open(f"/proc/{pid}/cgroup") as fh:
                member = any(line.split(":", 2)[1:] == ["pids", name] for line in fh.read().splitlines())
            if member:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(pidfd)


def remove_cgroup(path: str, deadline: float) -> None:
    """rmdir the sandbox's pids cgroup once its last task is gone (the keeper goes first; what bwrap ran
    dies by --die-with-parent a moment later, and until then the kernel says EBUSY)."""
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("bwrap sandbox cgroup %s not removed: %s", path, exc.strerror)
                return
        time.sleep(0.002)


def pids_cgroup(name: str, limit: int | None, owner: str) -> Path | None:
    """A pids cgroup (the v1 controller; a delegated v2 subtree is not used yet) capping the sandbox's
    tasks, where this process may make one; None elsewhere (RLIMIT_NPROC is then the only cap, and it
    does not bind root). It sits in its owner's group, and that in the install's: pidsLimit caps one
    sandbox, but an agent names as many session scopes as it likes, so its sandboxes together get at most
    a quarter of the host's pid_max, and all of this install's at most half (the rest is the host's)."""
    if not limit:
        return None
    host = _pid_max()
    for base in _cgroup_bases():
        install = base / f"exechost-{state_id()}"
        group = install / owner / name
        caps = ((install, host // INSTALL_PIDS_SHARE), (install / owner, host // AGENT_PIDS_SHARE))
        found = made(caps, group, limit, _cap_pids, _cap_pids)
        if found is not None:
            return found
    return None


def _cap_pids(group: Path, cap: int) -> None:
    (group / "pids.max").write_text(str(cap))


def host_pids_group(agent_id: str) -> Path | None:
    """The pids cgroup an agent's gateway-host runs join (exechost-hostenter `join`), in the agent's own
    group with its sandboxes: one agent's fork bomb in an approved script takes at most its quarter of the
    host's pid_max, as a sandbox's would, never the processes other agents, the session host and the
    operator's console need (fresh round 8 o). None where no pids cgroup can be made here."""
    return pids_cgroup(HOST_GROUP, _pid_max() // AGENT_PIDS_SHARE, f"agent-{slugify(agent_id)}")


def operator_pids_group() -> Path | None:
    """The pids cgroup the operator's own gateway-host runs join (an `exec` with no agent's credential: the
    CLI, the console): a principal of its own, outside every agent's group and outside the install's, so
    no agent's processes (nor all agents' together) leave the operator unable to fork, and the operator's
    runs count against no agent's share. Capped at a quarter too; None where no pids cgroup can be made."""
    cap = _pid_max() // AGENT_PIDS_SHARE
    for base in _cgroup_bases():
        group = base / f"exechost-operator-{state_id()}"
        try:
            group.mkdir(exist_ok=True)
            (group / "pids.max").write_text(str(cap))
            return group
        except OSError:
            return None
    return None


def host_memory_group(agent_id: str) -> Path | None:
    """The memory cgroup an agent's gateway-host runs join after the pids one (exechost-hostenter `join`),
    in the agent's own group with its sandboxes of both backends: capped at the agent's share of the RAM
    (rambudget.AGENT_MEMORY_SHARE), the owner group at the same, the install's at its own. A run left in
    the gateway's own group took what the host had (fresh round 17 a: an allowlisted `grep x /dev/zero`
    buffers a line that never ends), and the OOM killer then chose among the gateway and every agent's
    runs. None where no v1 memory hierarchy is writable here."""
    return bwrapmemory.memory_cgroup(HOST_GROUP, f"agent-{slugify(agent_id)}", None)


def operator_memory_group() -> Path | None:
    """The memory cgroup the operator's own gateway-host runs join: a principal of its own, outside every
    agent's group and the install's (as operator_pids_group), capped at a quarter of the RAM too, and its
    TCP socket buffers charged there at a principal's share (rambudget.AGENT_TCP_SHARE)."""
    if not bwrapmemory.usable():
        return None
    group = bwrapmemory.MEMORY_BASE / f"exechost-operator-{state_id()}"
    try:
        group.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):  # (EBUSY: more in use than a lower cap; it stays as it was)
            (group / "memory.limit_in_bytes").write_text(str(mem_total() // AGENT_MEMORY_SHARE))
        bwrapmemory.charge_tcp(((group, tcp_max() // AGENT_TCP_SHARE),))  # (its sockets: a principal's share)
        return group
    except OSError:
        return None


def _host_bases() -> tuple[Path, ...]:
    """Every hierarchy host runs' groups are made in: pids, and memory where it is writable."""
    return _cgroup_bases() + ((bwrapmemory.MEMORY_BASE,) if bwrapmemory.usable() else ())


def drop_host_groups() -> None:
    """The gateway stops: its agents' host-run groups, once empty, and the owner and install groups they
    leave empty (rmdir refuses a group with a task or a child: a held session's stays for the next)."""
    for base in _host_bases():
        install = base / f"exechost-{state_id()}"
        operator = base / f"exechost-operator-{state_id()}"
        for group in [*install.glob(f"*/{HOST_GROUP}"), *install.glob("*"), install, operator]:
            with contextlib.suppress(OSError):
                group.rmdir()
    hostcpu.drop_groups()  # (the cpu hierarchy's, engine.sandbox.hostcpu)


def kill_host_group(agent_id: str, rounds: int = 64) -> int:
    """Every process of the agent's gateway-host runs killed (a revoke: nothing the agent left running
    acts for it afterwards, fresh round 10 a). The group is every fork of every run from the first (a
    double-forked daemon, a held session's child), so no list of sessions can miss one; its pids.max is
    set to 0 first so nothing forks while the tasks are killed, then restored. The count killed."""
    killed = 0
    for base in _cgroup_bases():
        group = base / f"exechost-{state_id()}" / f"agent-{slugify(agent_id)}" / HOST_GROUP
        try:
            cap = (group / "pids.max").read_text().strip()
            (group / "pids.max").write_text("0")
        except OSError:
            continue  # no group: no host run of this agent was ever capped here
        try:
            for _ in range(rounds):
                try:
                    tasks = [int(t) for t in (group / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not tasks:
                    break
                for pid in tasks:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                time.sleep(0.005)  # the kernel takes a killed task out of the group as it reaps it
        finally:
            with contextlib.suppress(OSError):
                (group / "pids.max").write_text(cap)
    return killed


# The shares (engine.sandbox.ownergroups): an install's processes half the host's pids, one agent's (or the
# shared scope's) a quarter, its Docker containers (engine.sandbox.dockercg) counted in the same group.
# The same shares of the host's RAM (engine/sandbox/rambudget.py) bound what sandboxes' tmpfs mounts may pin
# (a memory cgroup would charge the pages too, but this process's memory group is its supervisor's to
# divide, not ours).


@contextlib.contextmanager
def budget_lock() -> Iterator[None]:
    """One start at a time per state dir reads the live reservations and adds its own (threads and other
    processes alike: a gateway and a CLI's `sandbox recreate`)."""
    fd = os.open(runtime_dir() / "budget.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with _budget_mutex:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
    finally:
        os.close(fd)  # drops the flock


_budget_mutex = threading.Lock()  # flock is per open file: threads of one process need their own lock


def check_memory_budget(name: str, owner: str, tmpfs_bytes: int) -> None:
    """Refuse a sandbox whose tmpfs would take its owner's (or the install's) reservations of RAM past
    their share: an agent names as many session scopes as it likes, and a full tmpfs is freed by no OOM kill.
    Sandboxes that no longer run hold nothing (their mounts went with their last process)."""
    ram = mem_total()
    own = everyone = 0
    for row in list_sandboxes():
        if row["name"] == name or not row["running"]:
            continue
        held = row.get("tmpfsBytes")
        held = held if isinstance(held, int) and held > 0 else TMPFS_BYTES * 3 + SHM_BYTES  # an older record
        everyone += held
        if row.get("owner") == owner:
            own += held
    for total, share, whose in (
        (own, AGENT_MEMORY_SHARE, "this agent's" if not owner.startswith("shared") else "the shared scope's"),
        (everyone, INSTALL_MEMORY_SHARE, "this install's"),
    ):
        if total + tmpfs_bytes > ram // share:
            raise SandboxUnavailable(
                f"sandbox not started: {whose} running sandboxes already reserve {_mib(total)} of tmpfs "
                f"and this one needs {_mib(tmpfs_bytes)}, past the 1/{share} of this host's RAM "
                f"({_mib(ram // share)}) they may pin. Remove some (exechost sandbox recreate --session KEY, "
                'or sandbox prune), or set smaller docker.tmpfs sizes (e.g. "/tmp:size=64m").'
            )


def _mib(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB"


def _pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 32768  # the kernel's default


def pids_cap() -> str:
    """How a sandbox's pids limit is enforced here, for `sandbox explain`."""
    if any(os.access(base, os.W_OK) for base in _cgroup_bases()):
        return "pids cgroup (v1) and RLIMIT_NPROC"
    if os.geteuid() == 0:
        return "none: no writable pids cgroup, and RLIMIT_NPROC does not bind root"
    return "RLIMIT_NPROC (per user namespace)"


def host_pids_cap(helper: str | None) -> str:
    """How an agent's gateway-host runs are capped here, for `sandbox explain` (`helper`: the host view's
    exechost-hostenter, which joins the group; None when it is not built)."""
    if not any(os.access(base, os.W_OK) for base in _cgroup_bases()):
        return "none: no writable cgroup v1 pids hierarchy (a cgroup v2 subtree is not used yet)"
    if helper is None:
        return "none: exechost-hostenter is not built (scripts/setup.sh), and it is what joins the group"
    return f"the agent's pids cgroup, with its sandboxes of both backends: pid_max/{AGENT_PIDS_SHARE}"


def host_memory_cap(helper: str | None) -> str:
    """How an agent's gateway-host runs' RAM is capped here, for `sandbox explain`."""
    if not bwrapmemory.usable():
        return "none: no writable cgroup v1 memory hierarchy (a cgroup v2 subtree is not used yet)"
    if helper is None:
        return "none: exechost-hostenter is not built (scripts/setup.sh), and it is what joins the group"
    return (
        f"the agent's memory cgroup, with its sandboxes of both backends: 1/{AGENT_MEMORY_SHARE} of the RAM "
        f"({_mib(mem_total() // AGENT_MEMORY_SHARE)})"
    )


def own_cgroup() -> Path | str:
    """This process's pids cgroup (v1), where a keeper goes back to; "" when unknown."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3 and "pids" in parts[1].split(","):
                    for base in _cgroup_bases():
                        return base / parts[2].lstrip("/")
    except OSError:
        pass
    return ""


@functools.cache
def _cgroup_bases() -> tuple[Path, ...]:
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists():
        return (v1,)
    return ()
