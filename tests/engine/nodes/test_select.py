"""Node selection (reference §5.7): match order, normalisation and the reference's error texts."""

from __future__ import annotations

import pytest

from engine.nodes.select import Candidate, NodeSelectError, normalize_node_key, select_node
from engine.nodes.wire import Hello, Request, Response, WireError, decode, encode

A = Candidate("alpha", "127.0.0.2", "3f2a9c1e-aaaa", "Mac Studio!", connected=True)
B = Candidate("beta", "10.0.0.3", "3f2a9c77-bbbb", "Build Box")
C = Candidate("gamma", "gamma.example", None, None)


def test_normalize_node_key() -> None:
    assert normalize_node_key(" Mac Studio! ") == "mac-studio"
    assert normalize_node_key("---PI__Node---") == "pi-node"


def test_match_order() -> None:
    nodes = [A, B, C]
    assert select_node(nodes, "3f2a9c1e-aaaa") is A  # exact id
    assert select_node(nodes, "10.0.0.3") is B  # remote IP
    assert select_node(nodes, "mac studio") is A  # normalised display name
    assert select_node(nodes, "gamma") is C  # config name
    assert select_node(nodes, "3f2a9c7") is B  # id prefix of 6+
    with pytest.raises(NodeSelectError, match=r"^unknown node: 3f2a9 \(known: alpha, beta, gamma\)$"):
        select_node(nodes, "3f2a9")  # a prefix shorter than 6 never matches
    with pytest.raises(NodeSelectError) as err:
        select_node([Candidate("a", "h", "3f2a9c1e", None), B], "3f2a9c")  # neither connected: no tie-break
    assert str(err.value) == (
        "ambiguous node: 3f2a9c (matches: a [node=3f2a9c1e, client=exechost], "
        "Build Box [node=3f2a9c77-bbbb, client=exechost])"
    )


def test_connected_breaks_a_tie_and_errors() -> None:
    twin = Candidate("alpha2", "h2", "3f2a9c1e-cccc", "Mac Studio")
    assert select_node([A, twin], "mac-studio") is A  # only A is connected
    with pytest.raises(NodeSelectError, match=r"requires a paired node \(none available\)"):
        select_node([], None)
    with pytest.raises(NodeSelectError, match=r"^unknown node: x \(no nodes are configured; add one with: "):
        select_node([], "x")
    with pytest.raises(NodeSelectError, match=r"requires a node id when multiple nodes are available"):
        select_node([A, B], None)
    assert select_node([B], None) is B
    with pytest.raises(NodeSelectError, match=r"^exec node not allowed \(bound to alpha\)$"):
        select_node([A, B], "beta", bound="alpha")
    assert select_node([A, B], None, bound="alpha") is A


def test_wire_round_trip_and_refusals() -> None:
    hello = Hello("id", "name", "1.0", "linux", ["system.run"], "/bin")
    assert decode(encode(hello)) == hello
    req = Request("7", "system.run", {"command": ["true"]})
    assert decode(encode(req)) == req
    assert decode(encode(Response("7", False, error={"code": "X", "message": "m"}))) == Response(
        "7", False, error={"code": "X", "message": "m"}
    )
    for bad in (
        b"[]",
        b"{",
        b'{"type":"nope"}',
        b'{"type":"res","id":1}',
        b'{"type":"req","id":"1"}',
        b'{"type":"res","id":"1","error":{"code":1}}',
        b'{"type":"hello","protocol":1}',
    ):
        with pytest.raises(WireError):
            decode(bad)
