"""The CPU cgroups an agent's processes join, whatever runs them: its gateway-host runs and each of its bwrap
sandboxes a group in its agent's own (where its Docker sandboxes' cgroup parent is too), the operator's runs
one of their own, never the gateway's own group, so one agent's busy runs do not starve the gateway and
every other principal."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from engine.sandbox.ownergroups import HOST_GROUP, KEPT_GROUPS, made
from engine.sandbox.settings import slugify, state_id

CPU_BASE = Path("/sys/fs/cgroup/cpu")
# cpu.shares: the kernel's default weight, written explicitly at every level, so the install's runs
# together weigh as the gateway's own group does, and each agent (and the operator) as every other one.
SHARES = 1024


def usable() -> bool:
    """A v1 cpu hierarchy this process may make groups in."""
    return (CPU_BASE / "cgroup.procs").exists() and os.access(CPU_BASE, os.W_OK)


def _shares(group: Path, weight: int) -> None:
    (group / "cpu.shares").write_text(str(weight))


def host_cpu_group(agent_id: str) -> Path | None:
    """The cpu group an agent's gateway-host runs join (exechost-hostenter `join`), below its agent's group
    in the install's (fresh round 17 a: runs stayed in the gateway's own cpu group, and one agent's 64
    sessions of `yes > /dev/null` took 64 parts of every core against the gateway's one). None where no
    v1 cpu hierarchy is writable."""
    if not usable():
        return None
    install = CPU_BASE / f"exechost-{state_id()}"
    owner = install / f"agent-{slugify(agent_id)}"
    return made(((install, SHARES), (owner, SHARES)), owner / HOST_GROUP, SHARES, _shares, _shares)


def sandbox_cpu_group(owner: str, name: str) -> Path | None:
    """A bwrap sandbox's cpu group, in its owner's group beside that owner's host runs and Docker
    containers (fresh round 18 a: a bwrap sandbox's commands stayed in the gateway's cpu group, so one
    agent's sandbox of 512 busy processes took 512 parts of every core against the gateway's few). Its
    keeper enters it with the pids and memory groups before bwrap runs; None where no v1 cpu hierarchy
    is writable."""
    if not usable():
        return None
    install = CPU_BASE / f"exechost-{state_id()}"
    return made(
        ((install, SHARES), (install / owner, SHARES)), install / owner / name, SHARES, _shares, _shares
    )


def remove_group(path: str) -> None:
    """A removed sandbox's cpu group, and its owner's and the install's once empty (rmdir refuses a group
    with a task or a child)."""
    group = Path(path)
    if not path.startswith(str(CPU_BASE / f"exechost-{state_id()}") + "/"):
        return
    for each in (group, group.parent, group.parent.parent):
        with contextlib.suppress(OSError):
            each.rmdir()


def sweep(live: set[str]) -> None:
    """Empty cpu groups of this install's bwrap sandboxes that are gone (not in `live`); host runs' and
    Docker's groups are their own code's."""
    install = CPU_BASE / f"exechost-{state_id()}"
    if not install.is_dir():
        return
    for group in install.glob("*/*"):
        if group.is_dir() and str(group) not in live and group.name not in KEPT_GROUPS:
            with contextlib.suppress(OSError):
                group.rmdir()


def own_cpu_group() -> Path | str:
    """This process's cpu group (v1), where a keeper goes back to once bwrap runs; "" when unknown."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3 and "cpu" in parts[1].split(","):
                    return CPU_BASE / parts[2].lstrip("/")
    except OSError:
        pass
    return ""


def operator_cpu_group() -> Path | None:
    """The cpu group the operator's own gateway-host runs join: a principal of its own, outside every
    agent's group and the install's (as bwraplimits.operator_pids_group)."""
    if not usable():
        return None
    return made((), CPU_BASE / f"exechost-operator-{state_id()}", SHARES, _shares, _shares)


def drop_groups() -> None:
    """The gateway stops: its host runs' cpu groups, once empty (rmdir refuses one with a task or child)."""
    install = CPU_BASE / f"exechost-{state_id()}"
    for group in [*install.glob(f"*/{HOST_GROUP}"), *install.glob("*"), install]:
        with contextlib.suppress(OSError):
            group.rmdir()
    with contextlib.suppress(OSError):
        (CPU_BASE / f"exechost-operator-{state_id()}").rmdir()
