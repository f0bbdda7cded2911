"""Fresh round 10 a (issue 27 §1): the web console's URL is in the operator's browser profile (History,
Sessions, the cache: Chromium writes every URL it opens there, fragment and all), in the home, which
host runs read. Whoever held that URL held the operator role.

By construction the URL is now worth nothing once opened: it carries a one-use ticket that the page
trades, at once and once, for a secret only the page's memory holds, which opens the page's one
websocket, once (console.webkeys, console.web). In a real Chromium with its profile where Chromium keeps
it: the operator opens the console; the agent's allowlisted grep reads every console URL out of the
profile; each opens nothing (page, trade, websocket: 403); the page's secret is in no file of the
profile; and a replay of the websocket's own URL is refused."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from engine.approvals.store import ApprovalsStore
from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config
from tests.helpers.webconsole import CHROMIUM, serve_web

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs chromium"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]
GREP = shutil.which("grep") or "/usr/bin/grep"
GREP_URL = r"(http|ws)://127\.0\.0\.1:[0-9]+/[A-Za-z0-9_-]{20,}/(ws|session)?"  # ERE, for grep -E
CONSOLE_URL = GREP_URL.replace("(", "(?:")


async def _grep(state: Path, home: Path) -> str:
    """Agent main's allowlisted grep over the operator's Chromium profile, as a host run."""
    client = await connect(state)
    try:
        command = f"grep -rhaoE '{GREP_URL}' .config/chromium"
        params = {
            "command": command,
            "agentId": "main",
            "yieldMs": 60000,
            "timeout": 60,
            "workdir": str(home),
        }
        result = await client.request("exec", params)
    finally:
        await client.close()
    return str(result["text"])


def _status(url: str, method: str = "GET") -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def _websocket_status(url: str) -> int:
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url):
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def test_the_console_urls_in_the_operators_browser_profile_open_nothing(state_dir: Path) -> None:
    from playwright.async_api import async_playwright

    home = Path(os.environ["HOME"])
    profile = home / ".config" / "chromium"  # where Chromium keeps it by default
    profile.mkdir(parents=True)
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", GREP, arg_pattern=None)
    async with gateway(state_dir):
        web = await serve_web(state_dir)
        try:
            sockets: list[str] = []
            frames: list[str] = []

            def on_ws(ws: Any) -> None:
                sockets.append(ws.url)
                ws.on(
                    "framereceived", lambda d: frames.append(d if isinstance(d, str) else d.decode("latin-1"))
                )

            async with async_playwright() as pw:
                browser = await pw.chromium.launch_persistent_context(
                    str(profile), executable_path=CHROMIUM, args=["--no-sandbox"]
                )
                page = browser.pages[0] if browser.pages else await browser.new_page()
                page.on("websocket", on_ws)
                await page.goto(web.url)
                await wait_until(lambda: any("Approvals" in f for f in frames), timeout=30)  # it works
                await browser.close()  # the profile as the browser leaves it
            [websocket] = sockets
            secret = websocket.rsplit("/", 2)[1]

            # Since fresh round 11 a the profile (0700) is private to the operator and no host run reads
            # it (engine.commands.homeprivate); the URLs are still worth nothing to whoever holds a copy.
            assert web.url not in set(re.findall(CONSOLE_URL, await _grep(state_dir, home)))
            held = b"".join(p.read_bytes() for p in profile.rglob("*") if p.is_file() and not p.is_symlink())
            found = set(re.findall(CONSOLE_URL, held.decode("latin-1")))
            # the attack's premise: the profile holds the URL the operator opened
            assert web.url in found, found
            # Every console URL the agent read, and the printed one, opens nothing: page, trade, websocket.
            for url in found | {web.url}:
                base = url.removesuffix("ws").removesuffix("session").replace("ws://", "http://", 1)
                assert await asyncio.to_thread(_status, base) == 403, url
                assert await asyncio.to_thread(_status, base + "session", "POST") == 403, url
                assert await _websocket_status(base.replace("http://", "ws://", 1) + "ws") == 403, url
            # The page's secret is in no file of the profile, and its websocket cannot be opened again.
            for path in profile.rglob("*"):
                try:
                    data = path.read_bytes() if path.is_file() else b""
                except OSError:
                    continue
                assert secret.encode() not in data, f"the page's secret is in {path}"
            assert await _websocket_status(websocket) == 403
        finally:
            await web.stop()


async def test_a_ticket_spent_before_its_page_trades_it_leaves_the_page_saying_so(state_dir: Path) -> None:
    """The one window: the page loaded, its trade not yet made. Whoever trades the ticket first gets the
    secret; the operator's page then gets nothing and says the link was used (never a silent second
    console)."""
    from playwright.async_api import Route, async_playwright

    write_config(state_dir, ALLOWLIST)
    web = await serve_web(state_dir)
    raced: list[int] = []
    try:

        async def first(route: Route) -> None:
            raced.append(await asyncio.to_thread(_status, web.url + "session", "POST"))  # the racer's trade
            await route.continue_()

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page()
            await page.route("**/session", first)
            await page.goto(web.url)
            await page.wait_for_selector("body.-closed", timeout=30_000)
            shown = await page.inner_text(".closed-dialog .message")
            await browser.close()
    finally:
        await web.stop()
    assert raced == [200]
    assert "This link was used or has expired" in shown and "Enter" in shown
