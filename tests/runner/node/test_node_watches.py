"""runner.node.output: a node's watch table is each principal's own (gateway namespace + agent), so one
agent's sessions never leave another's unwatched, and an ended or unwatched session frees its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.nodes.wire import NodeEvent
from engine.sessions import RunSpec, SessionManager
from runner.node import gateways, output
from runner.node.output import NodeOutput, WatchError


async def _start(manager: SessionManager, scope: str) -> str:
    res = await manager.run(RunSpec(command="sleep 30", background=True, scope_key=scope))
    assert res.details["status"] == "running", res.text
    return str(res.details["sessionId"])


async def _emit(_event: NodeEvent) -> None:
    return None


def test_principal_is_the_gateway_and_the_agent() -> None:
    assert gateways.principal("fp/agent:main:s1") == "fp/main"
    assert gateways.principal("fp/agent:main") == "fp/main"
    assert gateways.principal("gp/agent:main:s1") == "gp/main"  # another gateway's main: another principal
    assert gateways.principal("agent:ops:x") == "ops"  # a link that proved no key
    assert gateways.principal("fp/plain") == "fp/"  # ownerless: that gateway's own, nobody else's
    assert gateways.principal("plain") == ""


async def test_each_principal_watches_its_own_share(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "MAX_WATCHED", 2)
    manager = SessionManager(state_dir, kill_grace_sec=0.5)
    out = NodeOutput(manager, _emit)
    try:
        mains = [await _start(manager, "fp/agent:main:s") for _ in range(3)]
        ops = await _start(manager, "fp/agent:ops:s")
        other_main = await _start(manager, "gp/agent:main:s")
        out.watch(mains[0])
        out.watch(mains[1])
        out.watch(mains[1])  # watched already: takes no second place
        with pytest.raises(WatchError, match="at most 2 sessions of one agent"):
            out.watch(mains[2])
        assert out.watch(ops)["watching"] and out.watch(other_main)["watching"]
        assert (out.watched("fp/main"), out.watched("fp/ops"), out.watched("gp/main")) == (2, 1, 1)
        out.unwatch(mains[0])  # its place is free at once
        assert out.watched("fp/main") == 1
        out.watch(mains[2])
        forwarder = out._forwarders[mains[1]][1]
        await manager.process("kill", {"sessionId": mains[1]}, "fp/agent:main:s")
        await forwarder  # it ends with its session's output
        assert out.watched("fp/main") == 1
        out.watch(mains[0])
        assert out.watched("fp/main") == 2
    finally:
        out.close()
        await manager.close()
