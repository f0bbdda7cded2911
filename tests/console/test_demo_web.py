"""Issue 36: `exechost console --demo --web` is the same tour in a browser (a real Chromium): the agent's
asks and the hint in the page, keys work, the dashboard stopped with send-keys C-c; stopping the server
leaves no demo process or file. What the page shows is read from the websocket frames it receives."""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from console.demo import ASK_HINTS
from tests.helpers.gateway import REPO, wait_until
from tests.helpers.webconsole import BANNER, CHROMIUM

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)"),
]


def demo_roots() -> set[Path]:
    return set(Path("/tmp").glob("ehdemo-*"))


def mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if text.encode() in cmdline or text.encode() in environ:
            pids.append(int(entry.name))
    return pids


async def test_the_demo_in_a_browser(state_dir: Path) -> None:
    from playwright.async_api import async_playwright

    before = demo_roots()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runner", "console", "--demo", "--web",
        env=env, cwd=str(REPO), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    root: Path | None = None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith(BANNER + "http://127.0.0.1:"), line
        url = line.split(": ", 1)[1].strip()
        assert urllib.parse.urlsplit(url).port
        [root] = demo_roots() - before
        assert root != state_dir.parent
        frames: list[str] = []

        def seen(text: str) -> bool:
            return any(text in f for f in frames)

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1600, "height": 1000})

            def on_frame(data: str | bytes) -> None:
                frames.append(data if isinstance(data, str) else data.decode(errors="replace"))

            def on_ws(ws: Any) -> None:
                ws.on("framereceived", on_frame)

            page.on("websocket", on_ws)
            await page.goto(url)
            await wait_until(lambda: seen("Approvals ("), timeout=60)
            await wait_until(lambda: seen("ps -eo pid,comm"), timeout=60)  # the agent's asks, from the server
            # The hint for the selected ask: which ask is selected first depends on which the demo agent
            # sent first, so any ask's hint counts (each told apart by its opening words).
            openings = [hint.split("\n")[0].split(":")[0][:20] for _, hint in ASK_HINTS]
            await wait_until(lambda: any(seen(o) for o in openings), timeout=60)
            await page.focus(".xterm-helper-textarea")
            await page.keyboard.press("2")
            await wait_until(lambda: seen("build-job 400"), timeout=30)
            await wait_until(lambda: seen("dashboard"), timeout=30)  # the PTY session, listed
            await page.keyboard.press("?")
            await wait_until(lambda: seen("Try next:"), timeout=30)
            await page.keyboard.press("Escape")
            await browser.close()
    finally:
        if proc.returncode is None:
            proc.terminate()  # as Ctrl-C: the server removes the demo with its gateway and sessions
        await asyncio.wait_for(proc.wait(), 30)
    assert root is not None
    await wait_until(lambda: not root.exists() and not mentioning(str(root)), timeout=30)
