"""Issue 21: `exechost console --web` in a real Chromium (Playwright): open the printed URL, approve a
pending ask with a key press, see the approved session in the page; without the token (or from another
Host), 403. What the page shows is read from the websocket frames the browser receives (xterm.js draws on
a canvas)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import ALLOWLIST, REPO, connect, gateway, wait_until, write_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")


async def _serve(state: Path) -> tuple[asyncio.subprocess.Process, str]:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runner",
        "console",
        "--web",
        env=env,
        cwd=str(REPO),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert line.startswith("exechost console on the web: http://127.0.0.1:"), line
    url = line.split(": ", 1)[1].strip()
    port = int(url.split("?", 1)[0].rstrip("/").rsplit(":", 1)[1])

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    await wait_until(listening, timeout=30)
    return proc, url


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
        proc, url = await _serve(state_dir)
        try:
            base = url.split("?", 1)[0]
            assert await asyncio.to_thread(_status, base) == 403  # no token
            assert await asyncio.to_thread(_status, base + "?token=wrong") == 403
            port = base.rsplit(":", 1)[1].rstrip("/")
            evil = {"Host": f"evil.example:{port}"}
            assert await asyncio.to_thread(_status, url, evil) == 403  # DNS rebinding
            assert await asyncio.to_thread(_status, base + "ws") == 403  # the websocket too

            frames: list[str] = []

            def seen(text: str) -> bool:
                return any(text in f for f in frames)

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": 1400, "height": 900})

                def on_ws(ws: Any) -> None:
                    ws.on(
                        "framereceived",
                        lambda data: frames.append(
                            data if isinstance(data, str) else data.decode(errors="replace")
                        ),
                    )

                page.on("websocket", on_ws)
                await page.goto(url)
                await wait_until(lambda: seen("Approvals"), timeout=30)
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
                await wait_until(lambda: seen(slug) and seen("Allow always saves"), timeout=30)
                await page.focus(".xterm-helper-textarea")  # where xterm.js takes the keyboard
                await page.keyboard.press("a")
                result = await asyncio.wait_for(task, 30)
                assert result["details"]["status"] == "completed" and "web-approved" in result["text"]
                await page.keyboard.press("2")  # the Sessions tab: the approved run, as it was pinned
                await wait_until(lambda: seen("'/usr/bin/printf' 'web-%s"), timeout=30)
                await agent.close()
                await browser.close()
        finally:
            proc.terminate()
            await proc.wait()
