"""A node id is short clean text by construction (engine.nodes.wire.NODE_ID): refused at read otherwise, and
the gateway's pins of node ids (node-keys.json) are bounded in bytes as well as in count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.nodes import identity, wire
from runner.gateway import node_keys
from runner.gateway.node_keys import NodeKeys

HELLO = {
    "type": "hello",
    "protocol": wire.PROTOCOL,
    "nodeId": "n1",
    "displayName": "d",
    "version": "1",
    "platform": "linux",
    "caps": [],
    "pathEnv": "",
}


@pytest.mark.parametrize(
    "node_id",
    ["", " n1", "n1 ", "a b", "n\x1b[2Jx", "n\u202ex", "é", "-n", "n/../x", "n" * (wire.HELLO_ID_CHARS + 1)],
)
def test_a_hello_whose_node_id_is_not_short_clean_text_is_refused_without_quoting_it(node_id: str) -> None:
    with pytest.raises(wire.HelloError, match="nodeId refused") as refused:
        wire.decode(json.dumps({**HELLO, "nodeId": node_id}).encode())
    assert node_id not in str(refused.value) or not node_id


@pytest.mark.parametrize("node_id", ["n1", "127.0.0.2", "3f2a9c1e-0b7d-4c36-9b1a-2f0e8d6c5a41", "n" * 128])
def test_a_well_formed_node_id_is_taken(node_id: str) -> None:
    hello = wire.decode(json.dumps({**HELLO, "nodeId": node_id}).encode())
    assert isinstance(hello, wire.Hello) and hello.node_id == node_id


def test_a_node_refuses_to_start_with_a_node_id_a_gateway_would_refuse(tmp_path: Path) -> None:
    (tmp_path / "node.json").write_text(json.dumps({"nodeId": "my pi"}))
    with pytest.raises(ValueError, match="nodeId refused"):
        identity.load_or_create(tmp_path)
    (tmp_path / "node.json").write_text("{}")
    assert wire.is_node_id(identity.load_or_create(tmp_path).node_id)


def test_the_pinned_ids_are_bounded_in_bytes_not_only_in_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_keys, "MAX_ID_BYTES", 4096)
    keys = NodeKeys(tmp_path)
    for i in range(200):  # well under MAX_IDS, far over the bytes
        keys.pin("alpha", f"{i:03d}" + "n" * 120)
    assert (tmp_path / "node-keys.json").stat().st_size < 4096 + 512
    assert keys.holder("199" + "n" * 120) == "alpha"  # the newest kept, the oldest forgotten
    assert keys.holder("000" + "n" * 120) is None
    with pytest.raises(ValueError, match="node alpha"):
        keys.pin("alpha", "x" * 4_000)


def test_a_planted_pin_that_is_not_a_node_id_is_not_read(tmp_path: Path) -> None:
    planted = {"version": 1, "nodes": {}, "ids": {"n" * 100_000: "alpha", "a b": "alpha", "ok-1": "beta"}}
    (tmp_path / "node-keys.json").write_text(json.dumps(planted))
    keys = NodeKeys(tmp_path)
    assert keys.holder("ok-1") == "beta"
    assert keys.holder("a b") is None and keys.holder("n" * 100_000) is None
