"""Issue 29 on a node: a node's sandbox goes out through the node's own egress proxy, under the node's own
`[sandbox.egress]`; a name the node does not know becomes an ask relayed to the gateway's inbox (like a
command ask), and the operator's answer there lets the waiting connection through."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.protocol.client import ControlClient
from engine.sandbox import bwrap
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.egress import origin
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sshd import SshdNode

pytestmark = [pytest.mark.bwrap, needs_bwrap]


@pytest.fixture
def egress_nodes(sshd_nodes: list[SshdNode]) -> Iterator[list[SshdNode]]:
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


async def _pending(client: ControlClient, target: str) -> dict[str, object] | None:
    rows = (await client.request("approvals.pending", {})).get("approvals") or []
    return next((r for r in rows if r.get("egress") == target), None)


async def test_a_node_sandbox_uses_the_node_proxy_and_relays_its_asks(
    egress_nodes: list[SshdNode], state_dir: Path
) -> None:
    with origin() as o:
        (state_dir / "config.toml").write_text(
            '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
            '[agents.defaults.sandbox]\nmode = "all"\nnode = "alpha"\n'
            # The gateway's own egress says nothing of the node's: the node decides by its own.
            + "".join(n.config_toml() for n in egress_nodes)
        )
        for node in egress_nodes:
            (node.state_dir / "config.toml").write_text(
                '[agents.defaults.sandbox]\nbackend = "bwrap"\n'
                '[agents.defaults.sandbox.egress]\nmode = "allowlist"\n'
                f'allow = ["origin.test:{o.port}"]\nask = true\n'
                'resolve = { "origin.test" = "127.0.0.1", "asked.test" = "127.0.0.1" }\n'
            )
        async with gateway(state_dir):
            agent = await connect(state_dir, "agent")
            operator = await connect(state_dir, "op")
            await operator.request("approvals.attach", {})  # an approver: the agent's call waits for it
            try:
                got = await agent.request(
                    "exec", {"command": f"curl -sS --max-time 60 http://origin.test:{o.port}/n1"}
                )
                assert got["details"]["ranOn"] == "sandbox on node alpha", got
                assert f"origin says hello to origin.test:{o.port} at /n1" in got["text"], got
                call = asyncio.ensure_future(
                    agent.request(
                        "exec",
                        {
                            "command": f"curl -sS --max-time 60 http://asked.test:{o.port}/n2",
                            "yieldMs": 120_000,
                        },
                    )
                )
                target = f"asked.test:{o.port}"
                # (a plain request's ask names what its allow-always saves, and says its kind)
                row = await wait_until(lambda: _pending(operator, f"http://{target}"), timeout=60)
                assert row["host"] == "node" and row["nodeId"]
                assert row["command"] == f"connect http://{target} [plain http]"
                await operator.request("approve", {"id": row["id"], "decision": "allow-always"})
                got = await call
                assert "at /n2" in got["text"], got
            finally:
                await agent.close()
                await operator.close()
        alpha = egress_nodes[0]
        saved = json.loads((alpha.state_dir / "exec-approvals.json").read_text())
        # The node's own file, and exactly what was asked: a plain request's name and port, no tunnel;
        # filed under its owner (this gateway's namespace and agent), never the plain name every gateway has.
        from engine.nodes.gateway_key import GatewayKey, fingerprint

        owner = fingerprint(GatewayKey.load_or_create(state_dir).public()) + "/main"
        assert saved["agents"][owner]["egress"]["allow"] == [f"http://{target}"]
        assert "main" not in saved["agents"]
        logs = sorted((alpha.state_dir / "history" / "egress").glob("*.jsonl"))  # (a log per principal)
        lines = [x for path in logs for x in path.read_text().splitlines()]
        names = [(json.loads(x)["name"], json.loads(x)["decision"]) for x in lines]
        assert ("origin.test", "allowed") in names and ("asked.test", "allowed") in names
