"""Issue 27 §1: the web console's credential must not be ambient. It was a cookie, and cookies ignore
ports: a page the operator later opened on another 127.0.0.1 port (an agent's dev server) received
`exechost_console=<token>`, and with it the agent drove the console and approved its own ask.

In a real Chromium: the operator opens the printed URL, then the agent's page on another loopback port.
That page, and every request the browser sends to it, must carry no credential of the console."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import ALLOWLIST, gateway, wait_until, write_config
from tests.helpers.webconsole import CHROMIUM, dev_server, serve_web

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")


async def test_a_page_on_another_loopback_port_gets_no_console_credential(state_dir: Path) -> None:
    from playwright.async_api import async_playwright

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir), dev_server() as agent_site:
        web = await serve_web(state_dir)
        frames: list[str] = []
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                context = await browser.new_context()
                page = await context.new_page()

                def on_ws(ws: Any) -> None:
                    ws.on(
                        "framereceived",
                        lambda d: frames.append(d if isinstance(d, str) else d.decode("latin-1")),
                    )

                page.on("websocket", on_ws)
                await page.goto(web.url)
                await wait_until(lambda: any("Approvals" in f for f in frames), timeout=30)

                other = await context.new_page()  # later, the agent's dev server in the same browser
                await other.goto(agent_site.url)
                seen_by_page = await other.evaluate("document.cookie")
                await other.goto(agent_site.url + "again")  # a second request: any cookie set by now goes
                jar = await context.cookies()
                await browser.close()
        finally:
            printed = await web.stop()
    secret = web.url.rstrip("/").rsplit("/", 1)[-1].split("token=")[-1]
    assert len(secret) >= 24 and secret in printed
    assert agent_site.seen, "the dev server was reached"
    for headers in agent_site.seen:
        assert "Cookie" not in headers and not any(secret in v for v in headers.values()), headers
    assert seen_by_page == ""
    assert jar == []  # no cookie at all: nothing the browser sends by itself authenticates
