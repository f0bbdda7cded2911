"""Issue 19 (approval round trip): asks arriving together share one journal fsync, none is told "waiting"
before it is on disk; a run's outcome line rides with the next history batch yet is never reported unsaved."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.approvals import groupwrite
from engine.approvals.groupwrite import GroupWriter
from engine.protocol.requests import ExecRequest
from engine.tools.exec import ExecContext
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.pending import stored_asks

ASK_ALWAYS = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "always"\n'


async def test_asks_of_one_turn_share_one_fsync_and_none_waits_before_it(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(state_dir, ASK_ALWAYS)
    async with gateway(state_dir) as server:
        services = server.services
        pending = services.journal.pending_file
        appends: list[list[bytes]] = []
        gate, held = threading.Event(), threading.Event()
        append = pending.append

        def slow_append(lines: list[bytes], **kwargs: object) -> None:
            appends.append(list(lines))
            held.set()
            gate.wait(10)  # the fsync is slow: the asks must not be told they wait meanwhile
            append(lines, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(pending, "append", slow_append)
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")  # an approver: callers are told "waiting"
        # Three asks registered in one loop turn (what three exec frames read at once amount to).
        tool = services.exec_tool
        told: list[str] = []
        prepared = [await tool._prepare(ExecRequest(command=f"echo grouped-{i}"), _ctx()) for i in range(3)]
        ctx = _ctx(lambda d: told.append(d["approvalId"]))
        calls = [asyncio.ensure_future(tool._ask(p, ExecRequest(command=p.command), ctx)) for p in prepared]
        await asyncio.to_thread(held.wait, 10)
        await asyncio.sleep(0.2)
        assert told == []  # nobody is told "waiting" while the append is unfinished
        assert len(appends) == 1 and len(appends[0]) == 3  # one write, one fsync, for the three asks
        gate.set()
        await wait_until(lambda: len(told) == 3)
        on_disk = {ask["id"] for ask in stored_asks(state_dir)}  # what a crash now leaves the next gateway
        assert set(told) <= on_disk
        for approval_id in told:
            await operator.request("approve", {"id": approval_id, "decision": "deny"})
        results = await asyncio.wait_for(asyncio.gather(*calls), 30)
        assert all(r.details["status"] == "denied" for r in results)
        await operator.close()


def _ctx(on_waiting: Callable[[dict[str, Any]], None] | None = None) -> ExecContext:
    return ExecContext(agent_id="main", session_key="k", on_waiting=on_waiting)


async def test_a_lazy_line_rides_with_the_next_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupwrite, "LAZY_WRITE_S", 3600.0)  # only a batch or a barrier writes it
    batches: list[list[bytes]] = []
    writer = GroupWriter("lines", batches.append)
    writer.put(b"ran", lazy=True)
    for _ in range(5):
        await asyncio.sleep(0)
    assert batches == []  # no fsync of its own
    writer.put(b"decided")
    await asyncio.wait_for(writer.barrier(), 10)
    assert batches == [[b"ran", b"decided"]]  # one write for both, in order


async def test_a_barrier_writes_a_lazy_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupwrite, "LAZY_WRITE_S", 3600.0)
    batches: list[list[bytes]] = []
    writer = GroupWriter("lines", batches.append)
    writer.put(b"ran", lazy=True)
    await asyncio.wait_for(writer.barrier(), 10)
    assert batches == [[b"ran"]]


async def test_a_lazy_line_alone_is_written_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupwrite, "LAZY_WRITE_S", 0.01)
    batches: list[list[bytes]] = []
    writer = GroupWriter("lines", batches.append)
    writer.put(b"ran", lazy=True)
    await wait_until(lambda: batches == [[b"ran"]])


async def test_a_lazy_line_queued_during_a_write_waits_for_the_next_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(groupwrite, "LAZY_WRITE_S", 3600.0)
    batches: list[list[bytes]] = []
    gate, entered = threading.Event(), threading.Event()

    def write(batch: list[bytes]) -> None:
        entered.set()
        gate.wait(10)
        batches.append(batch)

    writer = GroupWriter("lines", write)
    writer.put(b"a")
    await asyncio.to_thread(entered.wait, 10)
    writer.put(b"ran", lazy=True)
    gate.set()
    await wait_until(lambda: batches == [[b"a"]])
    for _ in range(5):
        await asyncio.sleep(0)
    assert batches == [[b"a"]]  # the lazy line did not cost a second fsync of its own
    writer.put(b"b")
    await asyncio.wait_for(writer.barrier(), 10)
    assert batches == [[b"a"], [b"ran", b"b"]]


async def test_approvals_status_reports_a_run_only_once_its_line_is_on_disk(state_dir: Path) -> None:
    write_config(state_dir, ASK_ALWAYS)
    async with gateway(state_dir) as server:
        services = server.services
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent")
        answers: set[asyncio.Future[object]] = set()

        def on_event(ev: object) -> None:
            name, data = ev  # type: ignore[misc]
            if name == "approval.requested":
                answer = asyncio.ensure_future(
                    operator.request("approve", {"id": data["id"], "decision": "deny"})
                )
                answers.add(answer)
                answer.add_done_callback(answers.discard)

        operator.add_listener(on_event)
        result = await agent.request("exec", {"command": "echo lazily"})
        assert result["details"]["status"] == "denied"
        approval_id = result["details"]["approvalId"]
        status = await operator.request("approvals.status", {"approvalId": approval_id})
        assert status["details"]["run"]["status"] == "denied"
        on_disk = {e.id: e for e in services.journal.history.entries()}
        assert on_disk[approval_id].view()["run"]["status"] == "denied"  # what it reported was saved
        await agent.close()
        await operator.close()
