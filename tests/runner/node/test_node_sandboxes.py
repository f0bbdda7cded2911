"""Sandboxes on a node: host=sandbox routed by the agent's `sandbox.node` (or `node=`), created by the node's
runner on its Docker (here: the same dockerd, told apart by the node's stateId), listed with the node
column, exec'd warm, explained, pruned; the same verbs from `exechost sandbox … --node`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.protocol.frames import RemoteError
from engine.sandbox import docker_ops
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sandbox import IMAGE, build_test_image
from tests.helpers.sshd import EXECHOST, REPO, SshdNode

pytestmark = pytest.mark.docker


def state_id(state: Path) -> str:
    return hashlib.sha256(os.path.realpath(state).encode()).hexdigest()[:8]


def _remove_nodes_containers(nodes: list[SshdNode]) -> None:
    for node in nodes:
        for c in docker_ops.list_sandboxes(
            f"exechost.stateId={state_id(node.state_dir)}", every_install=True
        ):
            docker_ops.remove(c["Id"])


@pytest.fixture
def node_sandboxes(sshd_nodes: list[SshdNode]) -> Iterator[list[SshdNode]]:
    build_test_image()
    try:
        yield sshd_nodes
    finally:
        _remove_nodes_containers(sshd_nodes)


def configure(state_dir: Path, nodes: list[SshdNode], sandbox_node: str | None = "alpha") -> None:
    table = '[agents.defaults.sandbox]\nmode = "all"\n' + (
        f'node = "{sandbox_node}"\n' if sandbox_node else ""
    )
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        + table
        + "".join(n.config_toml() for n in nodes)
    )
    for node in nodes:
        # The node operator's own sandbox settings shape its containers (mode is the gateway's call).
        (node.state_dir / "config.toml").write_text(f'[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n')


def cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": REPO}
    return subprocess.run([EXECHOST, *args], env=env, capture_output=True, text=True, timeout=120)


async def test_sandbox_on_a_node_through_the_gateway(node_sandboxes: list[SshdNode], state_dir: Path) -> None:
    alpha = node_sandboxes[0]
    configure(state_dir, node_sandboxes)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        first = await agent.request("exec", {"command": "pwd; ls /sys/class/net; echo $OPENCLAW_STATE_DIR."})
        assert first["details"]["host"] == "sandbox" and first["details"]["node"] == "alpha", first
        # In the container, not the node's shell; and the result says so.
        assert first["text"].split()[:3] == ["/workspace", "lo", "."]
        assert first["details"]["ranOn"] == "sandbox on node alpha"
        listed = await agent.request("sandbox.list")
        mine = [r for r in listed["containers"] if r["node"] == "alpha"]
        assert len(mine) == 1 and mine[0]["running"] and mine[0]["configMatch"], listed
        row = mine[0]
        assert state_id(alpha.state_dir) in row["containerName"]  # the node's install, not the gateway's
        assert all(r["node"] is None for r in listed["containers"] if r is not row)
        only = (await agent.request("sandbox.list", {"node": "alpha"}))["containers"]
        assert [(r["containerName"], r["node"]) for r in only] == [(row["containerName"], "alpha")]

        # Warm: the same container answers again (created once).
        warm = await agent.request("exec", {"command": "echo warm", "node": "alpha"})
        assert warm["text"].splitlines()[0] == "warm"
        again = (await agent.request("sandbox.list", {"node": "alpha"}))["containers"]
        assert [(r["containerName"], r["createdAtMs"]) for r in again] == [
            (row["containerName"], row["createdAtMs"])
        ]
        # A background session in the node's sandbox, through `process`.
        bg = await agent.request("exec", {"command": "echo bg-out; sleep 30", "background": True})
        sid = bg["details"]["sessionId"]
        assert sid.startswith("node:alpha:")
        await wait_until(lambda: _log_has(agent, sid, "bg-out"), timeout=15)
        await agent.request("process", {"action": "kill", "sessionId": sid})

        explained = await agent.request("sandbox.explain", {"node": "alpha"})
        assert explained["node"] == "alpha" and explained["containerName"] == row["containerName"]
        assert explained["runtime"] == "sandboxed" and explained["docker"]["image"] == IMAGE
        assert (await agent.request("sandbox.prune", {"node": "alpha"})) == {"removed": [], "node": "alpha"}
        # The node operator shortens the idle window: the next prune removes it.
        (alpha.state_dir / "config.toml").write_text(
            f'[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
            "[agents.defaults.sandbox.prune]\nidleHours = 0.00001\n"
        )
        pruned = await wait_until(lambda: _pruned(agent), timeout=30, interval=0.2)
        assert pruned == [row["containerName"]]
        assert (await agent.request("sandbox.list", {"node": "alpha"}))["containers"] == []
        with pytest.raises(RemoteError, match="unknown node"):
            await agent.request("sandbox.list", {"node": "gamma"})
        await agent.close()
    assert not docker_ops.inspect(row["containerName"]).exists


async def _pruned(agent: object) -> list[str] | None:
    res = await agent.request("sandbox.prune", {"node": "alpha"})  # type: ignore[attr-defined]
    return list(res["removed"]) or None


async def _log_has(agent: object, sid: str, needle: str) -> str | None:
    res = await agent.request("process", {"action": "log", "sessionId": sid})  # type: ignore[attr-defined]
    return res["text"] if needle in res["text"] else None


async def test_per_call_node_and_the_cli(node_sandboxes: list[SshdNode], state_dir: Path) -> None:
    """No sandbox.node: `node=beta` on the call picks the node; the CLI reaches it over its own link."""
    beta = node_sandboxes[1]
    configure(state_dir, node_sandboxes, sandbox_node=None)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        res = await agent.request("exec", {"command": "echo on-beta", "node": "beta"})
        assert res["details"]["node"] == "beta" and res["text"].splitlines()[0] == "on-beta"
        await agent.close()
    listed = cli(state_dir, "sandbox", "list", "--node", "beta", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["containers"]
    assert row["node"] == "beta" and state_id(beta.state_dir) in row["containerName"]
    human = cli(state_dir, "sandbox", "list", "--node", "beta")
    assert "On node beta:" in human.stdout and row["containerName"] in human.stdout
    explained = cli(state_dir, "sandbox", "explain", "--node", "beta", "--json")
    assert json.loads(explained.stdout)["containerName"] == row["containerName"]
    recreated = cli(state_dir, "sandbox", "recreate", "--node", "beta", "--all", "--force")
    assert recreated.returncode == 0 and f"✓ Removed {row['containerName']}" in recreated.stdout
    assert not docker_ops.inspect(row["containerName"]).exists
    pruned = cli(state_dir, "sandbox", "prune", "--node", "beta")
    assert pruned.returncode == 0 and "Pruned 0 runtime(s)." in pruned.stdout
    unknown = cli(state_dir, "sandbox", "list", "--node", "gamma")
    assert unknown.returncode != 0 and "unknown node: gamma" in unknown.stderr


async def test_console_sandboxes_pane_shows_and_recreates_a_nodes_sandbox(
    node_sandboxes: list[SshdNode], state_dir: Path
) -> None:
    from textual.pilot import Pilot

    from console.app import ConsoleApp
    from console.dialogs import ConfirmDialog
    from console.widgets.sandboxes import SandboxesPane

    configure(state_dir, node_sandboxes)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        await agent.request("exec", {"command": "true"})
        (row,) = (await agent.request("sandbox.list", {"node": "alpha"}))["containers"]
        app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
        async with app.run_test(size=(200, 40)) as pilot:

            async def until(pred: object) -> object:
                async def check() -> object:
                    await pilot.pause()
                    return pred()  # type: ignore[operator]

                return await wait_until(check, timeout=20)

            assert isinstance(pilot, Pilot)
            await wait_until(app.link.connected.is_set)
            await pilot.press("5")
            pane = app.query_one(SandboxesPane)
            await until(lambda: any(r.get("node") == "alpha" for r in pane.rows))
            index = next(i for i, r in enumerate(pane.rows) if r.get("node") == "alpha")
            table = app.query_one("#sandbox-list")
            assert "alpha" in str(table.get_row_at(index)[0])  # type: ignore[attr-defined]
            table.move_cursor(row=index)  # type: ignore[attr-defined]
            await pilot.press("e")
            detail = app.query_one("#sandbox-detail")
            await until(lambda: row["containerName"] in str(detail.render()))
            await pilot.press("x")
            await until(lambda: isinstance(app.screen, ConfirmDialog))
            await pilot.press("y")
            await until(lambda: not docker_ops.inspect(row["containerName"]).exists)
            await until(lambda: all(r.get("node") != "alpha" for r in pane.rows))
        await agent.close()


async def _acli(state_dir: Path, *args: str) -> tuple[int, str]:
    """The CLI against the in-process gateway (a blocking run would stall the gateway's own loop)."""
    import asyncio

    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": REPO}
    proc = await asyncio.create_subprocess_exec(
        EXECHOST, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode() + err.decode()


async def test_cli_sandbox_list_merges_connected_nodes(
    node_sandboxes: list[SshdNode], state_dir: Path
) -> None:
    """Issue 22: `exechost sandbox list` (no --node) shows the connected nodes' sandboxes with their node,
    as the console does."""
    configure(state_dir, node_sandboxes)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        await agent.request("exec", {"command": "true"})
        code, out = await _acli(state_dir, "sandbox", "list", "--json")
        assert code == 0, out
        rows = [r for r in json.loads(out)["containers"] if r["node"] == "alpha"]
        assert len(rows) == 1 and rows[0]["running"] is True
        code, out = await _acli(state_dir, "sandbox", "list")
        assert code == 0 and "Node:    alpha" in out and rows[0]["containerName"] in out
        await agent.close()
