"""Fresh attacks on principals, ambient authority, per-principal limits and crashes (issue 27/34 re-attack)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.protocol import client as client_mod
from tests.helpers.gateway import FULL, connect, gateway, write_config


async def test_ambient_authority_agent_token_in_child_env(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent a's MCP server (EXECHOST_AGENT_TOKEN in its env) autostarts the gateway: the daemon inherits
    that env, and every host command of agent b inherited a's credential — b became a."""
    write_config(state_dir, FULL)
    tok_a = principals.mint(state_dir, "a")
    tok_b = principals.mint(state_dir, "b")
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN", tok_a)
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN_FILE", str(principals.agents_dir(state_dir) / "a.json"))
    async with gateway(state_dir):
        b = await connect(state_dir, "b", operator=False, credential=tok_b)
        try:
            assert b.agent == "b"
            result = await b.request("exec", {"command": "env; echo END-OF-ENV", "timeout": 20})
        finally:
            await b.close()
    text = str(result)
    assert "END-OF-ENV" in text
    assert tok_a not in text
    assert "EXECHOST_AGENT_TOKEN" not in text


def test_ambient_authority_autostart_passes_no_credential(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client that starts the gateway daemon hands it no agent credential of its own."""
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN", "exa_secret-of-agent-a")
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN_FILE", "/somewhere/a.json")
    seen: dict[str, Any] = {}

    class FakePopen:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            seen.update(kwargs)

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    client_mod.spawn_gateway(state_dir)
    env = seen["env"]
    assert "EXECHOST_AGENT_TOKEN" not in env
    assert "EXECHOST_AGENT_TOKEN_FILE" not in env
