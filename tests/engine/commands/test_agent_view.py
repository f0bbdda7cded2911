"""boundfiles.agent_view: what an agent is shown of a content binding is which files, never the digest or
size of bytes the gateway read with its own rights (fresh round 18 b)."""

from __future__ import annotations

from engine.commands.boundfiles import agent_view

ROW = {
    "role": "script",
    "path": "/home/op/.config/pin",
    "sha256": "ab" * 32,
    "size": 5,
    "agentWritable": False,
}


def test_every_digest_in_a_view_and_its_decision_is_withheld() -> None:
    view = {"id": "x", "contentDigests": [ROW], "decision": {"verdict": "ask", "contentDigests": [ROW]}}
    shown = agent_view(view)
    for rows in (shown["contentDigests"], shown["decision"]["contentDigests"]):
        assert rows == [
            {
                "role": "script",
                "path": ROW["path"],
                "agentWritable": False,
                "sha256": None,
                "size": None,
                "withheld": True,
            }
        ]
    assert view["contentDigests"] == [ROW]  # the operator's view is untouched
    assert shown["id"] == "x"


def test_a_view_without_a_binding_is_unchanged() -> None:
    assert agent_view({"command": "ls", "decision": None}) == {"command": "ls", "decision": None}
