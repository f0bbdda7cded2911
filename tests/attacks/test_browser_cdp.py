"""Attacks on the browser sandbox's CDP and noVNC: whoever lacks the token must not reach the browser.

CDP is full control of a browser (and of every page it has open), so a process that can connect to it
owns the agent's browsing. The container publishes no port; the Unix sockets sit in a 0700 dir; the
gateway's loopback door relays only requests that carry the browser's token.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.protocol.frames import RemoteError
from engine.sandbox import docker_ops
from engine.sandbox.browser import BrowserLayout, browser_layout, list_browsers
from engine.sandbox.settings import resolve_settings
from tests.helpers.browser import CONFIG, browser_image, browser_state, get, status_of
from tests.helpers.gateway import connect, gateway

pytestmark = [pytest.mark.docker, pytest.mark.slow]
__all__ = ["browser_image", "browser_state"]  # fixtures


def _layout(state: Path) -> BrowserLayout:
    from engine.config.loader import load_config_text

    settings = resolve_settings(load_config_text(CONFIG), "main")
    return browser_layout(settings, "main", "agent:main:main")


async def _raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()


async def test_no_token_no_cdp(browser_state: Path) -> None:
    """The door's token (the gateway's own browser tool's way in, never shown) opens CDP; nothing near it
    does."""
    async with gateway(browser_state) as server:
        op = await connect(browser_state, "op")
        try:
            started = await op.request("browser.start", {"agentId": "main"})
        finally:
            await op.close()
        base = server.services.browsers.proxy.base_url(started["containerName"])
        assert base is not None
        token = base.rsplit("/", 1)[1]
        root = base[: -len(token) - 1]
        port = int(root.rsplit(":", 1)[1])
        assert await asyncio.to_thread(get, base + "/json/version")  # the token opens it
        for path in (
            "/json/version",  # no token at all
            "/" + token[:-1] + "/json/version",  # almost the token
            "/" + token[:-1] + ("A" if token[-1] != "A" else "B") + "/json/version",  # same length, wrong
            "/" + token.upper() + "/json/version",
            "/devtools/browser",
            "//" + token + "/json/version",
            "/%2F" + token + "/json/version",
        ):
            assert await asyncio.to_thread(status_of, root + path) == 403, path
        # The token in a header or the query instead of the path opens nothing.
        for request in (
            f"GET /json/version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n",
            f"GET /json/version?token={token} HTTP/1.1\r\nHost: x\r\n\r\n",
            f"GET /json/version HTTP/1.1\r\nHost: {token}\r\n\r\n",
            "garbage\r\n\r\n",
        ):
            answer = await _raw(port, request.encode())
            assert answer.startswith(b"HTTP/1.1 403") and b"Browser" not in answer, request
        # A head that never ends is dropped, nothing relayed.
        answer = await _raw(
            port, b"GET /" + token.encode() + b"/json/version HTTP/1.1\r\nX: " + b"a" * 70_000
        )
        assert b"Browser" not in answer
        # A stopped browser's token is dead, even if the same browser starts again.
        op = await connect(browser_state, "op")
        try:
            await op.request("browser.stop", {"agentId": "main"})
            assert await asyncio.to_thread(status_of, base + "/json/version") == 403
        finally:
            await op.close()
        assert server  # the gateway is still serving


async def test_other_users_cannot_reach_the_sockets(browser_state: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to try as another user")
    async with gateway(browser_state):
        op = await connect(browser_state, "op")
        try:
            await op.request("browser.start", {"agentId": "main"})
        finally:
            await op.close()
        blay = _layout(browser_state)
        assert Path(blay.cdp_socket).exists()
        assert os.stat(blay.socket_dir).st_mode & 0o077 == 0
        assert os.stat(blay.cdp_socket).st_mode & 0o077 == 0
        probe = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(13)\n"
            "s.sendall(b'GET /json/version HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
            "print(s.recv(200))\n"
        )
        for path in (blay.cdp_socket, blay.novnc_socket):
            proc = await asyncio.to_thread(
                subprocess.run,
                [shutil.which("python3", path="/usr/bin:/bin") or sys.executable, "-c", probe, path],
                user=65534,
                group=65534,
                capture_output=True,
                text=True,
                cwd="/",
                timeout=30,
            )
            assert proc.returncode == 13, (path, proc.stdout, proc.stderr)


async def test_the_exec_sandbox_cannot_see_the_browser_sockets(browser_state: Path) -> None:
    """The agent's own container mounts its workspace, never the browser's socket dir."""
    from engine.config.loader import load_config_text
    from engine.sandbox.settings import layout

    blay = _layout(browser_state)
    settings = resolve_settings(load_config_text(CONFIG), "main")
    lay = layout(settings, "main", "agent:main:main")
    for mounted in (lay.workspace_dir, lay.sandbox_workspace, settings.workspace_root):
        assert not (blay.socket_dir + "/").startswith(mounted.rstrip("/") + "/")
    async with gateway(browser_state):
        op = await connect(browser_state, "op")
        try:
            started = await op.request("browser.start", {"agentId": "main"})
        finally:
            await op.close()
    mounts = docker_ops.client().api.inspect_container(started["containerName"])["Mounts"]
    writable = [m["Destination"] for m in mounts if m["RW"]]
    assert writable == ["/.exechost-browser"], writable
    assert list_browsers()


async def test_a_container_that_swaps_its_socket_for_a_link_reaches_nothing_on_the_host(
    browser_state: Path,
) -> None:
    """The socket dir is the container's to write: a compromised browser can replace cdp.sock with a
    symlink to any host socket (the gateway's own, Docker's). The gateway connects only to a peer that
    lives in that browser's container."""
    async with gateway(browser_state):
        op = await connect(browser_state, "op")
        agent = await connect(browser_state, "agent", operator=False)
        try:
            started = await op.request("browser.start", {"agentId": "main"})
            name = started["containerName"]
            for target in (str(browser_state / "gateway.sock"), "/var/run/docker.sock"):
                urls = await op.request("browser.url", {"agentId": "main"})  # a CDP URL opens once
                docker_ops.client().containers.get(name).exec_run(
                    [
                        "/bin/sh",
                        "-c",
                        f"rm -f /.exechost-browser/cdp.sock; ln -s {target} /.exechost-browser/cdp.sock",
                    ]
                )
                assert os.path.islink(_layout(browser_state).cdp_socket)
                assert await asyncio.to_thread(status_of, urls["cdpUrl"] + "/json/version") == 502
                with pytest.raises(RemoteError, match=r"CDP did not answer|not the browser"):
                    await agent.request("browser", {"action": "snapshot"})
                rows = (await op.request("browser.status", {}))["browsers"]
                assert rows[0]["cdp"] is False and rows[0]["url"] == ""
        finally:
            await agent.close()
            await op.close()


async def test_a_cdp_tickets_opens_only_a_json_listing_and_its_secret_only_a_devtools_websocket(
    browser_state: Path,
) -> None:
    """A CDP URL's ticket opens /json, /json/list or /json/version once, nothing else (no /json/new, no
    noVNC, no /devtools/ websocket of its own); the secret in the answer opens no /json."""
    async with gateway(browser_state):
        op = await connect(browser_state, "op")
        try:
            await op.request("browser.start", {"agentId": "main"})
            url = (await op.request("browser.url", {"agentId": "main"}))["cdpUrl"]
            for path in (
                "/json/new?about:blank",
                "/json/activate/x",
                "/novnc/vnc.html",
                "/devtools/browser/x",
            ):
                assert await asyncio.to_thread(status_of, url + path) == 403, path
            listing = json.loads(await asyncio.to_thread(get, url + "/json/list"))  # still unspent
            secret = listing[0]["webSocketDebuggerUrl"].split("/")[3]
            root = url.rsplit("/", 1)[0]
            assert await asyncio.to_thread(status_of, f"{root}/{secret}/json/version") == 403
        finally:
            await op.close()
