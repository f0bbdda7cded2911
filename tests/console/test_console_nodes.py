"""A node's ask in the console inbox (pilot): marked with the node, approved with a key, run on that node."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
        # The node's own analysis travels with the ask: its resolved executable, its allowlist miss.
        assert [s["reason"] for s in view["segments"]] == ["allowlist miss"]
        await pilot.press("a")
        result = await asyncio.wait_for(task, 20)
        assert result["text"].strip() == "ran-on-alpha"
        assert result["details"]["node"] == "alpha"
        await until(pilot, lambda: len(app.inbox) == 0)
