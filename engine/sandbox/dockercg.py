"""Per-owner pids and memory caps for Docker sandboxes: each agent's containers share its one capped group.

Docker gives a container its own pids.max (pidsLimit) under `/docker`, whose pids.max is `max`; an agent
names as many session scopes as it likes, so its containers together could hold the host's pid_max. Here
every sandbox container is created with `cgroup_parent` = `/exechost-<install>/<owner>/docker` (cgroupfs
driver, v1 pids hierarchy): the very owner group engine/sandbox/bwraplimits.py puts that agent's bwrap
sandboxes and gateway-host runs in, capped at pid_max/4 (the install's at pid_max/2), so one agent's
processes are one budget wherever they run, never a quarter per backend. runc would create a missing
parent with no cap, so making (and capping) the parents and starting the container happen under a shared
flock, and removing an emptied owner group only under the exclusive one; bwraplimits' sweeps leave the
`docker` group to this module. The same groups in the v1 memory hierarchy are capped at the RAM budget's
shares (engine/sandbox/rambudget.py): a quarter of the host's RAM for an owner's containers and bwrap
sandboxes together, half for the install's; tmpfs pages are charged there too, so a full /tmp counts. Their
TCP socket buffers too (kmem.tcp, rambudget.AGENT_TCP_SHARE): each container's group once it started.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from engine import statefs
from engine.sandbox import bwrapmemory, rambudget
from engine.sandbox.ownergroups import AGENT_PIDS_SHARE, DOCKER_GROUP, INSTALL_PIDS_SHARE
from engine.sandbox.settings import slugify, split_namespace, state_id

PIDS_BASE = Path("/sys/fs/cgroup/pids")
MEMORY_BASE = Path("/sys/fs/cgroup/memory")
CPU_BASE = Path("/sys/fs/cgroup/cpu")  # runc makes the cgroup parent there too: each owner's share (hostcpu)


def owner_of(scope: str, agent_id: str) -> str:
    """The owner group a sandbox counts against: the same names bwrap uses. `agent_id` carries the calling
    gateway's namespace on a node several serve (`<fp>/main`): every owner is in it, the shared scope's
    too (`shared-<slug of the namespace>`), so two gateways' sandboxes never share a host uid
    (sandboxuid.for_owner) or a pids and RAM share (fresh round 17 a)."""
    if scope != "shared":
        return f"agent-{slugify(agent_id)}"
    namespace = split_namespace(agent_id)[0]
    return f"shared-{slugify(namespace)}" if namespace else "shared"


def _install(base: Path = PIDS_BASE) -> Path:
    return base / f"exechost-{state_id()}"  # bwraplimits' install group: one per state dir, both backends


def usable() -> bool:
    """A writable v1 pids hierarchy (Docker's cgroupfs driver places cgroup_parent in it)."""
    return (PIDS_BASE / "cgroup.procs").exists() and os.access(PIDS_BASE, os.W_OK)


def parent_for(owner: str) -> str | None:
    """The `cgroup_parent` value for an owner's containers; None where no pids hierarchy is writable."""
    if not usable():
        return None
    return f"/{_install().name}/{owner}/{DOCKER_GROUP}"


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 32768


@contextlib.contextmanager
def _locked(kind: int) -> Iterator[None]:
    path = statefs.state_dir() / "docker-cgroups.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, kind)  # per open file description: threads of one process exclude each other too
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def holding(parent: str | None) -> Iterator[None]:
    """Make `parent` (a cgroup_parent from parent_for) with its caps, and keep it from being swept while
    the caller creates or starts a container in it (runc makes the container's group at start)."""
    if not parent or not parent.startswith(f"/{_install().name}/"):
        yield
        return
    with _locked(fcntl.LOCK_SH):
        host = _pid_max()
        docker = PIDS_BASE / parent.lstrip("/")
        caps = ((docker.parent.parent, host // INSTALL_PIDS_SHARE), (docker.parent, host // AGENT_PIDS_SHARE))
        for attempt in range(3):  # bwraplimits' sweep may remove an owner group emptied a moment ago
            try:
                for group, cap in caps:
                    group.mkdir(exist_ok=True)
                    (group / "pids.max").write_text(str(cap))
                docker.mkdir(exist_ok=True)  # uncapped itself: the owner's cap covers it
                if (MEMORY_BASE / "cgroup.procs").exists():
                    _cap_memory(parent.lstrip("/"))
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        yield


def _cap_memory(parent: str) -> None:
    """The owner's and install's memory groups, capped before runc makes (uncapped) ones for the container.
    A cap already written stays (a lower one fails with EBUSY while its containers use more, and the host's
    RAM does not change under a running install)."""
    ram = rambudget.mem_total()
    owner = (MEMORY_BASE / parent).parent
    for group, cap in (
        (owner.parent, ram // rambudget.INSTALL_MEMORY_SHARE),
        (owner, ram // rambudget.AGENT_MEMORY_SHARE),
    ):
        group.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            (group / "memory.limit_in_bytes").write_text(str(cap))
    tcp = rambudget.tcp_max()
    bwrapmemory.charge_tcp(
        ((owner.parent, tcp // rambudget.INSTALL_TCP_SHARE), (owner, tcp // rambudget.AGENT_TCP_SHARE))
    )
    (owner / DOCKER_GROUP).mkdir(exist_ok=True)


def charge_container_tcp(parent: str | None, container_id: str) -> None:
    """A started container's TCP socket buffers charged to its own memory group (runc makes it without a
    kmem.tcp limit, and a v1 group charges its tasks' sockets only once one is written), capped at its
    memory limit or its owner's share, whichever is lower; each charge counts in the owner's group too
    (_cap_memory). Written after the start and before any command of the agent's runs in it (every one
    comes by an exec, or the supervisor's spawn, afterwards): the sockets those make are charged."""
    if not parent or not parent.startswith(f"/{_install().name}/") or not container_id:
        return
    group = MEMORY_BASE / parent.lstrip("/") / container_id
    try:
        limit = int((group / "memory.limit_in_bytes").read_text())
    except (OSError, ValueError):
        return
    bwrapmemory.charge_tcp(((group, min(limit, rambudget.tcp_max() // rambudget.AGENT_TCP_SHARE)),))


def memory_cap(parent: str | None) -> int | None:
    """The memory cap of a container's owner group (for tests and `sandbox explain`: `parent` from
    parent_for, or an owner or install group itself); None when uncapped."""
    if not parent:
        return None
    group = MEMORY_BASE / parent.lstrip("/")
    if group.name == DOCKER_GROUP:
        group = group.parent
    try:
        value = int((group / "memory.limit_in_bytes").read_text())
    except (OSError, ValueError):
        return None
    return value if value < rambudget.mem_total() else None


def sweep() -> None:
    """Remove owners' `docker` groups whose containers are all gone, then the owner groups (and the
    install's) they leave empty; a group still holding a container's group, a bwrap sandbox's or host
    runs' refuses rmdir (EBUSY), and is kept."""
    with _locked(fcntl.LOCK_EX):
        for install in (_install(), _install(MEMORY_BASE), _install(CPU_BASE)):  # (runc made the cpu ones)
            if not install.is_dir():
                continue
            owners = [p for p in install.iterdir() if p.is_dir()]
            for group in [*(o / DOCKER_GROUP for o in owners), *owners, install]:
                with contextlib.suppress(OSError):
                    group.rmdir()
