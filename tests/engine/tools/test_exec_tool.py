"""The exec tool end to end through a real gateway: allowlist runs, approval flows, fallbacks, overrides."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from tests.helpers.gateway import ALLOWLIST, FULL, connect, gateway, wait_until, write_config

ECHO = os.path.realpath(shutil.which("echo") or "/bin/echo")


async def events_of(client: ControlClient, key: str) -> list[str]:
    return [e["text"] for e in (await client.request("events", {"sessionKey": key}))["events"]]


async def wait_event(client: ControlClient, key: str, prefix: str) -> str:
    async def hit() -> str | None:
        return next((t for t in await events_of(client, key) if t.startswith(prefix)), None)

    result: str = await wait_until(hit)
    return result


async def test_allowlisted_command_runs_enforced(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", ECHO)
    async with gateway(state_dir):
        client = await connect(state_dir)
        result = await client.request("exec", {"command": "echo hello world", "sessionKey": "s"})
        assert result["details"]["status"] == "completed" and result["text"] == "hello world"
        # Stamps are written off the loop, a moment after the run (engine/tools/uses.py).
        for _ in range(250):
            record = store.agent("main").allowlist[0]
            if record.last_used_at:
                break
            await asyncio.sleep(0.02)
        assert record.last_used_command == "echo hello world" and record.last_used_at
        # Not on the allowlist and no approver attached: pending, nothing ran.
        pending = await client.request(
            "exec", {"command": "touch ran-it", "sessionKey": "s", "workdir": str(state_dir)}
        )
        assert pending["details"]["status"] == "approval-pending"
        assert not (state_dir / "ran-it").exists()
        await client.close()


async def test_use_is_recorded_on_the_exact_entry_that_matched(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", ECHO, arg_pattern="'?alpha'?")
    store.add_allowlist("main", ECHO, arg_pattern="'?beta'?")
    async with gateway(state_dir):
        client = await connect(state_dir)
        result = await client.request("exec", {"command": "echo alpha", "sessionKey": "s"})
        assert result["details"]["status"] == "completed"
        # Stamps are written off the loop, a moment after the run (engine/tools/uses.py).
        for _ in range(250):
            used = {r.arg_pattern: r.last_used_command for r in store.agent("main").allowlist}
            if used["'?alpha'?"] is not None:
                break
            await asyncio.sleep(0.02)
        assert used == {"'?alpha'?": "echo alpha", "'?beta'?": None}
        await client.close()


async def test_miss_pending_text_then_approve_once_runs_detached(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        result = await agent.request(
            "exec", {"command": "echo approved-run", "sessionKey": "s1", "workdir": "/tmp"}
        )
        d = result["details"]
        assert d["status"] == "approval-pending" and d["allowedDecisions"] == [
            "allow-once",
            "allow-always",
            "deny",
        ]
        assert d["approvalSlug"] == d["approvalId"][:8] and d["host"] == "gateway" and d["cwd"] == "/tmp"
        assert result["text"] == "\n".join(
            [
                f"Approval required (id {d['approvalSlug']}, full {d['approvalId']}).",
                "Host: gateway",
                "CWD: /tmp",
                "Command:",
                "```sh",
                "echo approved-run",
                "```",
                "No approver is attached: nothing runs until someone approves. Once approved, the command "
                "runs detached and its result arrives as a system event (exechost events).",
                f"Reply with: /approve {d['approvalSlug']} allow-once|allow-always|deny",
                f"From a shell: exechost approve {d['approvalSlug']} allow-once",
                "If the short code is ambiguous, use the full id.",
            ]
        )
        operator = await connect(state_dir, "operator")
        pending = (await operator.request("approvals.pending"))["approvals"]
        assert [p["id"] for p in pending] == [d["approvalId"]]
        assert pending[0]["segments"] and pending[0]["allowAlwaysPatterns"] == [ECHO]
        res = await operator.request("approve", {"id": d["approvalSlug"].upper(), "decision": "once"})
        assert res["text"] == f"Approval allow-once submitted for {d['approvalSlug']}."
        again = await operator.request("approve", {"id": d["approvalId"], "decision": "deny"})
        assert again["details"]["status"] == "ignored"
        text = await wait_event(agent, "s1", "Exec finished")
        m = re.fullmatch(
            r"Exec finished \(gateway id=([0-9a-f-]+), session=([a-z0-9-]+), code 0\)\napproved-run", text
        )
        assert m and m.group(1) == d["approvalId"], text
        # allow-once is not durable: the same command asks again.
        again_pending = await agent.request("exec", {"command": "echo approved-run", "sessionKey": "s1"})
        assert again_pending["details"]["status"] == "approval-pending"
        assert again_pending["details"]["approvalId"] != d["approvalId"]
        await agent.close()
        await operator.close()


async def test_deny_reports_and_never_runs(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        marker = state_dir / "denied-ran"
        cmd = f"touch {marker}"
        d = (await client.request("exec", {"command": cmd, "sessionKey": "s2"}))["details"]
        await client.request("approve", {"id": d["approvalId"], "decision": "reject", "reason": "not today"})
        text = await wait_event(client, "s2", "Exec denied")
        assert text == f"Exec denied (gateway id={d['approvalId']}, user-denied): {cmd}\nReason: not today"
        assert not marker.exists()
        await client.close()


async def test_allow_always_persists_and_is_honoured_next_time(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    async with gateway(state_dir):
        client = await connect(state_dir)
        d = (await client.request("exec", {"command": "echo always-1", "sessionKey": "s3"}))["details"]
        await client.request("approve", {"id": d["approvalSlug"], "decision": "always"})
        await wait_event(client, "s3", "Exec finished")
        # The operator's own ask (its exec names no agent): saved under the operator's own key, which its
        # later calls read and no agent's do (main's allowlist stays empty: fresh round 16 b).
        own = store.snapshot().operators_entries()
        assert [e.pattern for e in own] == [ECHO] and own[0].source == "allow-always"
        assert store.agent("main").allowlist == []
        nxt = await client.request("exec", {"command": "echo always-2", "sessionKey": "s3"})
        assert nxt["details"]["status"] == "completed" and nxt["text"] == "always-2"
        await client.close()


async def test_expiry_falls_back_to_ask_fallback(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir, approval_timeout_ms=150):
        client = await connect(state_dir)
        d = (await client.request("exec", {"command": "echo late", "sessionKey": "s4"}))["details"]
        text = await wait_event(client, "s4", "Exec denied")
        assert text == f"Exec denied (gateway id={d['approvalId']}, approval-timeout): echo late"
        await client.close()
    # askFallback=allowlist: an allowlist miss still does not run.
    write_config(state_dir, ALLOWLIST + 'askFallback = "allowlist"\n')
    async with gateway(state_dir, approval_timeout_ms=150):
        client = await connect(state_dir)
        await client.request("exec", {"command": "echo late2", "sessionKey": "s5"})
        text = await wait_event(client, "s5", "Exec denied")
        assert "approval-timeout (allowlist-miss)" in text
        await client.close()
    # security=full + ask=always + askFallback=full: nobody answered, it runs.
    write_config(
        state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "always"\naskFallback = "full"\n'
    )
    async with gateway(state_dir, approval_timeout_ms=150):
        client = await connect(state_dir)
        await client.request("exec", {"command": "echo fell-back", "sessionKey": "s6"})
        text = await wait_event(client, "s6", "Exec finished")
        assert text.endswith("code 0)\nfell-back")
        await client.close()


async def test_ask_always_offers_only_allow_once(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "always"\n')
    async with gateway(state_dir):
        client = await connect(state_dir)
        result = await client.request("exec", {"command": "echo x", "sessionKey": "s7"})
        d = result["details"]
        assert d["allowedDecisions"] == ["allow-once", "deny"]
        assert (
            "The effective approval policy requires approval every time, so Allow Always is unavailable.\n"
            f"Reply with: /approve {d['approvalSlug']} allow-once|deny"
        ) in result["text"]
        with pytest.raises(RemoteError, match="allow-always is unavailable because the effective policy"):
            await client.request("approve", {"id": d["approvalId"], "decision": "allow-always"})
        with pytest.raises(RemoteError, match="unknown or expired approval id"):
            await client.request("approve", {"id": "ffffffff-nope", "decision": "deny"})
        await client.close()


async def test_identical_requests_coalesce_into_one_run(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        a, b = await asyncio.gather(
            client.request("exec", {"command": "echo once-only", "sessionKey": "s8"}),
            client.request("exec", {"command": "echo once-only", "sessionKey": "s8"}),
        )
        assert a["details"]["approvalId"] == b["details"]["approvalId"]
        pending = (await client.request("approvals.pending"))["approvals"]
        assert len(pending) == 1 and pending[0]["count"] == 2
        await client.request("approve", {"id": a["details"]["approvalId"], "decision": "allow-once"})
        await wait_event(client, "s8", "Exec finished")
        await asyncio.sleep(0.3)
        assert len([t for t in await events_of(client, "s8") if t.startswith("Exec finished")]) == 1
        await client.close()


async def test_attached_approver_gets_the_ask_and_the_call_waits(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        console = await connect(state_dir, "console")
        await console.request("approvals.attach")
        decisions = iter(["allow-once", "deny"])
        seen: list[dict[str, Any]] = []

        async def approver() -> None:
            async for ev in console.events():
                if ev.event == "approval.requested":
                    seen.append(ev.data)
                    await console.request("approve", {"id": ev.data["id"], "decision": next(decisions)})

        task = asyncio.ensure_future(approver())
        agent = await connect(state_dir, "agent")
        ran = await agent.request("exec", {"command": "echo foreground-approved", "sessionKey": "s9"})
        assert ran["details"]["status"] == "completed" and ran["text"] == "foreground-approved"
        denied = await agent.request("exec", {"command": "echo nope", "sessionKey": "s9"})
        assert denied["details"]["status"] == "denied"
        assert denied["text"].startswith("Exec denied (gateway id=") and denied["text"].endswith(
            "user-denied): echo nope"
        )
        assert [s["command"] for s in seen] == ["echo foreground-approved", "echo nope"]
        assert (
            seen[0]["agentId"] == "main" and seen[0]["sessionKey"] == "s9" and seen[0]["analysisOk"] is True
        )
        task.cancel()
        await console.close()
        await agent.close()


async def test_approvals_survive_client_restart_and_client_kill(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        first = await connect(state_dir, "agent-1")
        d = (await first.request("exec", {"command": "echo survived", "sessionKey": "s10"}))["details"]
        await first.close()  # the agent's client goes away
        second = await connect(state_dir, "agent-2")
        assert [p["id"] for p in (await second.request("approvals.pending"))["approvals"]] == [
            d["approvalId"]
        ]
        await second.request("approve", {"id": d["approvalSlug"], "decision": "allow-once"})
        assert (await wait_event(second, "s10", "Exec finished")).endswith("survived")

        # A foreground call whose client dies mid-approval: the gateway finishes the job and reports it.
        console = await connect(state_dir, "console")
        await console.request("approvals.attach")
        doomed = await connect(state_dir, "doomed")
        call = asyncio.ensure_future(doomed.request("exec", {"command": "echo orphan", "sessionKey": "s11"}))
        pending = await wait_until(lambda: _first_pending(console))
        await doomed.close()
        with pytest.raises((ConnectionError, asyncio.CancelledError)):
            await call
        await console.request("approve", {"id": pending, "decision": "allow-once"})
        assert (await wait_event(second, "s11", "Exec finished")).endswith("orphan")
        for c in (second, console):
            await c.close()


async def _first_pending(client: ControlClient) -> str | None:
    approvals = (await client.request("approvals.pending"))["approvals"]
    return approvals[0]["id"] if approvals else None


async def test_session_overrides_exec_and_elevated(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        res = await client.request(
            "policy.override", {"sessionKey": "ops", "directive": "/exec security=full ask=off"}
        )
        assert res["details"]["overrides"]["security"] == "full"
        assert (await client.request("policy.overrides"))["overrides"]["ops"]["ask"] == "off"
        ran = await client.request("exec", {"command": "echo via-override", "sessionKey": "ops"})
        assert ran["details"]["status"] == "completed"
        other = await client.request("exec", {"command": "echo via-override", "sessionKey": "other"})
        assert other["details"]["status"] == "approval-pending"
        with pytest.raises(RemoteError, match="elevated is not available"):
            await client.request("policy.override", {"sessionKey": "ops", "directive": "/elevated full"})
        with pytest.raises(RemoteError, match="Unrecognized exec security"):
            await client.request("policy.override", {"sessionKey": "ops", "directive": "/exec security=yolo"})
        check = await client.request("policy.check", {"command": "echo hi", "sessionKey": "ops"})
        assert check["decision"] == "allow" and check["security"] == "full"
        await client.close()


async def test_refusals_are_clear_errors(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        client = await connect(state_dir)
        with pytest.raises(RemoteError, match=r"Provide a command to start\."):
            await client.request("exec", {"command": "  "})
        with pytest.raises(RemoteError, match="exec host not allowed"):
            await client.request("exec", {"command": "true", "host": "node"})
        with pytest.raises(RemoteError, match="PATH"):
            await client.request("exec", {"command": "true", "env": {"PATH": "/evil"}})
        with pytest.raises(RemoteError, match="LD_PRELOAD"):
            await client.request("exec", {"command": "true", "env": {"LD_PRELOAD": "/evil.so"}})
        ok = await client.request("exec", {"command": "echo $GREETING", "env": {"GREETING": "hi"}})
        assert ok["text"] == "hi"
        await client.close()
    write_config(state_dir, '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n')
    async with gateway(state_dir):
        client = await connect(state_dir)
        with pytest.raises(RemoteError, match="requires a paired node"):
            await client.request("exec", {"command": "true"})
        await client.close()
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "deny"\n')
    async with gateway(state_dir):
        client = await connect(state_dir)
        with pytest.raises(RemoteError, match="exec denied: host=gateway security=deny"):
            await client.request("exec", {"command": "true"})
        await client.close()


async def test_sandbox_mode_routes_to_the_sandbox_runtime(state_dir: Path) -> None:
    # A sandboxed session goes to engine.sandbox.prepare_exec; with an image that cannot exist, the
    # sandbox's own refusal (or its absence) reaches the agent as a clear tool error, never a host run.
    write_config(
        state_dir,
        '[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\n'
        'image = "exechost-test-no-such-image:never"\n',
    )
    marker = state_dir / "sandbox-ran-on-host"
    async with gateway(state_dir):
        client = await connect(state_dir)
        with pytest.raises(RemoteError) as exc:
            await client.request("exec", {"command": f"touch {marker}", "sessionKey": "sbx"})
        assert exc.value.code == "tool_error", exc.value
        assert not marker.exists()
        await client.close()


async def test_broken_approvals_file_fails_closed(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    approvals = state_dir / "exec-approvals.json"
    approvals.write_text("{ not json")
    os.chmod(approvals, 0o600)
    async with gateway(state_dir):
        client = await connect(state_dir)
        with pytest.raises(RemoteError, match=r"exec denied: .*exec-approvals\.json") as exc:
            await client.request("exec", {"command": "true"})
        assert exc.value.code == "tool_error"
        await client.close()
    assert approvals.read_text() == "{ not json"


async def test_fair_pool_keeps_each_callers_result_and_error() -> None:
    from engine.fairpool import FairPool

    pool = FairPool("test-pool", workers=2)
    order: list[int] = []

    def call(i: int) -> int:
        order.append(i)
        if i % 3 == 0:
            raise ValueError(f"bad {i}")
        return i * 10

    results = await asyncio.gather(
        *(pool.run("one", lambda i=i: call(i)) for i in range(1, 10)), return_exceptions=True
    )
    assert order == list(range(1, 10))  # one principal's calls: one at a time, in arrival order
    for i, result in zip(range(1, 10), results, strict=True):
        if i % 3 == 0:
            assert isinstance(result, ValueError) and str(result) == f"bad {i}"
        else:
            assert result == i * 10
    # A cancelled caller does not disturb the next one.
    waiter = asyncio.ensure_future(pool.run("one", lambda: 1))
    waiter.cancel()
    assert await pool.run("one", lambda: 2) == 2


async def test_fair_pool_serves_principals_in_turn_and_a_stuck_one_holds_one_worker() -> None:
    """A principal with many calls queued delays another's by at most one of its calls per worker, and a
    call that blocks stalls only its own principal: the other worker serves everyone else."""
    import threading

    from engine.fairpool import FairPool

    pool = FairPool("test-fair", workers=2)
    release, opened = threading.Event(), threading.Event()
    started = [threading.Event(), threading.Event()]
    ran: list[str] = []

    def hold(i: int, until: threading.Event) -> None:
        started[i].set()
        until.wait()

    blocked = asyncio.ensure_future(pool.run("stuck", lambda: hold(0, release)))
    gate = asyncio.ensure_future(pool.run("gate", lambda: hold(1, opened)))  # the other worker, for now
    for event in started:
        await asyncio.to_thread(event.wait)
    more_stuck = asyncio.ensure_future(pool.run("stuck", lambda: ran.append("stuck-2")))
    greedy = [asyncio.ensure_future(pool.run("greedy", lambda: ran.append("greedy"))) for _ in range(50)]
    other = asyncio.ensure_future(pool.run("other", lambda: ran.append("other") or "ok"))
    await asyncio.sleep(0)  # every call above is queued (a loop turn, not a wait for time)
    assert pool.waiting("greedy") == 50 and pool.waiting("other") == 1
    opened.set()
    assert await other == "ok"
    assert ran.index("other") == 1, ran  # behind one greedy call, not fifty
    await asyncio.gather(gate, *greedy)
    assert "stuck-2" not in ran and pool.waiting("stuck") == 1  # still behind its own blocked call
    release.set()
    await asyncio.gather(blocked, more_stuck)
    assert ran[-1] == "stuck-2"
