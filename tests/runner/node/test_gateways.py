"""A gateway's key proves one link to one node only, a node's events reach only their own gateway, and
gateways sharing a node keep their links side by side."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from engine.nodes import gateway_key
from engine.nodes.gateway_key import GatewayKey
from engine.nodes.wire import NodeEvent, Response
from engine.sessions import SessionManager
from runner.node import gateways
from runner.node.links import Links, Output
from tests.helpers.gateway import connect, gateway, write_config
from tests.helpers.sshd import SshdNode

GATEWAY_FULL = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'


def test_a_proof_holds_for_its_node_and_nonce_only(tmp_path: Path) -> None:
    key = GatewayKey.load_or_create(tmp_path)
    assert (tmp_path / gateway_key.FILE_NAME).stat().st_mode & 0o777 == 0o600
    assert GatewayKey.load_or_create(tmp_path).public() == key.public()  # kept across restarts
    nonce = gateway_key.new_nonce()
    proof = key.proof("node-a", nonce)
    assert gateway_key.verify(proof, "node-a", nonce) == gateway_key.fingerprint(key.public())
    assert gateway_key.verify(proof, "node-b", nonce) is None  # seen by one node: worthless on another
    assert gateway_key.verify(proof, "node-a", gateway_key.new_nonce()) is None  # or on another link
    (tmp_path / "b").mkdir(mode=0o700)
    other = GatewayKey.load_or_create(tmp_path / "b")
    forged = {**proof, "publicKey": other.proof("node-a", nonce)["publicKey"]}
    assert gateway_key.verify(forged, "node-a", nonce) is None  # another's fingerprint, this signature
    assert gateway_key.verify({"publicKey": "!", "signature": "x"}, "node-a", nonce) is None


def test_scopes_name_no_namespace_and_events_stay_with_their_gateway() -> None:
    with pytest.raises(gateways.ForeignScope):
        gateways.scoped("abc/agent:main", "")
    assert gateways.scoped("agent:main", "fa/") == "fa/agent:main"
    mine = NodeEvent("system.event", {"sessionKey": "fa/agent:main", "text": "done"})
    assert gateways.for_link(mine, "fb/", None) is None  # type: ignore[arg-type]
    assert gateways.for_link(mine, "", None) is None  # type: ignore[arg-type]
    seen = gateways.for_link(mine, "fa/", None)  # type: ignore[arg-type]
    assert seen is not None and seen.payload["sessionKey"] == "agent:main"
    row = NodeEvent("session.started", {"session": {"sessionId": "x", "scopeKey": "agent:main"}})
    assert gateways.for_link(row, "fa/", None) is None  # type: ignore[arg-type]
    anon = gateways.for_link(row, "", None)  # type: ignore[arg-type]
    assert anon is not None and anon.payload["session"]["scopeKey"] == "agent:main"


async def test_two_gateways_share_a_node_without_knocking_each_others_link_down(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """A node service kept one link at a time: gateway B's link closed gateway A's, A's next run linked
    again and closed B's, and so on: two gateways sharing a node took turns losing their links. Each
    gateway's newest link now replaces only its own older one."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    other = state_dir.parent / "b"
    other.mkdir(mode=0o700)
    for state in (state_dir, other):
        write_config(state, GATEWAY_FULL + alpha.config_toml())  # the operator's CLI claims `other` first
    service = alpha.run_service()
    try:
        async with (
            gateway(state_dir, config_path=str(state_dir / "config.toml")) as first,
            gateway(other, config_path=str(other / "config.toml")) as second,
        ):
            agents = [await connect(state, "agent", operator=False) for state in (state_dir, other)]
            servers = (first, second)
            linked_at: list[int | None] = [None, None]
            for turn in range(3):
                for n, (agent, server) in enumerate(zip(agents, servers, strict=True)):
                    res = await agent.request("exec", {"command": f"echo g{n}-{turn}", "node": "alpha"})
                    assert f"g{n}-{turn}" in res["text"], res
                    link = server.services.nodes.links["alpha"]
                    assert link.state == "connected"
                    if linked_at[n] is None:
                        linked_at[n] = link.connected_at_ms
                    assert link.connected_at_ms == linked_at[n], "its link was knocked down and made again"
            # Each gateway's sessions stay its own (runner.node.gateways), with both links up.
            bg = await agents[0].request("exec", {"command": "sleep 30", "node": "alpha", "background": True})
            sid = bg["details"]["sessionId"]
            listed = await agents[1].request("process", {"action": "list"})
            assert sid not in str(listed)
            await agents[0].request("process", {"action": "kill", "sessionId": sid})
            for agent in agents:
                await agent.close()
    finally:
        service.terminate()
        assert service.wait(timeout=30) == 0


def test_a_nodes_own_request_goes_to_the_link_of_the_gateway_that_caused_it(state_dir: Path) -> None:
    """An ask relayed while a run of gateway A was in flight went to whichever link was newest: with two
    gateways linked, to B's operator. It goes to the link of the run's own gateway, or nowhere."""

    async def main() -> None:
        links = Links(SessionManager(state_dir))
        a, b = _Capture("fa/"), _Capture("fb/")
        for link in (a, b):
            links.up.append(link)
        token = gateways.CURRENT_GATEWAY.set("fa/")
        try:
            asked = asyncio.ensure_future(links.request("approval.request", {"approvalId": "x"}))
            await asyncio.sleep(0)
            assert [f["method"] for f in a.frames] == ["approval.request"] and b.frames == []
            links.answered(Response(a.frames[0]["id"], True, payload={}), b)  # the other link's word: none
            assert not asked.done()
            links.answered(Response(a.frames[0]["id"], True, payload={"decision": "deny"}), a)
            assert (await asked).payload == {"decision": "deny"}
            gateways.CURRENT_GATEWAY.set("fc/")
            with pytest.raises(ConnectionError):
                await links.request("approval.request", {"approvalId": "y"})
        finally:
            gateways.CURRENT_GATEWAY.reset(token)

    asyncio.run(main())


class _Capture(Output):
    def __init__(self, namespace: str) -> None:
        super().__init__(None)
        self.gateway = namespace
        self.resend_pending = False
        self.frames: list[dict[str, Any]] = []

    async def write(self, data: bytes) -> None:
        self.frames.append(json.loads(data))
