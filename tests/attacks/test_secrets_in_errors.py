"""Issue 18: errors handed to an agent never carry a door token or any other secret the gateway holds.

Playwright's `connect_over_cdp` error quotes the URL it failed to reach, and a browser's door URL carries
the token that is the whole of its access control; the browser tool used to hand the first lines of that
error to the agent. These tests make the connect fail for real (through a real door whose browser is gone,
and to a closed loopback port) and read what the agent would be told.
"""

from __future__ import annotations

import secrets
import socket
from pathlib import Path
from typing import Any

import pytest

from engine import redact
from engine.errors import ExecHostError
from engine.protocol.frames import RemoteError, read_token
from engine.protocol.requests import REQUESTS, BrowserCall
from engine.results import ToolError
from engine.tools.browser import BrowserTool
from runner.gateway.browser_proxy import BrowserProxy
from runner.gateway.handlers import HANDLERS
from tests.helpers.gateway import connect, gateway

pytest.importorskip("playwright.async_api")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


async def _failure(endpoint: str) -> str:
    tool = BrowserTool()
    try:
        with pytest.raises(ToolError) as got:
            await tool.run(endpoint, {"action": "snapshot", "timeoutMs": 5000})
    finally:
        await tool.close()
    return str(got.value)


async def test_a_cdp_connect_through_a_dead_door_never_shows_its_token(tmp_path: Path) -> None:
    """The real door, its real token, and no browser behind it (stopped behind the gateway's back): the
    door answers 502, Playwright's error quotes the door URL, the agent gets the error without the token."""
    proxy = BrowserProxy()
    await proxy.start()
    try:
        door = proxy.open("gone", str(tmp_path / "cdp.sock"), None, "0" * 64)
        endpoint = proxy.base_url("gone")
        assert endpoint is not None and door.token in endpoint
        text = await _failure(endpoint)
    finally:
        await proxy.close()
    assert door.token not in text
    assert "did not answer" in text and "<browser door>" in text  # still says what failed, and where


async def test_a_cdp_connect_to_a_closed_port_never_shows_the_token() -> None:
    token = secrets.token_urlsafe(24)
    text = await _failure(f"http://127.0.0.1:{_closed_port()}/{token}")
    assert token not in text and token[:12] not in text
    assert "did not answer" in text


def test_every_registered_secret_is_masked_even_when_the_message_is_cut() -> None:
    token = secrets.token_urlsafe(24)
    redact.register(token, "<token>")
    try:
        text = "x" * 490 + f"http://127.0.0.1:1/{token}/json/version"
        masked = redact.scrub(text)
        assert token not in masked and "<token>" in masked
    finally:
        redact.forget(token)
    assert redact.scrub(token) == token  # forgotten: a renewed door's old token is no secret any more


async def test_the_gateway_scrubs_every_error_it_hands_an_agent(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The boundary itself: whatever a handler's error quotes, the gateway and operator tokens (and every
    door token) never leave in an error frame."""
    seen: dict[str, str] = {}

    async def leaky(services: Any, conn: Any, msg: Any) -> dict[str, Any]:
        kind = msg.args.get("kind")
        secret = seen[str(msg.args.get("which"))]
        if kind == "tool":
            raise ExecHostError(f"could not reach http://127.0.0.1:9/{secret}/json")
        raise RuntimeError(f"boom near {secret}")

    monkeypatch.setitem(HANDLERS, "test.leak", leaky)
    monkeypatch.setitem(REQUESTS, "test.leak", BrowserCall)  # a message that passes its fields through
    async with gateway(state_dir):
        gw, op = read_token(state_dir), read_token(state_dir, "operator.json")
        assert gw and op
        seen.update(gateway=gw, operator=op)
        agent = await connect(state_dir, "agent", operator=False)
        try:
            for which in ("gateway", "operator"):
                for kind in ("tool", "internal"):
                    with pytest.raises(RemoteError) as got:
                        await agent.request("test.leak", {"kind": kind, "which": which})
                    assert seen[which] not in got.value.message
                    assert redact.MASK in got.value.message
        finally:
            await agent.close()
