"""A decision is acted upon only once it is on disk where a restart finds it. A deny needs its history
line: a restart settles an ask the journal still holds as waiting when the history denied it, so a deny the
agent was told of never comes back as an ask still waiting. An approval needs the journal's line too."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.gateway.services import Services
from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config
from tests.helpers.pending import stored_asks


def _hold(
    target: Any, name: str, monkeypatch: pytest.MonkeyPatch, when: Callable[[list[bytes]], bool]
) -> tuple[threading.Event, threading.Event]:
    """Make `target.name(lines)` block (in its writer thread) on the lines `when` picks: (gate, held)."""
    gate, held = threading.Event(), threading.Event()
    original = getattr(target, name)

    def slow(lines: list[bytes], **kwargs: object) -> None:
        if when(lines):
            held.set()
            gate.wait(10)
        original(lines, **kwargs)

    monkeypatch.setattr(target, name, slow)
    return gate, held


async def _ask(state_dir: Path) -> tuple[Any, Any, asyncio.Future[Any], str]:
    operator = await connect(state_dir, "op")
    await operator.request("approvals.attach")
    agent = await connect(state_dir, "agent", operator=False)
    call = asyncio.ensure_future(
        agent.request("exec", {"command": "uname -s", "agentId": "main", "sessionKey": "k"})
    )
    rows = await wait_until(operator.pending_approvals, timeout=30)
    await wait_until(lambda: len(stored_asks(state_dir)) == 1)  # the ask is on disk
    return operator, agent, call, rows[0]["id"]


async def test_a_deny_waits_for_its_history_line(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        history = server.services.journal.history
        gate, held = _hold(
            history, "write_lines", monkeypatch, lambda lines: any(b'"decision"' in x for x in lines)
        )
        operator, agent, call, approval_id = await _ask(state_dir)
        await operator.request("approve", {"id": approval_id, "decision": "deny"})
        await asyncio.to_thread(held.wait, 10)
        await asyncio.sleep(0.3)
        assert not call.done()  # the journal may have it; the history does not yet
        gate.set()
        res = await asyncio.wait_for(call, 30)
        assert res["details"]["status"] == "denied"
        await agent.close()
        await operator.close()


async def test_a_deny_told_before_the_journal_settled_the_ask_does_not_come_back(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        pending = server.services.journal.pending_file
        gate, held = _hold(
            pending, "append", monkeypatch, lambda lines: any(b'"settled"' in x for x in lines)
        )
        operator, agent, call, approval_id = await _ask(state_dir)
        await operator.request("approve", {"id": approval_id, "decision": "deny"})
        res = await asyncio.wait_for(call, 30)  # the history has the deny: the agent is told
        assert res["details"]["status"] == "denied"
        await asyncio.to_thread(held.wait, 10)  # the journal's settling line is stuck in its write
        assert [a["id"] for a in stored_asks(state_dir)] == [approval_id]  # the journal: still waiting
        # A crash now: what the next gateway would take up from these files is nothing.
        assert Services(state_dir).journal.restorable_asks() == []
        gate.set()
        await wait_until(lambda: stored_asks(state_dir) == [])
        await agent.close()
        await operator.close()


async def test_an_approval_waits_for_the_journal(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the next gateway runs after a crash comes from the journal: an approval is acted upon only once
    the journal holds it (an ask the history approved but the journal does not is asked again)."""
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        pending = server.services.journal.pending_file
        gate, held = _hold(
            pending, "append", monkeypatch, lambda lines: any(b'"decision": "allow-once"' in x for x in lines)
        )
        operator, agent, call, approval_id = await _ask(state_dir)
        await operator.request("approve", {"id": approval_id, "decision": "allow-once"})
        await asyncio.to_thread(held.wait, 10)
        history = server.services.journal.history
        await wait_until(lambda: history.decisions_of({approval_id}))  # the history has it
        await asyncio.sleep(0.3)
        assert not call.done()
        assert [a.id for a in Services(state_dir).journal.restorable_asks()] == [approval_id]  # asked again
        gate.set()
        res = await asyncio.wait_for(call, 30)
        assert res["details"]["status"] == "completed"
        await agent.close()
        await operator.close()
