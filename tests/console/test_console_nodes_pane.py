"""The Nodes pane against a real gateway and real sshd nodes (pilot): states, RTT after a ping, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult

from console.widgets.nodes import NodesPane
from engine.protocol.client import ControlClient
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sshd import SshdNode


class _Host(App[None]):
    """Just the pane, with the one thing it needs from the console: a `link` with `request`."""

    def __init__(self, client: ControlClient) -> None:
        super().__init__()
        self.link: Any = client

    def compose(self) -> ComposeResult:
        yield NodesPane()


async def test_nodes_pane_shows_states_and_ping(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    beta = sshd_nodes[1]
    (state_dir / "config.toml").write_text("".join(n.config_toml() for n in sshd_nodes))
    beta.stop()
    async with gateway(state_dir):
        client = await connect(state_dir, "console")
        app = _Host(client)
        async with app.run_test(size=(140, 30)) as pilot:
            pane = app.query_one(NodesPane)
            await wait_until(lambda: len(pane.rows) == 2)
            assert [r["state"] for r in pane.rows] == ["down", "down"]
            await pilot.press("p")

            async def pinged() -> bool:
                await pilot.pause()
                return [r["state"] for r in pane.rows] == ["connected", "down"]

            await wait_until(pinged, timeout=20)
            assert pane.rows[0]["rttMs"] > 0
            table = app.query_one("#node-list")
            assert "connected" in str(table.get_row_at(0)[2])  # type: ignore[attr-defined]
            await pilot.pause()
            assert "mode=stdio" in str(app.query_one("#node-detail").render())
            await pilot.press("down")
            await pilot.pause()
            detail = str(app.query_one("#node-detail").render())
            assert "cannot connect" in detail
        await client.close()


async def test_nodes_pane_counts_each_nodes_sessions(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
        + "".join(n.config_toml() for n in sshd_nodes)
    )
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        started = await agent.request("exec", {"command": "sleep 30", "node": "alpha", "background": True})
        await agent.request("exec", {"command": "true", "node": "alpha", "background": True})
        client = await connect(state_dir, "console")
        app = _Host(client)
        async with app.run_test(size=(160, 30)) as pilot:
            pane = app.query_one(NodesPane)

            async def counted() -> bool:
                await pilot.pause()
                return pane.counts.get("alpha", {}).get("sessions", (0, 0))[1] == 2

            await wait_until(counted, timeout=20)
            assert pane.counts["alpha"]["sessions"] == (1, 2) and pane.counts["alpha"]["sandboxes"] == (0, 0)
            await pilot.pause()
            table = app.query_one("#node-list")
            row = table.get_row_at(0)  # type: ignore[attr-defined]
            assert str(row[7]) == "1/2" and str(row[8]) == "0/0"
            assert "beta" not in pane.counts  # down: unknown, not zero
        await agent.request("process", {"action": "kill", "sessionId": started["details"]["sessionId"]})
        await agent.close()
        await client.close()
