"""What the web console tests share: `exechost console --web` as a subprocess, its printed URL, and a
stand-in for an agent's dev server on another loopback port that records what each request carried."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import socket
import sys
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from tests.helpers.gateway import REPO, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BANNER = "exechost console on the web: "


@dataclass
class WebConsole:
    proc: asyncio.subprocess.Process
    url: str  # the first one printed (one tab, once)
    port: int
    output: list[str] = field(default_factory=list)  # every line it printed (banner, access log), so far

    async def another_url(self) -> str:
        """Press Enter in its terminal: the next one-use URL it prints."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"\n")
        await self.proc.stdin.drain()
        while True:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), 30)).decode()
            assert line, "the web console ended"
            self.output.append(line)
            if line.startswith(BANNER):
                return line.split(": ", 1)[1].strip()

    async def stop(self) -> str:
        """Stop it; everything it printed."""
        if self.proc.returncode is None:
            self.proc.terminate()
        assert self.proc.stdout is not None
        rest = await self.proc.stdout.read()
        printed = "".join(self.output) + rest.decode(errors="replace")
        # a clean exit: its handlers were in place once it listened (a thread on stdin once aborted it)
        assert await self.proc.wait() == 0, printed
        return printed


async def serve_web(state: Path, nofile: int | None = None) -> WebConsole:
    """`nofile`: its soft limit on descriptors (RLIMIT_NOFILE), when not inherited."""
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
            )

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runner",
        "console",
        "--web",
        env=env,
        cwd=str(REPO),
        stdin=asyncio.subprocess.PIPE,  # Enter: another URL (another_url)
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=limit,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert line.startswith(BANNER + "http://127.0.0.1:"), line
    url = line.split(": ", 1)[1].strip()
    port = int(urllib.parse.urlsplit(url).port or 0)

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    await wait_until(listening, timeout=30)
    return WebConsole(proc, url, port, [line])


@dataclass
class DevServer:
    """An agent's dev server: any page on another 127.0.0.1 port, recording every request's headers."""

    url: str
    seen: list[dict[str, str]]


@asynccontextmanager
async def dev_server() -> AsyncIterator[DevServer]:
    seen: list[dict[str, str]] = []

    async def page(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(text="<html><body>agent dev server</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield DevServer(f"http://127.0.0.1:{port}/", seen)
    finally:
        await runner.cleanup()
