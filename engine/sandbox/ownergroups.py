"""The cgroup layout every place an agent's processes run shares: one owner group per agent, its cap the
agent's one budget, whichever backend (bwrap, Docker) or the gateway host runs them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

# /sys/fs/cgroup/<controller>/exechost-<install>/<owner>/{host, docker, <bwrap sandbox>}: the install's
# group caps all of this state dir's, an owner's group (agent-<slug>, shared, pool) all of one owner's.
INSTALL_PIDS_SHARE = 2  # all of an install's processes: half the host's pid_max
AGENT_PIDS_SHARE = 4  # one owner's: a quarter (bwrap sandboxes, Docker containers and host runs together)
HOST_GROUP = "host"  # an owner's gateway-host runs (engine.sandbox.bwraplimits.host_pids_group)
DOCKER_GROUP = "docker"  # an owner's Docker containers' cgroup_parent (engine.sandbox.dockercg)
KEPT_GROUPS = (HOST_GROUP, DOCKER_GROUP)  # made and removed by their own code, never by a bwrap sweep


def made(
    caps: Sequence[tuple[Path, int]],
    group: Path,
    limit: int,
    cap_parent: Callable[[Path, int], None],
    cap_group: Callable[[Path, int], None],
) -> Path | None:
    """`group` made below its parents, each made and capped first (a group made under an uncapped parent
    would be capped alone), then capped at `limit`; None where this process may not make or cap it (the
    group removed again). A sweep by another start may remove a parent emptied a moment ago: tried again."""
    for _ in range(3):
        try:
            for parent, cap in caps:
                parent.mkdir(exist_ok=True)
                cap_parent(parent, cap)
            group.mkdir(exist_ok=True)
            cap_group(group, limit)
            return group
        except FileNotFoundError:
            continue
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            break
    return None
