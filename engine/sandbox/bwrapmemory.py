"""A bwrap sandbox's memory cgroup: RLIMIT_AS binds one process, so a sandbox (and an agent's sandboxes
together) would hold the host's RAM a process at a time; a v1 memory group charges every page of theirs.

Each sandbox gets /sys/fs/cgroup/memory/exechost-<install>/<owner>/<sandbox>, capped at docker.memory (or
the agent's share of RAM, as a container's default: rambudget.container_memory), in its owner's group
capped at a quarter of the host's RAM and the install's at half: the same groups engine.sandbox.dockercg
caps for that owner's containers, so one agent's sandboxes of both backends draw on one budget. Tmpfs
pages a sandbox writes are charged there too. The keeper enters the group with the pids one, before bwrap
runs (engine.sandbox.bwrap.KEEPER_SH), so every process of the sandbox is charged from its first page.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from engine.sandbox import rambudget
from engine.sandbox.ownergroups import KEPT_GROUPS, made
from engine.sandbox.settings import state_id

MEMORY_BASE = Path("/sys/fs/cgroup/memory")


def usable() -> bool:
    """A v1 memory hierarchy this process may make groups in."""
    return (MEMORY_BASE / "cgroup.procs").exists() and os.access(MEMORY_BASE, os.W_OK)


def install_group() -> Path:
    return MEMORY_BASE / f"exechost-{state_id()}"


def memory_cgroup(name: str, owner: str, memory: str | None) -> Path | None:
    """The sandbox's memory group, made and capped (its owner's and the install's caps set first: a
    group made under an uncapped parent would be capped alone); None where no v1 memory hierarchy is
    writable (RLIMIT_AS per process is then the only bound, and `sandbox explain` says so)."""
    if not usable():
        return None
    ram = rambudget.mem_total()
    limit = rambudget.parse_bytes(rambudget.container_memory(memory)) or ram // rambudget.AGENT_MEMORY_SHARE
    install = install_group()
    group = install / owner / name
    caps = (
        (install, ram // rambudget.INSTALL_MEMORY_SHARE),
        (install / owner, ram // rambudget.AGENT_MEMORY_SHARE),
    )
    found = made(caps, group, limit, _set_cap, _cap_group)
    if found is not None:
        tcp = rambudget.tcp_max()
        agent = tcp // rambudget.AGENT_TCP_SHARE
        charge_tcp(
            (
                (install, tcp // rambudget.INSTALL_TCP_SHARE),
                (install / owner, agent),
                (found, min(limit, agent)),
            )
        )
    return found


def charge_tcp(caps: tuple[tuple[Path, int], ...]) -> None:
    """Each group's TCP socket buffers charged to it and capped (rambudget.AGENT_TCP_SHARE), parents first:
    a v1 memory group charges the sockets its tasks make only once its own kmem.tcp limit was written, and
    each charge counts against every ancestor's too. A cap the kernel refuses (EBUSY: lower than what its
    sockets hold now) stays as it was; a hierarchy without the file (cgroup v2 charges sockets to memory.max
    already) is left alone."""
    for group, cap in caps:
        with contextlib.suppress(OSError):
            (group / rambudget.TCP_LIMIT).write_text(str(cap))


def _cap_group(group: Path, cap: int) -> None:
    (group / "memory.limit_in_bytes").write_text(str(cap))


def _set_cap(group: Path, cap: int) -> None:
    """A cap written again (as dockercg does); one the kernel refuses (EBUSY: more in use than a cap
    being lowered) stays as it was. A group swept meanwhile raises FileNotFoundError: made again."""
    try:
        (group / "memory.limit_in_bytes").write_text(str(cap))
    except FileNotFoundError:
        raise
    except OSError:
        pass


def own_memory_cgroup() -> Path | str:
    """This process's memory group (v1), where a keeper goes back to once bwrap runs; "" when unknown."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3 and "memory" in parts[1].split(","):
                    return MEMORY_BASE / parts[2].lstrip("/")
    except OSError:
        pass
    return ""


def remove(path: str) -> None:
    """The sandbox's memory group and its owner's and the install's, once empty (a group with a task or
    a child refuses rmdir; the charges of a removed group go to its parent)."""
    group = Path(path)
    if not path.startswith(str(install_group()) + "/"):
        return
    for each in (group, group.parent, group.parent.parent):
        with contextlib.suppress(OSError):
            each.rmdir()


def sweep(live: set[str]) -> None:
    """Remove memory groups of this install's sandboxes that are gone (not in `live`), then emptied owner
    groups; Docker's groups (dockercg) are left to dockercg."""
    install = install_group()
    if not install.is_dir():
        return
    for group in [*install.glob("*/*"), *install.glob("*")]:
        if group.is_dir() and str(group) not in live and group.name not in KEPT_GROUPS:
            with contextlib.suppress(OSError):
                group.rmdir()
