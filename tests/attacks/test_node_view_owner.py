"""A node shared by several gateways keeps each one's host resources apart (issue 27 §1, class 2): the
private dirs, kept view and pids cgroup of a node's host run are keyed by (the gateway's namespace, agent)
(ExecContext.owner), as its sessions are; policy is still the agent's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.config.loader import load_config
from engine.tools.exec_host import host_outside, private_source
from engine.tools.exec_request import ExecContext
from tests.helpers.gateway import claim_state, connect, gateway, write_config
from tests.helpers.sshd import SshdNode

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
FULL_HOST = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


def test_the_owner_keys_every_host_resource_and_defaults_to_the_agent(state_dir: Path) -> None:
    write_config(state_dir, FULL_HOST + 'hostPrivate = ["/var/tmp"]\n')
    config = load_config(None)
    assert ExecContext(agent_id="main").owner == "main"
    assert ExecContext(agent_id="main", namespace="fp1/").owner == "fp1/main"
    mine, a, b = (host_outside(config, "main", owner=o) for o in (None, "fp1/main", "fp2/main"))
    assert mine.private == host_outside(config, "main", owner="main").private
    sources = {o.private[0][0] for o in (mine, a, b)}
    assert len(sources) == 3 and all(o.private[0][1] == "/var/tmp" for o in (mine, a, b))
    if mine.join_tasks is not None:  # a pids cgroup can be made here
        assert len({mine.join_tasks, a.join_tasks, b.join_tasks}) == 3
    assert private_source(config, "main", "/var/tmp/x", "fp1/main") == a.private[0][0] + "/x"


async def _exec(state: Path, command: str, **params: object) -> dict[str, object]:
    client = await connect(state)
    try:
        result = await client.request(
            "exec", {"command": command, "agentId": "main", "yieldMs": 60000, "timeout": 60, **params}
        )
    finally:
        await client.close()
    details: dict[str, object] = result["details"]
    details["_text"] = result["text"]
    return details


@needs_bwrap
async def test_a_workdir_in_a_private_dir_on_a_node_is_the_calling_gateways_own(
    state_dir: Path, sshd_nodes: list[SshdNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gateway A's main leaves a file in its node-side /var/tmp; gateway B's main, run with that dir as
    its workdir (decided and run in B's own copy), does not find it, and A's next run still does."""
    alpha = sshd_nodes[0]
    nodes = (state_dir / "config.toml").read_text()
    (alpha.state_dir / "config.toml").write_text(FULL_HOST + 'hostPrivate = ["/var/tmp"]\n')
    os.chmod(alpha.state_dir / "config.toml", 0o600)
    node = {"host": "node", "node": "alpha", "workdir": "/var/tmp"}
    write_config(state_dir, FULL_HOST.replace('"gateway"', '"node"') + nodes)
    async with gateway(state_dir):
        left = await _exec(state_dir, "echo gateway-a-own > a10-owner; pwd", **node)
        assert left["status"] == "completed", left
    other = state_dir.parent / "s2"
    other.mkdir(mode=0o700)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(other))
    claim_state(other)  # the operator's CLI, before it writes a config there
    write_config(other, FULL_HOST.replace('"gateway"', '"node"') + nodes)
    async with gateway(other):
        seen = await _exec(other, "cat a10-owner; echo > planted-by-b; echo end", **node)
    assert seen["status"] in ("completed", "failed"), seen
    assert "end" in str(seen["_text"]) and "gateway-a-own" not in str(seen["_text"]), seen
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state_dir))
    async with gateway(state_dir):
        again = await _exec(state_dir, "cat a10-owner; ls", **node)
    assert "gateway-a-own" in str(again["_text"]) and "planted-by-b" not in str(again["_text"]), again
