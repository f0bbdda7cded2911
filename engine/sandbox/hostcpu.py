"""The CPU cgroups gateway-host runs join: each agent's runs a share of the CPU in its agent's own group
(where its Docker sandboxes' cgroup parent is too), the operator's runs one of their own, never the
gateway's own group, so one agent's busy runs do not starve the gateway and every other principal."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from engine.sandbox.ownergroups import HOST_GROUP, made
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
