"""Issue 27 §1: `agents revoke` sent nothing to the nodes, so a background run the agent left on a node kept
running as it. The gateway now keeps each revocation until every configured node answered `agent.revoke`
(engine.nodes.revocations) and sends it on every link until then: a node down at the revoke ends the agent's
runs when it links again, and only the revoking gateway's agent is touched on a node gateways share."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from engine import principals
from engine.commands import gatewaydirs
from engine.nodes.revocations import Revocations
from engine.protocol.client import ControlClient
from tests.helpers.gateway import FULL, cli, connect, gateway, listed, wait_until, write_config
from tests.helpers.sshd import SshdNode, sshd_nodes  # noqa: F401

NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'
GATEWAY = FULL.replace('"gateway"', '"node"')


async def _start(ops: ControlClient, node: str, mark: Path) -> str:
    started = await ops.request(
        "exec",
        {
            "command": f"while :; do echo x >> {mark}; sleep 0.1; done",
            "host": "node",
            "node": node,
            "background": True,
        },
    )
    assert started["details"].get("status") == "running", started
    return str(started["details"]["sessionId"])


async def _status(operator: ControlClient, sid: str) -> list[Any]:
    rows = await operator.list_sessions()
    return [r.get("status") for r in rows if str(r.get("sessionId", "")).endswith(sid)]


async def _grown(mark: Path, since: int) -> bool:
    return mark.exists() and mark.stat().st_size > since


async def test_a_node_down_at_the_revoke_ends_the_agents_runs_when_it_links_again(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text(NODE_FULL)
    alive = node.marks / "alive"
    write_config(state_dir, GATEWAY + "".join(n.config_toml() for n in sshd_nodes) + listed("ops"))
    token = principals.mint(state_dir, "ops")
    service = node.run_service()  # sessions outlive the links
    try:
        async with gateway(state_dir) as server:
            operator = await connect(state_dir)
            ops = await connect(state_dir, client="ops", operator=False, credential=token)
            try:
                sid = await _start(ops, node.name, alive)
                await wait_until(lambda: _grown(alive, 0), timeout=30)
                link = server.services.nodes.links[node.name]
                node.drop_connections()  # the node's sshd is gone: its service and the run go on
                await wait_until(lambda: link.state != "connected", timeout=30)

                await operator.request("agents.revoke", {"agent": "ops"})

                owed = Revocations(state_dir).owed(node.name)
                assert [r.agent for r in owed] == ["ops"]  # kept for the node that did not hear it
                size = alive.stat().st_size
                await wait_until(lambda: _grown(alive, size), timeout=30)  # still running, unreached

                node.start()  # the node comes back: its next link carries the revocation
                await wait_until(lambda: not Revocations(state_dir).owed(node.name), timeout=60)
                await wait_until(lambda: _status(operator, sid), timeout=30)

                async def ended() -> bool:
                    return all(s != "running" for s in await _status(operator, sid))

                await wait_until(ended, timeout=30)
            finally:
                await ops.close()
                await operator.close()
    finally:
        service.terminate()
        service.wait(timeout=30)


async def test_a_revoke_ends_only_its_own_gateways_agent_on_a_shared_node(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text(NODE_FULL)
    other = state_dir.parent / "b"
    other.mkdir(mode=0o700)
    # a second gateway of the account, made as the operator would make it: recorded (gatewaydirs.adopt)
    gatewaydirs.record(os.environ["HOME"], str(other))
    for state in (state_dir, other):
        write_config(state, GATEWAY + node.config_toml() + listed("ops"))
    tokens = [principals.mint(state, "ops") for state in (state_dir, other)]
    marks = [node.marks / "first", node.marks / "second"]
    service = node.run_service()
    try:
        async with (
            gateway(state_dir, config_path=str(state_dir / "config.toml")),
            gateway(other, config_path=str(other / "config.toml")),
        ):
            operators = [await connect(state) for state in (state_dir, other)]
            agents = [
                await connect(state, client="ops", operator=False, credential=token)
                for state, token in zip((state_dir, other), tokens, strict=True)
            ]
            try:
                sids = [await _start(a, node.name, m) for a, m in zip(agents, marks, strict=True)]
                for mark in marks:
                    await wait_until(lambda mark=mark: _grown(mark, 0), timeout=30)

                await operators[0].request("agents.revoke", {"agent": "ops"})  # the first gateway's ops

                async def first_ended() -> bool:
                    return all(s != "running" for s in await _status(operators[0], sids[0]))

                await wait_until(first_ended, timeout=30)
                # The second gateway's agent of the same name is another principal: it runs on.
                assert await _status(operators[1], sids[1]) == ["running"]
                size = marks[1].stat().st_size
                await wait_until(lambda: _grown(marks[1], size), timeout=30)
                assert Revocations(other).owed(node.name) == []  # nothing of it was the second's
            finally:
                for client in (*agents, *operators):
                    await client.close()
    finally:
        service.terminate()
        service.wait(timeout=30)


async def test_a_revoke_made_while_no_gateway_ran_reaches_the_node_when_the_next_one_starts(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text(NODE_FULL)
    alive = node.marks / "alive"
    write_config(state_dir, GATEWAY + node.config_toml() + listed("ops"))
    token = principals.mint(state_dir, "ops")
    service = node.run_service()  # the run outlives the gateway
    try:
        async with gateway(state_dir):
            ops = await connect(state_dir, client="ops", operator=False, credential=token)
            try:
                sid = await _start(ops, node.name, alive)
                await wait_until(lambda: _grown(alive, 0), timeout=30)
            finally:
                await ops.close()

        done = await asyncio.to_thread(cli, state_dir, "agents", "revoke", "ops")  # no gateway runs
        assert done.returncode == 0, done.stderr
        assert [r.agent for r in Revocations(state_dir).owed(node.name)] == ["ops"]

        async with gateway(state_dir):  # nobody uses the node: its start tells it all the same
            await wait_until(lambda: not Revocations(state_dir).owed(node.name), timeout=60)
            operator = await connect(state_dir)
            try:

                async def ended() -> bool:
                    rows = await _status(operator, sid)
                    return bool(rows) and all(s != "running" for s in rows)

                await wait_until(ended, timeout=30)
            finally:
                await operator.close()
    finally:
        service.terminate()
        service.wait(timeout=30)


async def test_a_rotation_reaches_a_node_down_at_the_time_and_the_agents_run_goes_on(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    """`agents rotate` told the nodes nothing: a run the old (leaked) credential sent and that reached a
    node after the rotation ran, and the agent's sandboxes there kept their egress. It is now kept for
    every node as a rotated revocation, like a revoke; unlike a revoke it leaves the agent's runs going."""
    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text(NODE_FULL)
    alive = node.marks / "alive-rotated"
    write_config(state_dir, GATEWAY + "".join(n.config_toml() for n in sshd_nodes) + listed("ops"))
    token = principals.mint(state_dir, "ops")
    service = node.run_service()
    try:
        async with gateway(state_dir) as server:
            operator = await connect(state_dir)
            ops = await connect(state_dir, client="ops", operator=False, credential=token)
            try:
                sid = await _start(ops, node.name, alive)
                await wait_until(lambda: _grown(alive, 0), timeout=30)
                link = server.services.nodes.links[node.name]
                node.drop_connections()
                await wait_until(lambda: link.state != "connected", timeout=30)

                rotated = await operator.request("agents.rotate", {"agent": "ops"})
                assert rotated["token"] != token

                [owed] = Revocations(state_dir).owed(node.name)
                assert (owed.agent, owed.rotated) == ("ops", True)
                assert owed.credential  # the old credential's stamp: what the node refuses from now on

                node.start()
                await wait_until(lambda: not Revocations(state_dir).owed(node.name), timeout=60)
                size = alive.stat().st_size
                await wait_until(lambda: _grown(alive, size), timeout=30)  # heard, and still running
                assert await _status(operator, sid) == ["running"]
            finally:
                await ops.close()
                await operator.close()
    finally:
        service.terminate()
        service.wait(timeout=30)
