"""Every ask names the principal that asked (ApprovalRequest.asker): the operator's call and an agent's
identical call are two requesters, each counted in its own share, each answered once (fresh round 16 b)."""

from __future__ import annotations

import asyncio

import pytest

from engine.approvals.pending import ApprovalManager
from engine.approvals.request import OPERATOR_ASKER, ApprovalError, ApprovalRequest
from engine.approvals.schema import (
    ALLOW_ALWAYS,
    OPERATOR_PRINCIPAL,
    AllowlistRecord,
    ApprovalsFile,
    PolicyBlock,
)


def req(command: str, asker: str, agent: str = "main") -> ApprovalRequest:
    return ApprovalRequest(command=command, cwd="/tmp", agent_id=agent, asker=asker)


def test_the_operator_and_an_agent_are_two_requesters_of_one_question() -> None:
    async def go() -> None:
        mgr = ApprovalManager()
        own, new = mgr.register(req("touch x", OPERATOR_ASKER), resume={"operator": True})
        assert new and own.operators
        joined, new = mgr.register(req("touch x", "main"), resume={"agentId": "main"})
        assert joined is own and new  # one question, a second requester: not a repeat of the operator's
        assert [r.get("principal") for r in own.requesters] == [OPERATOR_ASKER, "main"]
        assert not own.operators and own.view()["requesterCount"] == 2  # shown as main's too
        again, new = mgr.register(req("touch x", "main"), resume={"agentId": "main"})
        assert again is own and not new  # main's repeat is a repeat
        assert own.slot("", asker="main") is own.joined[0] and own.slot("", asker=OPERATOR_ASKER) is None
        mgr.resolve(own.id, "allow-once")
        assert mgr.consume_allow_once(own, "", None, OPERATOR_ASKER)
        assert mgr.consume_allow_once(own, "", None, "main")  # main's own yes, counted apart
        assert not mgr.consume_allow_once(own, "", None, "main")
        mgr.close()

    asyncio.run(go())


def test_an_agents_asks_never_fill_the_operators_share() -> None:
    async def go() -> None:
        mgr = ApprovalManager(max_per_agent=2, max_total=10)
        mgr.register(req("a", "main"))
        mgr.register(req("b", "main"))
        with pytest.raises(ApprovalError, match="agent main already has 2"):
            mgr.register(req("c", "main"))
        mgr.register(req("c", OPERATOR_ASKER))  # the operator's own share is its own
        mgr.register(req("d", OPERATOR_ASKER))
        with pytest.raises(ApprovalError, match="the operator already has 2"):
            mgr.register(req("e", OPERATOR_ASKER))
        # A join counts in the joiner's share: main, full, cannot join the operator's ask either.
        with pytest.raises(ApprovalError, match="agent main"):
            mgr.register(req("c", "main"))
        mgr.close()
        assert mgr.pending() == []

    asyncio.run(go())


def test_the_operators_own_entries_are_no_agents() -> None:
    approvals = ApprovalsFile()
    block = PolicyBlock()
    block.allowlist.append(AllowlistRecord(id="1", pattern="=command:abc", source=ALLOW_ALWAYS))
    approvals.agents[OPERATOR_PRINCIPAL] = block
    assert [e.pattern for e in approvals.operators_entries()] == ["=command:abc"]
    for agent in ("main", "ops", "*"):
        assert approvals.entries(agent) == []
