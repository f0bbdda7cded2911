"""A stamp's proof (engine.approvals.generations): a uid mapping or the anonymous rule that made a caller its
agent, ended by a config change as a revoke ends a credential; what was asked under it is settled."""

from __future__ import annotations

from engine.approvals import generations
from engine.approvals.generations import Generations, Stamp
from engine.approvals.pending import REVOKED, ApprovalManager
from engine.approvals.request import ApprovalError, ApprovalRequest

KEY = "uid:47123>ops"


def _ask(mgr: ApprovalManager, stamp: Stamp, command: str = "ls") -> tuple[object, bool]:
    token = generations.authorize(stamp)
    try:
        return mgr.register(ApprovalRequest(command=command, cwd="/tmp", agent_id="ops"), generation=0)
    finally:
        generations.reset(token)


def test_an_ended_proof_ends_its_stamps_only() -> None:
    owner = Generations()
    mapped = Stamp("ops", 0, owner, KEY, owner.proof(KEY, "ops"))
    credential = Stamp("ops", 0, owner)
    assert owner.end_proofs(lambda key: True) == []  # still holds: nothing ends
    assert not mapped.stale()
    assert owner.end_proofs(lambda key: key != KEY) == ["ops"]
    assert mapped.stale() and not credential.stale()  # the agent's credential stands
    # The account mapped again later: a new generation, the old stamps stay ended.
    again = Stamp("ops", 0, owner, KEY, owner.proof(KEY, "ops"))
    assert not again.stale() and mapped.stale()
    assert owner.end_proofs(lambda key: False) == ["ops"] and owner.end_proofs(lambda key: False) == []


def test_a_proof_is_decided_again_at_a_point_of_use() -> None:
    owner = Generations()
    mapped = Stamp("ops", 0, owner, KEY, owner.proof(KEY, "ops"))
    holds = {KEY: True}
    owner.holds = lambda key: holds[key]  # the config now, as the gateway sets it
    assert not mapped.stale()
    holds[KEY] = False  # the config changed; no recheck ran yet
    assert mapped.stale()
    holds[KEY] = True  # and changed back before any recheck: it holds again
    assert not mapped.stale()


async def test_the_asks_made_under_an_ended_proof_are_settled() -> None:
    mgr = ApprovalManager()
    owner = mgr.generations
    mapped = Stamp("ops", 0, owner, KEY, owner.proof(KEY, "ops"))
    theirs, _ = _ask(mgr, mapped, "ls mapped")
    others, _ = _ask(mgr, Stamp("ops", 0, owner), "ls credential")
    assert mgr.end_proofs(lambda key: True) == 0
    assert mgr.end_proofs(lambda key: key != KEY) == 1
    assert theirs.resolved and theirs.decision == "deny" and theirs.reason == REVOKED  # type: ignore[attr-defined]
    assert not others.resolved  # type: ignore[attr-defined]
    try:
        _ask(mgr, mapped, "ls later")  # nothing more is filed under it
    except ApprovalError as exc:
        assert exc.code == "AGENT_REVOKED"
    else:
        raise AssertionError("an ask under an ended proof was filed")


async def test_an_approved_ask_under_a_proof_cut_off_since_is_not_approvable() -> None:
    mgr = ApprovalManager()
    owner = mgr.generations
    holds = {KEY: True}
    owner.holds = lambda key: holds[key]
    record, _ = _ask(mgr, Stamp("ops", 0, owner, KEY, owner.proof(KEY, "ops")))
    holds[KEY] = False  # cut off by the config; the approve comes before any recheck
    got, applied = mgr.resolve(record.id, "allow-once", "op")  # type: ignore[attr-defined]
    assert not applied and got.decision == "deny"
