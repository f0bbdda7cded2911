"""Fresh round 9, attacker T: ambient authority and "whose is it?" against the gateway's doors."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import request_exec
from engine.approvals.store import ApprovalsStore
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import write_config

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

# main may run nothing without a human (allowlist, nothing on it, no one to ask); ops is trusted with
# the host (security=full, ask=off), and the gateway admits nobody on the shared token alone.
TWO_AGENTS = """
[gateway]
anonymous = "none"

[tools.exec]
host = "gateway"
security = "allowlist"
ask = "off"
askFallback = "deny"

[[agents.list]]
id = "ops"
tools.exec.security = "full"
tools.exec.ask = "off"
"""


async def _never_asked(request: PromptRequest) -> str:
    raise AssertionError(f"a human was asked for {request.command!r}: the policy alone must decide here")


async def _socket_exec(state: Path, agent: str, marker: Path) -> dict[str, object] | None:
    """One exec-approvals.sock `exec` frame, as the console hosts the socket (console/app.py), naming
    `agent` in its requestJson."""
    write_config(state, TWO_AGENTS)
    path, token = ApprovalsStore(state / "exec-approvals.json").socket_info()
    server = ApprovalSocketServer(
        path, token, decider=_never_asked, exec_handler=LocalExecHost(state / "config.toml")
    )
    async with server:
        return await request_exec(
            path,
            token,
            {"command": ["/usr/bin/touch", str(marker)], "cwd": str(marker.parent), "agentId": agent},
            timeout=60,
        )


@needs_bwrap
@pytest.mark.xfail(
    strict=True,
    reason="open: exec-approvals.sock names no principal: its exec frame's agentId is believed, so the one "
    "shared socket token runs commands under any agent's policy (ops's security=full), anonymous=none or not",
)
def test_class2_the_approval_sockets_exec_frame_picks_its_own_agent(state_dir: Path, tmp_path: Path) -> None:
    """The gateway learns who an agent is from the connection, never from a request field (SECURITY.md,
    Principals); the approval socket's client proves only the socket token, which is one for every
    client, and then says which agent it is. Naming `ops` runs `touch` unasked under ops's
    security=full, where the same client as `main` (or as nobody, anonymous = "none") is refused."""
    work = tmp_path / "w"
    work.mkdir()
    as_main = asyncio.run(_socket_exec(state_dir, "main", work / "as-main"))
    assert as_main is not None and as_main.get("ok") is False  # main: allowlist miss, nobody asked
    assert not (work / "as-main").exists()
    as_ops = asyncio.run(_socket_exec(state_dir, "ops", work / "as-ops"))
    assert as_ops is not None
    assert not (work / "as-ops").exists(), f"the socket client became agent ops by naming it: {as_ops}"
    assert as_ops.get("ok") is False
