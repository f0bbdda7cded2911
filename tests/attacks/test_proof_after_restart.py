"""The proof an ask recorded outlives the gateway that took it (fix15ops): an ask made on the gateway token
alone, left pending across a restart, is settled by the next gateway when the config no longer admits the
gateway token alone, and by a live config change after the restart (the restored ask keeps its proof)."""

from __future__ import annotations

from pathlib import Path

from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import connect, gateway, wait_until, write_config

NONE = ALLOWLIST + '\n[gateway]\nanonymous = "none"\n'


async def _ask_and_stop(state: Path, proof: Path) -> str:
    """The gateway token alone (agent main) asks, no approver attached: pending, then the gateway stops."""
    write_config(state, ALLOWLIST)
    async with gateway(state) as server:
        anonymous = await connect(state, "anon", operator=False)
        got = await anonymous.request("exec", {"command": f"sh -c 'echo ran > {proof}'", "background": True})
        assert got["details"]["status"] == "approval-pending", got
        await anonymous.close()
        (ask,) = server.services.approvals.pending()
        return ask.id


async def test_a_restored_ask_whose_proof_the_config_ended_meanwhile_is_denied(
    state_dir: Path, tmp_path: Path
) -> None:
    proof = tmp_path / "ran"
    ask = await _ask_and_stop(state_dir, proof)
    write_config(state_dir, NONE)  # while no gateway runs
    async with gateway(state_dir) as server:
        assert ask not in [r.id for r in server.services.approvals.pending()]
        record = server.services.approvals.get(ask)
        assert record.decision == "deny", record.view()
    assert not proof.exists()


async def test_a_restored_ask_keeps_its_proof_for_a_later_config_change(
    state_dir: Path, tmp_path: Path
) -> None:
    proof = tmp_path / "ran"
    ask = await _ask_and_stop(state_dir, proof)
    async with gateway(state_dir) as server:
        assert ask in [r.id for r in server.services.approvals.pending()]  # still admitted: still pending
        operator = await connect(state_dir, "op")
        write_config(state_dir, NONE)
        await operator.request("agents.refresh")
        await wait_until(lambda: ask not in [r.id for r in server.services.approvals.pending()])
        assert server.services.approvals.get(ask).decision == "deny"
        await operator.close()
    assert not proof.exists()


async def test_a_restored_ask_whose_gateway_token_was_replaced_meanwhile_is_denied(
    state_dir: Path, tmp_path: Path
) -> None:
    """Its proof names the gateway token that made it (`anonymous>main@<id>`): replacing a leaked
    gateway.json while no gateway runs ends it, as `anonymous = "none"` does (fix16tokproof)."""
    from tests.attacks.test_fresh_round16_b import _replace_gateway_token

    proof = tmp_path / "ran"
    ask = await _ask_and_stop(state_dir, proof)
    _replace_gateway_token(state_dir)
    async with gateway(state_dir) as server:
        assert ask not in [r.id for r in server.services.approvals.pending()]
        assert server.services.approvals.get(ask).decision == "deny"
    assert not proof.exists()


async def test_a_journaled_proof_naming_no_token_holds_nothing(state_dir: Path, tmp_path: Path) -> None:
    """An `anonymous>main` journaled before proofs named their token: it cannot be decided by the token
    that made it, so the restored ask is denied (the operator asks for the call again if it is wanted)."""
    import re

    from engine.approvals.durable import PENDING_NAME

    proof = tmp_path / "ran"
    ask = await _ask_and_stop(state_dir, proof)
    journal = state_dir / f"{PENDING_NAME}.journal"  # (the ask as the journal appended it)
    text = journal.read_text()
    old, n = re.subn(r"anonymous>main@[0-9a-f]+", "anonymous>main", text)
    assert n
    journal.write_text(old)
    async with gateway(state_dir) as server:
        assert ask not in [r.id for r in server.services.approvals.pending()]
        assert server.services.approvals.get(ask).decision == "deny"
    assert not proof.exists()
