"""Issue 21 grants: allow-always with limits (a duration, N uses, one session), through the real gateway."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.grants import Grant, GrantLimits, GrantStore, parse_duration
from engine.approvals.store import ApprovalsStore
from engine.errors import InvalidInput
from tests.helpers.gateway import ALLOWLIST, cli, connect, gateway, wait_until, write_config

# What OpenClaw itself writes (reference §3.1): exec-approvals.json must stay its file, untouched by grants.
OPENCLAW_FILE = {
    "version": 1,
    "socket": {"path": "~/.openclaw/exec-approvals.sock", "token": "t" * 32},
    "defaults": {"security": "allowlist", "ask": "on-miss", "askFallback": "deny"},
    "agents": {
        "main": {
            "allowlist": [
                {"id": "0b6c5c1e-1111-4c1e-9a55-3c2f1d9e0a01", "pattern": "/usr/bin/true", "lastUsedAt": 1}
            ]
        }
    },
}


async def _exec(state: Path, command: str, session: str = "agent:main:a") -> dict[str, Any]:
    agent = await connect(state, "agent", operator=False)
    try:
        result = await agent.request("exec", {"command": command, "agentId": "main", "sessionKey": session})
    finally:
        await agent.close()
    details: dict[str, Any] = result["details"]
    return details


async def _approve(state: Path, approval_id: str, **grant: Any) -> dict[str, Any]:
    operator = await connect(state, "op")
    try:
        params = {"id": approval_id, "decision": "allow-always", "grant": grant}
        result: dict[str, Any] = await operator.request("approve", params)
        return result
    finally:
        await operator.close()


async def _granted(state: Path, command: str, session: str = "agent:main:a", **grant: Any) -> GrantStore:
    """Ask, answer allow-always with `grant` limits, and wait for the approved run's grant to be saved."""
    asked = await _exec(state, command, session)
    assert asked["status"] == "approval-pending", asked
    await _approve(state, asked["approvalId"], **grant)
    store = GrantStore(state / "exec-grants.json")
    await wait_until(lambda: store.active("main"))
    return store


async def test_uses_run_out_then_it_asks_again_and_survive_a_restart(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    approvals = state_dir / "exec-approvals.json"
    approvals.write_text(json.dumps(OPENCLAW_FILE, indent=2))
    os.chmod(approvals, 0o600)
    command = f"ls {tmp_path}"
    async with gateway(state_dir):
        store = await _granted(state_dir, command, uses=2)
        [grant] = store.active("main")
        assert grant.patterns == ("/usr/bin/ls",)  # bound as allow-always binds it
        assert (await _exec(state_dir, command))["status"] == "completed"
        assert store.active("main")[0].uses_left == 1
    before = approvals.read_bytes()
    async with gateway(state_dir):  # a restart: the grant (and its count) is still there
        assert (await _exec(state_dir, f"ls -la {tmp_path}"))["status"] == "completed"
        assert store.active("main") == []
        assert (await _exec(state_dir, command))["status"] == "approval-pending"
    # The permanent allowlist never saw it, and OpenClaw's file is still what OpenClaw wrote.
    assert "/usr/bin/ls" not in [e.pattern for e in ApprovalsStore(approvals).entries("main")]
    assert json.loads(approvals.read_bytes())["agents"] == json.loads(before)["agents"]
    assert "grant" not in approvals.read_text()
    assert ApprovalsStore(approvals).entries("main")[0].pattern == "/usr/bin/true"
    assert oct(os.stat(state_dir / "exec-grants.json").st_mode & 0o777) == "0o600"


async def test_an_expired_grant_never_matches(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        store = await _granted(state_dir, f"ls {tmp_path}", forMs=60_000)
        [grant] = store.active("main")
        assert grant.expires_at_ms is not None and grant.uses_left is None
        assert (await _exec(state_dir, f"ls {tmp_path}"))["status"] == "completed"
        # Expire it (as the clock would): it no longer matches, and the run asks.
        raw = json.loads((state_dir / "exec-grants.json").read_text())
        raw["grants"][0]["expiresAtMs"] = int(time.time() * 1000) - 1
        (state_dir / "exec-grants.json").write_text(json.dumps(raw))
        assert store.active("main") == [] and store.entries("main", None) == []
        assert (await _exec(state_dir, f"ls {tmp_path}"))["status"] == "approval-pending"


async def test_session_only_grant_matches_only_that_session(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        await _granted(state_dir, f"ls {tmp_path}", session="agent:main:one", sessionOnly=True)
        assert (await _exec(state_dir, f"ls {tmp_path}", "agent:main:one"))["status"] == "completed"
        assert (await _exec(state_dir, f"ls {tmp_path}", "agent:main:two"))["status"] == "approval-pending"


async def test_exact_command_grant_for_a_runner_and_revoke(state_dir: Path, tmp_path: Path) -> None:
    # git runs others: allow-always (and so a grant) binds the exact command's hash, never git's path.
    write_config(state_dir, ALLOWLIST)
    command = f"git -C {tmp_path} --version"
    async with gateway(state_dir):
        store = await _granted(state_dir, command, forMs=3_600_000)
        [grant] = store.active("main")
        assert grant.patterns[0].startswith("=command:")
        assert (await _exec(state_dir, command))["status"] == "completed"
        assert (await _exec(state_dir, f"git -C {tmp_path} status"))["status"] == "approval-pending"
        listed = await asyncio.to_thread(cli, state_dir, "approvals", "grants")
        assert listed.returncode == 0, listed.stderr
        assert grant.id in listed.stdout and "left" in listed.stdout
        revoked = await asyncio.to_thread(cli, state_dir, "approvals", "grants", "revoke", grant.id[:6])
        assert revoked.returncode == 0 and f"Revoked grant {grant.id}" in revoked.stdout, revoked.stderr
        assert (await _exec(state_dir, command))["status"] == "approval-pending"


async def test_cli_approve_with_for_and_uses(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        asked = await _exec(state_dir, f"ls {tmp_path}")
        slug = asked["approvalId"][:8]
        wrong = await asyncio.to_thread(cli, state_dir, "approve", slug, "allow-once", "--uses", "2")
        assert wrong.returncode == 2 and "limit allow-always" in wrong.stderr
        bad = await asyncio.to_thread(cli, state_dir, "approve", slug, "always", "--for", "soon")
        assert bad.returncode == 2 and "invalid duration" in bad.stderr
        done = await asyncio.to_thread(
            cli, state_dir, "approve", slug, "always", "--for", "30m", "--uses", "3"
        )
        assert done.returncode == 0, done.stderr
        assert "allow-always (for 30m, 3 uses)" in done.stdout
        store = GrantStore(state_dir / "exec-grants.json")
        [grant] = await wait_until(lambda: store.active("main"))
        assert grant.uses_left == 3 and grant.expires_at_ms is not None
        assert 29 * 60_000 < grant.expires_at_ms - grant.created_at_ms <= 30 * 60_000


def _consume(path: str, grant_id: str, out: Any) -> None:
    out.put(GrantStore(Path(path)).consume([grant_id]))


def test_uses_are_counted_atomically_across_processes(tmp_path: Path) -> None:
    store = GrantStore(tmp_path / "state" / "exec-grants.json")
    grant = store.add("main", ["/usr/bin/ls"], "ls", GrantLimits(uses=3))
    ctx = multiprocessing.get_context("fork")
    results: Any = ctx.Queue()
    procs = [ctx.Process(target=_consume, args=(str(store.path), grant.id, results)) for _ in range(8)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    outcomes = [results.get(timeout=5) for _ in procs]
    assert outcomes.count(True) == 3 and outcomes.count(False) == 5
    assert store.active() == []


def test_store_cache_follows_the_file_and_limits_parse(tmp_path: Path) -> None:
    store = GrantStore(tmp_path / "exec-grants.json")
    assert store.active() == []
    grant = store.add("main", ["/usr/bin/ls"], "ls", GrantLimits(duration_ms=parse_duration("8h")))
    assert [g.id for g in store.active()] == [grant.id]  # the cache saw the write
    other = GrantStore(store.path)
    other.revoke(grant.id)
    assert store.active() == []  # ... and another writer's
    assert parse_duration("30m") == 1_800_000 and parse_duration("2d") == 172_800_000
    for text in ("0m", "31d", "soon", "-5m"):
        with pytest.raises(InvalidInput):
            parse_duration(text)
    assert GrantLimits.from_json({"forMs": None, "uses": None}) is None
    with pytest.raises(InvalidInput):
        GrantLimits.from_json({"uses": 0})
    expired = Grant("x", "main", ("/usr/bin/ls",), "ls", 0, 1, None, None)
    assert not expired.live(2) and expired.live(0)


def test_a_grant_named_by_a_decision_is_made_once_and_never_again_once_spent(tmp_path: Path) -> None:
    """GrantStore.ensure: the id a decision journaled makes one grant however often the decision is taken
    up again (coalesced asks, a restart after a crash), and none once that grant ended (used up, revoked):
    the operator's N uses never become 2N."""
    store = GrantStore(tmp_path / "exec-grants.json")
    limits = GrantLimits(uses=2)
    made = store.ensure("g1", "main", ["/usr/bin/ls"], "ls", limits)
    again = store.ensure("g1", "main", ["/usr/bin/ls"], "ls", limits)
    assert made is not None and again == made and [g.id for g in store.active()] == ["g1"]
    assert store.consume(["g1"]) and store.consume(["g1"]) and not store.consume(["g1"])
    assert store.active() == []
    assert store.ensure("g1", "main", ["/usr/bin/ls"], "ls", limits) is None  # spent: never made again
    assert store.active() == []
    store.ensure("g2", "main", ["/usr/bin/ls"], "ls", limits)
    assert store.revoke("g2") is not None
    assert store.ensure("g2", "main", ["/usr/bin/ls"], "ls", limits) is None  # revoked counts as ended
    assert json.loads(store.path.read_text())["spent"] == ["g1", "g2"]


async def test_a_limited_allow_always_journals_its_grant_id_before_the_grant_is_made(tmp_path: Path) -> None:
    """The id is chosen with the decision (ApprovalManager.resolve), so the decision's journal line, on disk
    before anyone acts on it, already names the grant that will be made."""
    from engine.approvals.pending import ApprovalManager
    from engine.approvals.request import ApprovalRequest

    manager = ApprovalManager()
    record, _ = manager.register(ApprovalRequest(command="ls", cwd="/"))
    seen: list[str | None] = []
    manager.add_listener(lambda kind, rec: seen.append(rec.grant_id) if kind == "resolved" else None)
    manager.resolve(record.id, "allow-always", grant=GrantLimits(uses=2))
    assert record.grant_id is not None and seen == [record.grant_id]
    other, _ = manager.register(ApprovalRequest(command="pwd", cwd="/"))
    manager.resolve(other.id, "allow-always")
    assert other.grant_id is None  # no limits, no grant
    manager.close()
