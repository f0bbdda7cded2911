"""Seed 004 §4.2: `tools.sandbox.tools.allow` / `deny` for sandboxed sessions, enforced by the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import principals
from engine.config.loader import load_config_text
from engine.errors import ExecHostError
from engine.sandbox.toolpolicy import tool_refusal
from tests.helpers.gateway import connect, gateway, write_config


def test_matching_trims_lowercases_wildcards_and_denies_first() -> None:
    assert tool_refusal("exec", [], []) is None  # empty allow = every tool
    assert tool_refusal("exec", [" EXEC "], []) is None
    assert tool_refusal("process", ["ex*"], []) == (
        "tool 'process' is not in tools.sandbox.tools.allow ('ex*') for sandboxed sessions"
    )
    assert tool_refusal("exec", ["*"], ["Ex*"]) == (
        "tool 'exec' is denied in sandboxed sessions by tools.sandbox.tools.deny rule 'Ex*'"
    )
    assert tool_refusal("browser", ["*"], ["  "]) is None  # a blank rule matches nothing


def test_agent_lists_replace_the_global_ones() -> None:
    cfg = load_config_text(
        '[tools.sandbox.tools]\ndeny = ["process"]\n'
        '[[agents.list]]\nid = "ops"\ntools.sandbox.tools.deny = []\ntools.sandbox.tools.allow = ["exec"]\n'
    )
    assert cfg.sandbox_tools_for("main") == ([], ["process"])
    assert cfg.sandbox_tools_for("ops") == (["exec"], [])


async def test_the_gateway_refuses_a_denied_tool_in_a_sandboxed_session(state_dir: Path) -> None:
    write_config(
        state_dir,
        '[agents.defaults.sandbox]\nmode = "all"\n[tools.sandbox.tools]\ndeny = ["process"]\n'
        '[[agents.list]]\nid = "free"\nsandbox.mode = "off"\n',
    )
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        with pytest.raises(ExecHostError, match=r"denied in sandboxed sessions by tools\.sandbox"):
            await agent.request("process", {"action": "list", "agentId": "main"})
        # Not sandboxed: the sandbox tool policy does not apply (agent free, with its own credential).
        principals.mint(state_dir, "free")
        free = await connect(state_dir, "free", operator=False, agent="free")
        listed = await free.request("process", {"action": "list"})
        assert "details" in listed
        await free.close()
        await agent.close()
