"""ApprovalManager's indexes (open asks; asks that may still need to be on disk) always agree with a full
scan of every record, through each step of an ask's life: they replaced per-ask scans that made a burst of
asks quadratic (issue 19), and a wrong index would drop an ask from disk or refuse one for a full queue."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from engine.approvals.durable import unsettled
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import OPERATOR_ASKER, ApprovalError, ApprovalRequest
from engine.approvals.room import MAX_PENDING, MAX_PENDING_PER_AGENT, NEWCOMER_FLOOR, NEWCOMER_SLOTS


def req(command: str, agent: str = "main") -> ApprovalRequest:
    return ApprovalRequest(command=command, cwd="/tmp", agent_id=agent)


def agrees(mgr: ApprovalManager) -> None:
    scan_open = sorted((r for r in mgr.records() if not r.resolved), key=lambda r: r.cursor)
    assert mgr.pending() == scan_open
    assert mgr.unsettled_records() == [r for r in mgr.records() if unsettled(r)]


def test_indexes_follow_every_step() -> None:
    async def go() -> None:
        mgr = ApprovalManager(grace_ms=50)
        records = [mgr.register(req(f"cmd {i}"), resume={"params": {}})[0] for i in range(6)]
        relayed, _ = mgr.register(req("relayed"))  # no resume data: a node's ask, never kept here
        agrees(mgr)
        mgr.resolve(records[0].id, "deny")
        mgr.resolve(records[1].id, "allow-once")
        mgr.resolve(records[2].id, "allow-always")
        mgr.resolve(relayed.id, "allow-once")
        agrees(mgr)
        assert records[1] in mgr.unsettled_records() and records[0] not in mgr.unsettled_records()
        mgr.note_run(records[1], {"sessionId": "s1", "status": "starting"})
        agrees(mgr)
        assert records[1] in mgr.unsettled_records()
        mgr.note_run(records[1], {"sessionId": "s1", "status": "completed"})
        mgr.note_run(records[2], {"sessionId": "s2", "status": "running"})
        agrees(mgr)
        assert records[1] not in mgr.unsettled_records() and records[2] not in mgr.unsettled_records()
        assert mgr.withdraw("nobody") == 0
        await asyncio.sleep(0.1)  # the grace window ends: decided records are forgotten
        agrees(mgr)
        assert {r.id for r in mgr.pending()} == {r.id for r in records[3:]}
        mgr.close()
        agrees(mgr)
        assert mgr.pending() == []

    asyncio.run(go())


def test_queue_room_counts_open_asks_only() -> None:
    async def go() -> None:
        mgr = ApprovalManager(max_per_agent=2, max_total=3)
        first, _ = mgr.register(req("a"))
        mgr.register(req("b"))
        with pytest.raises(ApprovalError):
            mgr.register(req("c"))  # two of this agent's asks wait
        mgr.resolve(first.id, "deny")
        mgr.register(req("c"))  # a decided ask (still in its grace window) no longer counts
        mgr.register(req("x", agent="other"))
        with pytest.raises(ApprovalError):
            mgr.register(req("y", agent="third"))  # three wait in all
        agrees(mgr)
        mgr.close()

    asyncio.run(go())


def test_a_join_counts_against_the_agents_cap() -> None:
    """Issue 27: the caps count requesters, not records. A session joining a pending ask is one more
    ask waiting; past the cap the join is refused, and the room comes back when the ask is decided."""

    async def go() -> None:
        mgr = ApprovalManager(max_per_agent=3, max_total=4)
        first, _ = mgr.register(req("a"))
        for key in ("s1", "s2"):
            record, new = mgr.register(ApprovalRequest(command="a", cwd="/tmp", session_key=key))
            assert record is first and new
        with pytest.raises(ApprovalError, match="3 approvals waiting"):
            mgr.register(ApprovalRequest(command="a", cwd="/tmp", session_key="s3"))
        repeat, new = mgr.register(ApprovalRequest(command="a", cwd="/tmp", session_key="s2"))
        assert repeat is first and not new  # a repeat of a requester already waiting is no new ask
        assert len(first.requesters) == 3 and first.view()["requesterCount"] == 3
        mgr.register(req("x", agent="other"))
        with pytest.raises(ApprovalError, match="in all"):
            mgr.register(req("y", agent="third"))  # four requesters wait in all
        mgr.resolve(first.id, "deny")
        mgr.register(req("y", agent="third"))
        mgr.register(req("b"))
        agrees(mgr)
        mgr.close()

    asyncio.run(go())


def test_revoking_an_agent_denies_its_asks_and_voids_unstarted_runs() -> None:
    async def go() -> None:
        mgr = ApprovalManager()
        waiting, _ = mgr.register(req("a", agent="ops"), resume={"params": {}})
        approved, _ = mgr.register(req("b", agent="ops"), resume={"params": {}})
        mgr.register(ApprovalRequest(command="b", cwd="/tmp", agent_id="ops", session_key="k"), resume={})
        other, _ = mgr.register(req("c", agent="main"), resume={"params": {}})
        mgr.resolve(approved.id, "allow-once")
        assert mgr.revoke_agent("ops") == 3  # one ask denied, two runs (first and joined) voided
        assert waiting.decision == "deny" and waiting.reason == "agent revoked"
        assert approved.revoked and approved.run == {"status": "denied", "reason": "agent revoked"}
        assert all(entry["run"]["status"] == "denied" for entry in approved.joined)
        assert not unsettled(approved)  # nothing of ops's is kept for the next gateway to run
        assert [r.id for r in mgr.pending()] == [other.id]
        agrees(mgr)
        mgr.close()

    asyncio.run(go())


def test_the_operators_share_and_the_newcomers_slots_outlast_a_flood_of_agents() -> None:
    """Fresh round 17 b: eight agents filling their shares (and any more agents after them) neither refuse
    the operator's own asks (its share counts in no total) nor leave a ninth agent no room at all (the
    total's last slots are for agents holding fewer than NEWCOMER_FLOOR asks)."""

    async def go() -> None:
        mgr = ApprovalManager()
        for n in range(8):
            for i in range(MAX_PENDING_PER_AGENT):
                mgr.register(req(f"ls /a{n}-{i}", agent=f"a{n}"))
        filled = MAX_PENDING - NEWCOMER_SLOTS
        assert len(mgr.pending()) == filled == 8 * MAX_PENDING_PER_AGENT
        for n in range(8, 8 + NEWCOMER_SLOTS // NEWCOMER_FLOOR):  # each newcomer: a few asks, no more
            for i in range(NEWCOMER_FLOOR):
                mgr.register(req(f"ls /n{n}-{i}", agent=f"a{n}"))
            with pytest.raises(ApprovalError, match=r"kept for agents with fewer than|in all"):
                mgr.register(req(f"ls /n{n}-more", agent=f"a{n}"))  # the last newcomer: every slot taken
        with pytest.raises(ApprovalError, match="in all"):
            mgr.register(req("ls /late", agent="late"))  # the agents' total: every slot taken
        for i in range(MAX_PENDING_PER_AGENT):  # the operator's own share, whole
            mgr.register(replace(req(f"ls /op-{i}"), asker=OPERATOR_ASKER))
        with pytest.raises(ApprovalError, match="the operator already has"):
            mgr.register(replace(req("ls /op-more"), asker=OPERATOR_ASKER))
        assert len(mgr.pending()) == MAX_PENDING + MAX_PENDING_PER_AGENT
        agrees(mgr)
        mgr.close()

    asyncio.run(go())
