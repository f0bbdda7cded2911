"""Issue 29 in the console: a sandbox's connection to an unknown name is a row in the same inbox as commands,
shown as the name it waits for; one key lets the waiting connection through."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.sandbox import bwrap
from tests.console.test_console import running_console, submit, until
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.egress import origin

pytestmark = [needs_bwrap]


async def test_an_egress_ask_in_the_inbox_is_answered_with_a_key(state_dir: Path) -> None:
    with origin() as o:
        config = (
            '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
            '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
            '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nask = true\n'
            'resolve = { "asked.test" = "127.0.0.1" }\n'
        )
        try:
            async with running_console(state_dir, config) as (app, pilot, agent):
                task = submit(
                    agent, f"curl -sS --max-time 60 http://asked.test:{o.port}/console", yieldMs=60_000
                )
                await until(pilot, lambda: len(app.inbox) == 1, timeout=60)
                item = app.inbox.rows()[0]
                assert item.view["egress"] == f"http://asked.test:{o.port}"  # a plain request's ask
                assert item.view["command"] == f"connect http://asked.test:{o.port} [plain http]"
                await pilot.press("a")
                result = await asyncio.wait_for(task, 60)
                assert "at /console" in result["text"], result
                await until(pilot, lambda: len(app.inbox) == 0)
        finally:
            bwrap.remove_all()
