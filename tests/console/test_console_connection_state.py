"""Issue 30 item 8: every pane follows the gateway link by itself. A pane opened before the gateway answers
fills itself once it does (no `r`); during a crash the list panes say the gateway is gone and the inbox does
not claim the waiting agent left; once a new gateway restores the ask and the agent's CLI follows it, the ask
is not marked gone. Against a real daemon (SIGKILL) and the real `exechost exec` CLI."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from console.app import ConsoleApp
from console.widgets.approvals import render_detail
from console.widgets.nodes import NodesPane
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, REPO, cli, wait_until, write_config

# A node that is never reachable: its row shows (state down) once the pane has asked the gateway.
CONFIG = ALLOWLIST + '\n[nodes.n1]\nhost = "127.0.0.9"\nport = 9\n'


async def until(pilot: Pilot[None], pred: object, timeout: float = 30.0) -> object:
    async def check() -> object:
        await pilot.pause()
        return pred()  # type: ignore[operator]

    return await wait_until(check, timeout=timeout)


def detail_text(pane: NodesPane) -> str:
    return str(pane.query_one("#node-detail", Static).render())


def shown(app: ConsoleApp) -> str:
    out = Console(width=200, record=True, file=io.StringIO())
    item = app.inbox.rows()[0]
    out.print(render_detail(item, {}, offline=app.approvals.offline))
    return out.export_text()


async def test_panes_follow_the_gateway_link(state_dir: Path) -> None:
    write_config(state_dir, CONFIG)
    daemon = Daemon(state_dir)
    app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
    agent: subprocess.Popen[str] | None = None
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            nodes = app.query_one(NodesPane)
            app.query_one("TabbedContent").active = "nodes"  # type: ignore[attr-defined]
            await until(pilot, lambda: nodes.is_on_screen)
            await until(pilot, lambda: "gateway unreachable" in str(app.sub_title))
            assert nodes.rows == [] and "not connected" not in detail_text(nodes)
            # The gateway comes up: the pane fills itself (was: `nodes unavailable: not connected …` until r).
            daemon.start()
            await until(pilot, lambda: [r.get("name") for r in nodes.rows] == ["n1"])

            # An agent waits for the operator through the real CLI.
            env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
            agent = subprocess.Popen(
                [sys.executable, "-m", "runner", "exec", "--", "id -u"],
                env=env,
                cwd=str(REPO),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            await until(pilot, lambda: len(app.inbox) == 1)
            daemon.kill()  # a crash: SIGKILL, nothing runs on the way out
            await until(pilot, lambda: app.approvals.offline is not None)
            assert "the rows above are as of" in detail_text(nodes)
            text = shown(app)
            assert "The agent stopped waiting" not in text and "kept on disk" in text
            assert "⌀ gone" not in str(app.approvals.query_one("DataTable").get_row_at(0)[4])
            # The next gateway restores the ask (as if its requester were gone); the CLI follows it, so
            # the inbox shows it as waited on, not gone.
            daemon.start()
            await until(pilot, lambda: app.approvals.offline is None and len(app.inbox) == 1)
            await until(pilot, lambda: app.inbox.rows()[0].view.get("requesterGone") is False)
            assert "The agent stopped waiting" not in shown(app)
            assert agent.poll() is None  # still waiting
            app.query_one("TabbedContent").active = "approvals"  # type: ignore[attr-defined]
            await pilot.pause()
            await pilot.press("a")
            out, err = await asyncio.to_thread(agent.communicate, timeout=60)
            assert agent.returncode == 0, out + err
            assert out.strip().splitlines()[0] == str(os.getuid()), out
            assert "lost the gateway; waiting for approval" in err
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill()
        cli(state_dir, "gateway", "stop")  # the waiting CLI may have started the next gateway itself
