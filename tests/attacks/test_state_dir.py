"""Issue 9 item 10: exechost's own tokens read by allowlisted programs, and agents broadening their policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.errors import ExecHostError
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.gateway import connect, gateway, write_config

READERS = [("/usr/bin/cat", None), ("/usr/bin/head", None), ("/usr/bin/grep", None), ("/usr/bin/cp", None)]


@pytest.mark.parametrize("name", ["gateway.json", "operator.json", "exec-approvals.json"])
async def test_allowlisted_readers_cannot_read_the_state_dir(
    state_dir: Path, tmp_path: Path, name: str
) -> None:
    """An allowlisted `cat` read both socket tokens; the gateway token then allowed `/exec security=full`."""
    await attempt(state_dir, "true")  # the gateway creates its token files
    ApprovalsStore(state_dir / "exec-approvals.json").ensure()
    secret = (state_dir / name).read_text()
    for command, workdir in (
        (f"cat {state_dir / name}", str(tmp_path)),
        (f"cat {name}", str(state_dir)),
        (f"head -c 4096 ./{name}", str(state_dir)),
        (f"grep -r token {state_dir}", str(tmp_path)),
        (f"cp {state_dir / name} {tmp_path / 'copy'}", str(tmp_path)),
        (f"cat --squeeze-blank {state_dir}/../{state_dir.name}/{name}", str(tmp_path)),
    ):
        details = await attempt(state_dir, command, allow=READERS, workdir=workdir)
        assert refused(details), (command, details)
        assert secret.strip() not in details["_text"]
    assert not (tmp_path / "copy").exists()


async def test_safe_bins_cannot_read_the_state_dir_either(state_dir: Path) -> None:
    details = await attempt(state_dir, "wc -c gateway.json", workdir=str(state_dir))
    assert refused(details)


async def test_agent_connections_cannot_broaden_or_approve(state_dir: Path, tmp_path: Path) -> None:
    """Session overrides that broaden security need the console's operator role, not just the token."""
    write_config(state_dir, ALLOWLIST + "[tools.elevated]\nenabled = true\n")
    marker = tmp_path / "pwned"
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        for directive in (
            "/exec security=full",
            "/exec ask=off",
            "/elevated full",
            "/elevated on",
            "/exec host=gateway",
        ):
            with pytest.raises(ExecHostError, match="needs the operator role"):
                await agent.request("policy.override", {"sessionKey": "s", "directive": directive})
        # Tightening stays open to anyone.
        await agent.request("policy.override", {"sessionKey": "s", "directive": "/exec ask=always"})
        res = await agent.request("exec", {"command": f"touch {marker}", "sessionKey": "s"})
        assert res["details"]["status"] == "approval-pending"
        with pytest.raises(ExecHostError, match="needs the operator role"):
            await agent.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-always"})
        with pytest.raises(ExecHostError, match="needs the operator role"):
            await agent.request("approvals.attach")
        with pytest.raises(ExecHostError, match="needs the operator role"):
            await agent.request("shutdown")  # it would kill every session
        with pytest.raises(ExecHostError, match="needs the operator role"):
            await agent.request("approvals.pending")  # other agents' commands, cwds and env
        # Tightening overrides cannot be cleared by an agent either.
        with pytest.raises(ExecHostError, match="needs the operator role"):
            await agent.request("policy.override", {"sessionKey": "s", "directive": "/exec reset"})
        await agent.close()
    assert not marker.exists()


async def test_a_wrong_operator_token_is_refused(state_dir: Path) -> None:
    from tests.attacks.rawclient import RawClient

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        # Presented, not written: operator.json is read at every handshake (fix15ops), so whoever writes
        # it (the operator's account, the only one that can) sets the operator token, as a rotation does.
        raw, first = await RawClient.open(state_dir, operator="forged-forged-forged-forged")
        raw.close()
        assert first["type"] == "error" and first["code"] == "auth", first
        operator = await connect(state_dir, "op")  # the token the file holds still opens the role
        assert "approvals" in await operator.request("approvals.pending")
        await operator.close()
