"""What the browser sandbox tests share: the real browser image (built once per machine) and cleanup."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config.loader import load_config_text
from engine.sandbox import admin, docker_ops
from engine.sandbox.browser import list_browsers
from engine.sandbox.images import BROWSER_FLAVOUR, IMAGE_LABEL
from tests.helpers.gateway import write_config

IMAGE = "openclaw-sandbox-browser:bookworm-slim"
CONFIG = """[agents.defaults.sandbox]
mode = "all"
[agents.defaults.sandbox.browser]
enabled = true
"""


@pytest.fixture(scope="module")
def browser_image() -> str:
    try:
        client = docker_ops.client()
    except docker_ops.SandboxUnavailable as exc:
        pytest.skip(str(exc))
    try:
        labels = (client.images.get(IMAGE).attrs.get("Config") or {}).get("Labels") or {}
    except docker_ops.not_found_type():
        labels = {}
    if labels.get(IMAGE_LABEL) != BROWSER_FLAVOUR:
        lines: list[str] = []
        cfg = load_config_text(CONFIG)
        assert admin.setup_image(cfg, lines.append, BROWSER_FLAVOUR) == [IMAGE]
    return IMAGE


@pytest.fixture
def browser_state(state_dir: Path, browser_image: str) -> Iterator[Path]:
    write_config(state_dir, CONFIG)
    ws = state_dir / "sandboxes"
    ws.mkdir(mode=0o700, exist_ok=True)
    yield state_dir
    for c in list_browsers():  # this state dir's install id: only this test's browsers
        docker_ops.remove(c["Id"])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return bytes(resp.read())


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def vnc_banner(cdp_url: str) -> bytes:
    """Open noVNC's WebSocket through the gateway's door and return the first frame (the RFB banner)."""
    import asyncio
    import base64
    import os

    root, token = cdp_url.rsplit("/", 1)
    port = int(root.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET /{token}/novnc/websockify HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: binary\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 101"), head
        return await asyncio.wait_for(reader.read(100), 10)
    finally:
        writer.close()


async def ws_open(url: str) -> bytes:
    """Open a websocket at `url` (ws://127.0.0.1:PORT/...) through the gateway's door; the answer's head."""
    import asyncio
    import base64
    import os

    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    port = int(hostport.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
