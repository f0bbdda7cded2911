"""Class 2 (whose is it?): a 'this session only' grant belongs to one session, never to "no session".

The gateway test is attacker o's (round 8, tests/attacks/test_fresh_round8_o.py,
`test_class2_session_only_grant_on_a_sessionless_ask_covers_every_sessionless_call`), with the safe outcome
it now meets: the operator's session-only answer to a sessionless ask is refused with a reason, nothing is
granted, and the next sessionless call, from another connection, asks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.grants import GrantLimits, GrantStore
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalError, ApprovalRequest
from engine.errors import InvalidInput
from tests.helpers.gateway import ALLOWLIST, connect, gateway, write_config


async def test_session_only_on_a_sessionless_ask_is_refused_and_the_next_sessionless_call_asks(
    state_dir: Path,
) -> None:
    """Attacker o: the asking call had no session key (an `exechost exec`, an MCP server started without
    `--session`); a grant bound to "" matched every later sessionless call of that agent, from any
    connection. Now the answer is refused, saying why, and no grant exists."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    work.mkdir()
    async with gateway(state_dir):
        first = await connect(state_dir, operator=False)
        try:
            res = await first.request("exec", {"command": "/usr/bin/id -u", "workdir": str(work)})
            assert res["details"]["status"] == "approval-pending", res
            operator = await connect(state_dir)
            try:
                with pytest.raises(Exception, match="this session only") as refused:
                    await operator.request(
                        "approve",
                        {
                            "id": res["details"]["approvalId"],
                            "decision": "allow-always",
                            "grant": {"sessionOnly": True},
                        },
                    )
                assert "no session" in str(refused.value) and "duration" in str(refused.value)
                got = await operator.request("approvals.grants", {})
                assert got["grants"] == [], got
                # Still pending: the operator can answer it another way.
                status = await operator.request(
                    "approvals.status", {"approvalId": res["details"]["approvalId"]}
                )
                assert status["details"]["status"] == "approval-pending", status
                assert (
                    status["details"]["approval"]["sessionOwner"] is None
                )  # (the console offers no such choice)
            finally:
                await operator.close()
        finally:
            await first.close()
        second = await connect(state_dir, operator=False)
        try:
            again = await second.request("exec", {"command": "/usr/bin/id -u", "workdir": str(work)})
        finally:
            await second.close()
    assert again["details"]["status"] == "approval-pending", again
    assert GrantStore(state_dir / "exec-grants.json").active() == []


def _limits() -> GrantLimits:
    return GrantLimits(session_only=True)


async def test_session_only_needs_one_named_session_among_all_askers() -> None:
    """Two sessions waiting on one coalesced ask: 'this session only' names neither, so it is refused; one
    session (however often it asked) is that session's."""
    mgr = ApprovalManager()
    one, _ = mgr.register(ApprovalRequest(command="a", cwd="/tmp", session_key="agent:main:one"))
    mgr.register(ApprovalRequest(command="a", cwd="/tmp", session_key="agent:main:two"))
    with pytest.raises(ApprovalError) as err:
        mgr.resolve(one.id, "allow-always", grant=_limits())
    assert err.value.code == "APPROVAL_NO_SESSION" and "2 sessions wait on this one" in str(err.value)
    mixed, _ = mgr.register(ApprovalRequest(command="b", cwd="/tmp", session_key="agent:main:one"))
    mgr.register(ApprovalRequest(command="b", cwd="/tmp", session_key=""))
    with pytest.raises(ApprovalError, match="no session key"):
        mgr.resolve(mixed.id, "allow-always", grant=_limits())
    alone, _ = mgr.register(ApprovalRequest(command="c", cwd="/tmp", session_key="agent:main:one"))
    mgr.register(ApprovalRequest(command="c", cwd="/tmp", session_key="agent:main:one"))
    record, applied = mgr.resolve(alone.id, "allow-always", grant=_limits())
    assert applied and record.grant == _limits()
    # Other limits never needed a session: a sessionless ask takes a duration or uses.
    bare, _ = mgr.register(ApprovalRequest(command="d", cwd="/tmp"))
    assert mgr.resolve(bare.id, "allow-always", grant=GrantLimits(uses=3))[1]


def test_the_grant_store_never_makes_or_matches_an_ownerless_session_grant(tmp_path: Path) -> None:
    """Below the approve verb: a session grant without a session is never made (a decision journaled by an
    older gateway, taken up again), and one already in the file (written by one) matches no call."""
    store = GrantStore(tmp_path / "exec-grants.json")
    with pytest.raises(InvalidInput):
        store.ensure("g1", "main", ["/usr/bin/id"], "id", _limits(), session_key="")
    assert store.active() == []
    made = store.ensure("g2", "main", ["/usr/bin/id"], "id", _limits(), session_key="agent:main:one")
    assert made is not None and made.session_key == "agent:main:one"
    assert [e.pattern for e in store.entries("main", "agent:main:one")] == ["/usr/bin/id"]
    assert store.entries("main", None) == [] and store.entries("main", "agent:main:two") == []
    # An older gateway's file: sessionKey "" (the hole). It grants no one.
    raw: dict[str, Any] = json.loads(store.path.read_text())
    raw["grants"][0]["sessionKey"] = ""
    store.path.write_text(json.dumps(raw))
    assert store.active("main") and store.entries("main", None) == [] and store.entries("main", "") == []
