"""A credential revoked or re-minted while no gateway runs: the next gateway's restore ends what that
credential asked (a waiting ask is denied, never shown again as pending), while an ask made with a
credential that still holds comes back as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import principals
from engine.protocol.client import ControlClient
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, cli, connect, listed, write_config


@pytest.mark.parametrize("change", ["revoke", "rotate", "none"])
async def test_a_waiting_ask_of_a_credential_gone_offline_is_denied_at_restore(
    tmp_path: Path, change: str
) -> None:
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    write_config(state, ALLOWLIST + listed("ops"))
    token = principals.mint(state, "ops")
    daemon = Daemon(state).start()
    try:
        ops = await ControlClient.connect(state, client="ops", name="ops", autostart=False, credential=token)
        try:
            asked = await ops.request("exec", {"command": f"touch {tmp_path / 'ran'}"})
        finally:
            await ops.close()
        approval_id = asked["details"]["approvalId"]
        daemon.kill()
        if change == "revoke":
            assert cli(state, "agents", "revoke", "ops").returncode == 0
            assert not (state / "agents" / "ops.json").exists()
        elif change == "rotate":
            principals.mint(state, "ops")  # what `agents add ops --rotate` does with no gateway running
        daemon.start()
        operator = await connect(state)
        try:
            got = await operator.request("approvals.status", {"approvalId": approval_id})
        finally:
            await operator.close()
        approval = got["details"]["approval"]
        if change == "none":
            assert approval["status"] == "pending"
        else:
            assert approval["status"] == "deny" and approval["reason"] == "agent revoked"
        assert not (tmp_path / "ran").exists()
    finally:
        daemon.stop()
