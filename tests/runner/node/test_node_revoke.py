"""`agent.revoke` on a node: the agent's sessions end, and a run carrying the revoked credential is refused
when it arrives later (a run the gateway sent before the revoke), while the agent's new credential, another
agent, and the params' wire shape are held to (engine.nodes.wire.AgentRevoke)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.nodes.wire import (
    AGENT_REVOKE,
    AgentRevoke,
    Hello,
    Request,
    Response,
    credential_stamp,
    decode,
    encode,
)
from engine.sandbox.egress import forwarder
from runner.node.links import Output
from runner.node.serve import NodeServer
from tests.helpers.egress import curl, host_forwarder, origin
from tests.helpers.gateway import wait_until

NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'
SANDBOX = "exechost-rv12-node"
OLD, NEW = credential_stamp("old-credential"), credential_stamp("new-credential")


class _Gateway:
    """The gateway's end of one anonymous link to an in-process node server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = 0

    async def call(self, method: str, params: dict[str, Any]) -> Response:
        self.ids += 1
        rid = f"r{self.ids}"
        self.writer.write(encode(Request(rid, method, params)))
        while True:
            frame = decode(await self.reader.readline())
            if isinstance(frame, Response) and frame.id == rid:
                return frame


def _run(agent: str, stamp: str, mark: Path, run: str) -> dict[str, Any]:
    command = f"while :; do echo x >> {mark}; sleep 0.1; done"
    return {
        "command": ["/bin/sh", "-lc", command],
        "rawCommand": command,
        "agentId": agent,
        "runId": run,
        "background": True,
        "credential": stamp,
    }


def test_the_wire_shape_refuses_what_is_not_it() -> None:
    good = AgentRevoke("ops", "ab" * 16, OLD)
    assert AgentRevoke.from_json(good.to_json()) == good
    for bad in ({"agent": "../x", "revocation": "ab" * 16}, {"agent": "ops", "revocation": "x"}):
        with pytest.raises(ValueError):
            AgentRevoke.from_json(bad)
    assert credential_stamp("") == "" and OLD != NEW
    rotated = AgentRevoke("ops", "ab" * 16, OLD, rotated=True)
    assert AgentRevoke.from_json(rotated.to_json()) == rotated  # what it decodes it encodes back
    for bad in ({**good.to_json(), "rotated": "yes"}, {**good.to_json(), "rotated": True, "credential": ""}):
        with pytest.raises(ValueError):
            AgentRevoke.from_json(bad)


@contextlib.asynccontextmanager
async def _linked(state_dir: Path) -> AsyncIterator[tuple[NodeServer, _Gateway]]:
    """An in-process node server (service mode) and an anonymous gateway's link to it."""
    server = NodeServer(state_dir, service=True)
    node_end, gateway_end = socket.socketpair()
    srv_reader, srv_writer = await asyncio.open_connection(sock=node_end)
    reader, writer = await asyncio.open_connection(sock=gateway_end)
    task = asyncio.ensure_future(server.serve(srv_reader, Output(srv_writer)))
    try:
        assert isinstance(decode(await reader.readline()), Hello)
        yield server, _Gateway(reader, writer)
    finally:
        writer.close()
        await asyncio.wait_for(task, 10)
        await server.close_tools()
        await server.sessions.close()


async def test_a_revoked_credentials_runs_end_and_later_ones_are_refused(
    state_dir: Path, tmp_path: Path
) -> None:
    (state_dir / "config.toml").write_text(NODE_FULL)
    async with _linked(state_dir) as (server, gw):
        marks = {name: tmp_path / name for name in ("ops", "dev")}
        started = {}
        for name in ("ops", "dev"):
            res = await gw.call("system.run", _run(name, OLD, marks[name], f"run-{name}"))
            assert res.ok and res.payload and res.payload["status"] == "running", res
            started[name] = server.sessions.get(str(res.payload["sessionId"]))

        res = await gw.call(AGENT_REVOKE, AgentRevoke("ops", "cd" * 16, OLD).to_json())
        assert res.ok and res.payload == {"agent": "ops", "killed": 1}, res
        await wait_until(lambda: started["ops"].exited, timeout=30)
        assert not started["dev"].exited  # another agent's session runs on

        late = await gw.call("system.run", _run("ops", OLD, marks["ops"], "run-late"))
        assert not late.ok and "revoked" in str(late.error), late  # sent before the revoke, arrived after
        again = await gw.call("system.run", _run("ops", NEW, marks["ops"], "run-new"))
        assert again.ok and again.payload and again.payload["status"] == "running", again  # added again

        bad = await gw.call(AGENT_REVOKE, {"agent": "ops", "revocation": "nope"})
        assert not bad.ok and bad.error and bad.error["code"] == "INVALID_REQUEST"


async def test_a_rotation_refuses_the_old_credentials_later_runs_and_keeps_the_agents_sessions(
    state_dir: Path, tmp_path: Path
) -> None:
    """`agents rotate` reaches the node as a rotated revoke: what the old credential sent before the
    rotation and arrives after it is refused, the new one runs, and the agent's running sessions (its own
    still, under its new credential) are not ended as a revoke ends them."""
    (state_dir / "config.toml").write_text(NODE_FULL)
    async with _linked(state_dir) as (server, gw):
        mark = tmp_path / "ops"
        res = await gw.call("system.run", _run("ops", OLD, mark, "run-ops"))
        assert res.ok and res.payload and res.payload["status"] == "running", res
        session = server.sessions.get(str(res.payload["sessionId"]))

        res = await gw.call(AGENT_REVOKE, AgentRevoke("ops", "cd" * 16, OLD, rotated=True).to_json())
        assert res.ok and res.payload == {"agent": "ops", "killed": 0}, res
        late = await gw.call("system.run", _run("ops", OLD, mark, "run-late"))
        assert not late.ok and "revoked" in str(late.error), late
        again = await gw.call("system.run", _run("ops", NEW, mark, "run-new"))
        assert again.ok and again.payload and again.payload["status"] == "running", again
        assert session is not None and not session.exited


async def test_a_revoke_stops_the_agents_sandbox_egress_on_the_node(state_dir: Path) -> None:
    with origin() as site:
        (state_dir / "config.toml").write_text(
            NODE_FULL + "[agents.defaults.sandbox.egress]\n"
            f'mode = "allowlist"\nallow = ["http://allowed.test:{site.port}"]\nask = true\n'
            'resolve = { "allowed.test" = "127.0.0.1" }\n'
        )
        url = f"http://allowed.test:{site.port}/"
        async with _linked(state_dir) as (server, gw):
            directory = forwarder.prepare_dir(SANDBOX)
            await server.egress.listen(SANDBOX, "ops", None)  # as a run's making of the sandbox does
            with host_forwarder(directory) as proxy:
                assert await _status(proxy, url) == "200"
                res = await gw.call(AGENT_REVOKE, AgentRevoke("ops", "ef" * 16, OLD).to_json())
                assert res.ok, res
                assert await _status(proxy, url) == "403"  # the node's own proxy, as the agent: refused
                # A run of the agent enters it again: the sandbox, served under the ended generation, is
                # ended first (its processes are the old credential's: SandboxManager._egress_ready), then
                # served anew.
                assert await server.egress.listen(SANDBOX, "ops", None)
                assert not await server.egress.listen(SANDBOX, "ops", None)
                assert await _status(proxy, url) == "200"


async def _status(proxy: int, url: str) -> str:
    _code, out, _err = await curl(
        "-o", "/dev/null", "-w", "%{http_code}", "-x", f"http://127.0.0.1:{proxy}", url
    )
    return out
