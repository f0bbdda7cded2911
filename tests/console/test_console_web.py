"""Issues 21 and 30 (item 9): `exechost console --web` in a real Chromium (Playwright): open the printed URL,
approve a pending ask with a key press, see the approved session in the page; without a live key (or from
another Host), 403. Each printed URL opens one tab, once (Enter prints another); its access log never
shows a key; a second tab says nothing about the approval socket the first one hosts. What the page shows
is read from the websocket frames the browser receives (xterm.js draws on a canvas)."""

from __future__ import annotations

import asyncio
import functools
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config
from tests.helpers.webconsole import CHROMIUM, serve_web

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_web_console_approves_and_shows_output_and_refuses_without_token(state_dir: Path) -> None:
    from playwright.async_api import async_playwright

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        web = await serve_web(state_dir)
        url, port = web.url, web.port
        secret = url.rstrip("/").rsplit("/", 1)[-1]
        base = f"http://127.0.0.1:{port}/"
        try:
            assert await asyncio.to_thread(_status, url) == 200
            assert await asyncio.to_thread(_status, base) == 403  # no token
            assert await asyncio.to_thread(_status, base + "wrong-token-wrong-token-wrong/") == 403
            assert await asyncio.to_thread(_status, f"{base}?token={secret}") == 403  # only in the path
            assert await asyncio.to_thread(_status, url, {"Host": f"evil.example:{port}"}) == 403
            assert await asyncio.to_thread(_status, base + "ws") == 403  # the websocket too
            assert await asyncio.to_thread(_status, f"{url}ws") == 403  # a ticket is no websocket secret
            # textual-serve's files and ours are public code, and admit no connection
            assert await asyncio.to_thread(_status, base + "static/js/textual.js") == 200
            urls = [url, await web.another_url()]  # one per tab

            frames: list[list[str]] = [[], []]

            def seen(text: str, tab: int = 0) -> bool:
                return any(text in f for f in frames[tab])

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                pages = []
                for tab in (0, 1):
                    page = await browser.new_page(viewport={"width": 1400, "height": 900})

                    def on_ws(ws: Any, tab: int = tab) -> None:
                        ws.on(
                            "framereceived",
                            lambda data: frames[tab].append(
                                data if isinstance(data, str) else data.decode(errors="replace")
                            ),
                        )

                    page.on("websocket", on_ws)
                    await page.goto(urls[tab])
                    await wait_until(functools.partial(seen, "Approvals", tab), timeout=30)
                    pages.append(page)
                    assert await asyncio.to_thread(_status, urls[tab]) == 403  # spent: opens nothing again
                page = pages[0]
                await wait_until(server.services.has_approver, timeout=30)  # the web console attached

                agent = await connect(state_dir, "agent", operator=False)
                params = {
                    "command": "printf 'web-%s\\n' approved",
                    "agentId": "main",
                    "sessionKey": "agent:main",
                }
                task = asyncio.ensure_future(agent.request("exec", params))
                await wait_until(lambda: server.services.approvals.pending(), timeout=30)
                slug = server.services.approvals.pending()[0].id[:8]
                # The detail names the selected ask once the console has settled: keys go to it from then.
                for tab in (0, 1):
                    await wait_until(functools.partial(seen, slug, tab), timeout=30)
                    await wait_until(functools.partial(seen, "Allow always saves", tab), timeout=30)
                await page.focus(".xterm-helper-textarea")  # where xterm.js takes the keyboard
                await page.keyboard.press("a")
                result = await asyncio.wait_for(task, 30)
                assert result["details"]["status"] == "completed" and "web-approved" in result["text"]
                await page.keyboard.press("2")  # the Sessions tab: the approved run, as it was pinned
                await wait_until(lambda: seen("'/usr/bin/printf' 'web-%s"), timeout=30)
                await agent.close()
                await browser.close()
        finally:
            printed = await web.stop()
    # Issue 30 item 9: no toast about the approval socket in either tab (the first one hosts it).
    assert not any("not hosted" in f for tab in frames for f in tab)
    # The URLs printed, each once, and no key in the access log.
    assert re.findall(r"https?://\S+", printed) == urls, printed
    for printed_url in urls:
        assert printed.count(printed_url.rstrip("/").rsplit("/", 1)[-1]) == 1, printed
    assert "GET /…/ws" in printed  # the access log is there, without the token
