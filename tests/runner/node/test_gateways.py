"""A gateway's key proves one link to one node only, and a node's events reach only their own gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.nodes import gateway_key
from engine.nodes.gateway_key import GatewayKey
from engine.nodes.wire import NodeEvent
from runner.node import gateways


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
