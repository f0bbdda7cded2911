"""ApprovalManager: ids, prefixes, aliases, coalescing, expiry, grace, allow-once, double resolve, texts."""

from __future__ import annotations

import asyncio

import pytest

from engine.approvals.pending import (
    ALWAYS_UNAVAILABLE,
    ALWAYS_UNBOUND,
    AMBIGUOUS,
    NOT_FOUND,
    USAGE,
    ApprovalManager,
    normalize_decision,
)
from engine.approvals.request import ApprovalError, ApprovalRequest


def req(command: str = "ls -la", **kw: object) -> ApprovalRequest:
    return ApprovalRequest(command=command, cwd="/tmp", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "alias, decision",
    [
        ("allow", "allow-once"),
        ("once", "allow-once"),
        ("allow-once", "allow-once"),
        ("ALLOWONCE", "allow-once"),
        ("always", "allow-always"),
        ("allow-always", "allow-always"),
        ("allowalways", "allow-always"),
        ("deny", "deny"),
        ("reject", "deny"),
        ("Block", "deny"),
        (" deny ", "deny"),
        ("yes", None),
        ("", None),
    ],
)
def test_aliases(alias: str, decision: str | None) -> None:
    assert normalize_decision(alias) == decision


async def test_register_ids_and_view() -> None:
    mgr = ApprovalManager()
    record, created = mgr.register(req())
    assert created and len(record.id) == 36 and record.slug == record.id[:8]
    assert record.expires_at_ms - record.created_at_ms == 1_800_000
    view = record.view()
    assert view["status"] == "pending" and view["command"] == "ls -la" and view["count"] == 1
    assert [r.id for r in mgr.pending()] == [record.id]


async def test_resolve_by_exact_id_and_case_insensitive_prefix() -> None:
    mgr = ApprovalManager()
    a, _ = mgr.register(req("a"))
    b, _ = mgr.register(req("b"))
    got, applied = mgr.resolve(a.id.upper()[:6] if a.id[:6] != b.id[:6] else a.id, "allow")
    assert got is a and applied and a.decision == "allow-once"
    assert await mgr.wait(a) == "allow-once"
    got, applied = mgr.resolve(b.id, "reject", resolved_by="console")
    assert got is b and b.decision == "deny" and b.resolved_by == "console"


async def test_errors_have_reference_texts() -> None:
    mgr = ApprovalManager(max_per_agent=100)
    records = [mgr.register(req(f"c{i}"))[0] for i in range(40)]
    with pytest.raises(ApprovalError, match=NOT_FOUND):
        mgr.resolve("zzzz", "deny")
    with pytest.raises(ApprovalError, match=NOT_FOUND):
        mgr.resolve("", "deny")
    # 40 random UUIDs share some first hex digit: that one-char prefix is ambiguous.
    first = [r.id[0] for r in records]
    shared = next(c for c in first if first.count(c) > 1)
    with pytest.raises(ApprovalError, match=AMBIGUOUS):
        mgr.resolve(shared, "deny")
    with pytest.raises(ApprovalError) as bad:
        mgr.resolve(records[0].id, "maybe")
    assert str(bad.value) == USAGE
    only_once = mgr.register(req("x", ask="always", allowed_decisions=("allow-once", "deny")))[0]
    with pytest.raises(ApprovalError, match=ALWAYS_UNAVAILABLE) as exc:
        mgr.resolve(only_once.id, "always")
    assert exc.value.code == "APPROVAL_ALLOW_ALWAYS_UNAVAILABLE"
    assert not only_once.resolved
    # The policy offers allow-always (ask on-miss) but the binder withheld it: the text names the binder.
    unbound = mgr.register(req("y", ask="on-miss", allowed_decisions=("allow-once", "deny")))[0]
    with pytest.raises(ApprovalError) as exc:
        mgr.resolve(unbound.id, "always")
    assert str(exc.value) == ALWAYS_UNBOUND and exc.value.code == "APPROVAL_ALLOW_ALWAYS_UNAVAILABLE"


async def test_double_resolve_is_ignored() -> None:
    mgr = ApprovalManager()
    record, _ = mgr.register(req())
    assert mgr.resolve(record.id, "deny")[1] is True
    again, applied = mgr.resolve(record.id, "allow-always")
    assert again is record and applied is False and record.decision == "deny"


async def test_identical_pending_requests_coalesce() -> None:
    mgr = ApprovalManager()
    a, created_a = mgr.register(req())
    b, created_b = mgr.register(req())
    c, created_c = mgr.register(req(session_key="other"))
    # Another session asking the same question joins the row (issue 21): a new requester, one record.
    assert created_a and not created_b and created_c
    assert a is b and a is c and a.count == 3
    assert [r["sessionKey"] for r in a.requesters] == [req().session_key, "other"]
    mgr.resolve(a.id, "allow-once")
    d, created_d = mgr.register(req())  # resolved: a new ask
    assert created_d and d is not a


async def test_coalesced_request_notifies_updated_with_the_new_count() -> None:
    seen: list[tuple[str, str, int]] = []
    mgr = ApprovalManager()
    mgr.add_listener(lambda kind, r: seen.append((kind, r.id, r.count)))
    a, _ = mgr.register(req())
    mgr.register(req())
    mgr.register(req())
    assert seen == [("requested", a.id, 1), ("updated", a.id, 2), ("updated", a.id, 3)]


async def test_allow_once_is_consumed_once() -> None:
    mgr = ApprovalManager()
    record, _ = mgr.register(req())
    mgr.resolve(record.id, "once")
    assert mgr.consume_allow_once(record) is True
    assert mgr.consume_allow_once(record) is False
    always, _ = mgr.register(req("y"))
    mgr.resolve(always.id, "always")
    assert mgr.consume_allow_once(always) is False


async def test_expiry_resolves_none_then_grace_then_gone() -> None:
    events: list[tuple[str, str | None]] = []
    mgr = ApprovalManager(timeout_ms=50, grace_ms=100)
    mgr.add_listener(lambda kind, r: events.append((kind, r.decision)))
    record, _ = mgr.register(req())
    assert await asyncio.wait_for(mgr.wait(record), 5) is None
    assert record.resolved_by == "expired" and record.view()["status"] == "expired"
    assert mgr.pending() == []
    assert mgr.get(record.id) is record  # late waiters still find it during the grace window
    with pytest.raises(ApprovalError, match=NOT_FOUND):
        mgr.resolve(record.slug, "allow")  # prefixes only match pending records
    assert mgr.resolve(record.id, "allow")[1] is False  # a late resolve is ignored
    for _ in range(200):
        await asyncio.sleep(0.01)
        try:
            mgr.get(record.id)
        except ApprovalError:
            break
    else:
        pytest.fail("record outlived its grace window")
    assert events == [("requested", None), ("resolved", None)]


async def test_close_expires_everything() -> None:
    mgr = ApprovalManager()
    record, _ = mgr.register(req())
    mgr.close()
    assert await mgr.wait(record) is None and record.resolved_by == "shutdown"


async def test_deny_reason_is_kept() -> None:
    mgr = ApprovalManager()
    record, _ = mgr.register(req())
    mgr.resolve(record.id, "deny", reason="  not\non prod ")
    assert record.reason == "not on prod"
