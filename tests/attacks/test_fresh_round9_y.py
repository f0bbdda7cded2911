"""Fresh round 9 (attacker Y, branch attackY; the rest of its file waits on that branch): a host run's pids
cgroup is its agent's and stays so, and a node key below ~/.ssh stays hidden under ~/.ssh's cover."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.sandbox import bwraplimits
from tests.helpers.gateway import FULL, connect, gateway, write_config

# The run's own pids cgroup, as /proc/self/cgroup names it (v1 `pids` line).
GROUP = "sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup"


def _needs_pids_group(state: Path) -> None:
    if bwraplimits.host_pids_group("probe") is None:
        pytest.skip("no pids cgroup can be made here")
    bwraplimits.drop_host_groups()


async def _runs(state: Path, *calls: tuple[str, str]) -> list[str]:
    write_config(state, FULL)
    out: list[str] = []
    async with gateway(state):
        client = await connect(state)
        try:
            for agent, command in calls:
                result = await client.request("exec", {"command": command, "agentId": agent})
                out.append(result["text"])
        finally:
            await client.close()
    return out


async def test_host_run_leaves_its_pids_cgroup(state_dir: Path) -> None:
    """Open before the fix on this branch (/sys/fs/cgroup read-only in every view): the view leaves
    /sys/fs/cgroup writable and the install's pids group is the gateway uid's (root's, or a delegated
    tree's): a host run writes 0 to its `tasks` and leaves its agent's cap"""
    _needs_pids_group(state_dir)
    cmd = (
        f"g=$({GROUP}); i=${{g%/*}}; i=${{i%/*}}; echo 0 > /sys/fs/cgroup/pids$i/tasks; echo GROUP=$({GROUP})"
    )
    (text,) = await _runs(state_dir, ("main", cmd))
    assert "GROUP=/exechost-" in text and "/agent-main-" in text, text


async def test_host_run_joins_another_agents_pids_cgroup(state_dir: Path) -> None:
    """Open before the fix on this branch (/sys/fs/cgroup read-only in every view): a host run writes 0 to
    another agent's host-run pids group `tasks` (the same uid owns every agent's group): its fork bomb then
    fills the other agent's quarter of pid_max, not its own"""
    _needs_pids_group(state_dir)
    cmd = (
        f"g=$({GROUP}); i=${{g%/*}}; i=${{i%/*}}; "
        "for t in /sys/fs/cgroup/pids$i/agent-victim-*/host/tasks; do echo 0 > $t; done; "
        f"echo GROUP=$({GROUP})"
    )
    _, text = await _runs(state_dir, ("victim", "true"), ("main", cmd))
    group = text.split("GROUP=")[-1]
    assert "/agent-main-" in group and "/agent-victim-" not in group, text


async def test_host_run_lifts_its_own_pids_cap(state_dir: Path) -> None:
    """Open before the fix on this branch (/sys/fs/cgroup read-only in every view): a host run writes `max` to
    its own agent's and the install's pids.max (cgroup files the gateway's uid owns, writable in the view):
    the per-agent and per-install caps are its to lift"""
    _needs_pids_group(state_dir)
    cmd = (
        f"g=$({GROUP}); a=${{g%/*}}; echo max > /sys/fs/cgroup/pids$a/pids.max; "
        "echo CAP=$(cat /sys/fs/cgroup/pids$a/pids.max)"
    )
    (text,) = await _runs(state_dir, ("main", cmd))
    assert "CAP=max" not in text, text


def _node(home: Path, key: Path) -> str:
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "known_hosts").write_text("")
    return FULL + (
        f'[nodes.n1]\nhost = "127.0.0.1"\nport = 2\nuser = "x"\nidentityFile = "{key}"\n'
        f'knownHosts = "{home}/.ssh/known_hosts"\n'
    )


@pytest.mark.parametrize("sub", [".", "nodes"])
async def test_node_key_in_dot_ssh_or_a_subdir_is_hidden(state_dir: Path, sub: str) -> None:
    """A node's identityFile in ~/.ssh or in a directory below it (~/.ssh/nodes/id_node). Open before
    the fix on this branch: dirshadow covered ~/.ssh/nodes first, then ~/.ssh with a bind of the real
    ~/.ssh/nodes over that cover, so the key was readable (fixed: outer directories are covered first)."""
    home = Path(os.environ["HOME"])
    keydir = home / ".ssh" / sub
    keydir.mkdir(parents=True, mode=0o700, exist_ok=True)
    key = keydir / "id_node"
    key.write_text("SECRET-NODE-KEY\n")
    write_config(state_dir, _node(home, key))
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            result = await client.request("exec", {"command": f"cat {key}; ls -a {keydir}"})
        finally:
            await client.close()
    assert "SECRET-NODE-KEY" not in result["text"], result["text"]
