"""Issue 28: host=sandbox on a node whose own config says backend = "bwrap": the node's bwrap confines the
command (no Docker involved), and the gateway lists it with the node column and the backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sandbox import bwrap
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import connect, gateway
from tests.helpers.sshd import SshdNode

pytestmark = [pytest.mark.bwrap, needs_bwrap]


@pytest.fixture
def bwrap_nodes(sshd_nodes: list[SshdNode]) -> Iterator[list[SshdNode]]:
    try:
        yield sshd_nodes
    finally:
        saved = os.environ["OPENCLAW_STATE_DIR"]
        try:
            for node in sshd_nodes:  # the node's sandboxes are recorded in its own state dir
                os.environ["OPENCLAW_STATE_DIR"] = str(node.state_dir)
                bwrap.remove_all()
        finally:
            os.environ["OPENCLAW_STATE_DIR"] = saved


async def test_bwrap_sandbox_on_a_node(bwrap_nodes: list[SshdNode], state_dir: Path) -> None:
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nnode = "alpha"\n'
        + "".join(n.config_toml() for n in bwrap_nodes)
    )
    for node in bwrap_nodes:
        (node.state_dir / "config.toml").write_text('[agents.defaults.sandbox]\nbackend = "bwrap"\n')
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        first = await agent.request("exec", {"command": "pwd; hostname; grep NoNewPrivs /proc/self/status"})
        assert first["details"]["ranOn"] == "sandbox on node alpha", first
        assert first["text"].splitlines()[:3] == ["/workspace", "sandbox", "NoNewPrivs:\t1"], first
        listed = await agent.request("sandbox.list")
        (row,) = [r for r in listed["containers"] if r["node"] == "alpha"]
        assert row["backend"] == "bwrap" and row["running"] and "-bw-" in row["containerName"], row
        explained = await agent.request("sandbox.explain", {"node": "alpha"})
        assert explained["backend"] == "bwrap" and explained["bwrap"]["argv"], explained
        await agent.close()
