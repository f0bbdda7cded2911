"""A node's ask in the console inbox (pilot): marked with the node, approved with a key, run on that node."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from rich.console import Console
from textual.widgets import DataTable

from console.widgets.approvals import ApprovalsPane, render_detail
from tests.console.test_console import running_console, submit, until
from tests.helpers.sshd import SshdNode

GATEWAY = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'


async def test_node_miss_shows_in_the_inbox_and_runs_after_approval(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    config = GATEWAY + "".join(n.config_toml() for n in sshd_nodes)
    async with running_console(state_dir, config) as (app, pilot, agent):
        task = submit(agent, "echo ran-on-alpha", node="alpha")
        await until(pilot, lambda: len(app.inbox) == 1)
        view = app.inbox.rows()[0].view
        assert view["host"] == "node" and view["nodeId"]
        # Issue 30 item 6: the node by its name in the inbox row, its id in the detail.
        assert view["nodeName"] == "alpha"
        table = app.query_one(ApprovalsPane).query_one(DataTable)
        assert str(table.get_row_at(0)[3]) == "node alpha"
        shown = Console(width=200, record=True, file=io.StringIO())
        shown.print(render_detail(app.inbox.rows()[0], {}))
        assert f"alpha ({view['nodeId']})" in shown.export_text()
        # The node's own analysis travels with the ask: its resolved executable, its allowlist miss.
        assert [s["reason"] for s in view["segments"]] == ["allowlist miss"]
        await pilot.press("a")
        result = await asyncio.wait_for(task, 20)
        assert result["text"] == "ran-on-alpha\n(ran on: node alpha)"
        assert result["details"]["node"] == "alpha"
        await until(pilot, lambda: len(app.inbox) == 0)


async def test_node_sessions_in_the_sessions_pane_live(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A background session on a node appears in the Sessions pane (host column names the node), its output
    shows while it runs, the stdin line reaches it, and kill works from the console."""
    from console.dialogs import ConfirmDialog

    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    go = alpha.marks / "go"  # (the node's home is an overlay made per run)
    config = GATEWAY + "".join(n.config_toml() for n in sshd_nodes)
    async with running_console(state_dir, config) as (app, pilot, agent):
        res = await submit(
            agent,
            f"echo first-line; while [ ! -e {go} ]; do sleep 0.05; done; echo later-line; "
            'read -r x; echo "got:$x"; sleep 60',
            node="alpha",
            background=True,
        )
        sid = res["details"]["sessionId"]
        await pilot.press("2")
        # Listed at once: the node's session.started reached the console through the gateway.
        await until(pilot, lambda: sid in app.sessions.sessions, timeout=15)
        row = app.sessions.sessions[sid]
        assert row["host"] == "node:alpha" and row["node"] == "alpha"
        asked: list[str] = []
        request = app.link.request

        async def recorded(method: str, params: dict | None = None) -> dict:
            asked.append(method)
            return await request(method, params)

        app.link.request = recorded  # type: ignore[method-assign]
        app.sessions.select(sid)
        lines = app.sessions.line_pane.text_lines
        await until(pilot, lambda: any("first-line" in line for line in lines()), timeout=15)
        go.touch()  # printed after the pane opened: only the pushed output can show it
        await until(pilot, lambda: any("later-line" in line for line in lines()), timeout=15)
        # Pushed through the gateway's fan-out like local output, never read by offset polling.
        assert app.link.output.polled == set()
        assert asked.count("sessions.output") <= 1  # at most the replay when the pane opened
        await pilot.press("i")
        await pilot.press(*"hi-node", "enter")
        await until(pilot, lambda: any("got:hi-node" in line for line in lines()), timeout=15)
        app.sessions.query_one("#session-list").focus()
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await until(
            pilot,
            lambda: app.sessions.sessions.get(sid, {}).get("status") not in (None, "running"),
            timeout=15,
        )
