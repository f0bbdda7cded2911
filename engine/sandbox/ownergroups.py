"""The cgroup layout every place an agent's processes run shares: one owner group per agent, its cap the
agent's one budget, whichever backend (bwrap, Docker) or the gateway host runs them."""

from __future__ import annotations

# /sys/fs/cgroup/<controller>/exechost-<install>/<owner>/{host, docker, <bwrap sandbox>}: the install's
# group caps all of this state dir's, an owner's group (agent-<slug>, shared, pool) all of one owner's.
INSTALL_PIDS_SHARE = 2  # all of an install's processes: half the host's pid_max
AGENT_PIDS_SHARE = 4  # one owner's: a quarter (bwrap sandboxes, Docker containers and host runs together)
HOST_GROUP = "host"  # an owner's gateway-host runs (engine.sandbox.bwraplimits.host_pids_group)
DOCKER_GROUP = "docker"  # an owner's Docker containers' cgroup_parent (engine.sandbox.dockercg)
KEPT_GROUPS = (HOST_GROUP, DOCKER_GROUP)  # made and removed by their own code, never by a bwrap sweep
