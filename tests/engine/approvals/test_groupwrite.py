"""The durable group writer: batches, order, barriers, latest-only snapshots, failures that do not wedge."""

from __future__ import annotations

import asyncio
import threading

import pytest

from engine.approvals.groupwrite import GroupWriter


async def test_lines_queued_during_a_write_go_out_together_and_in_order() -> None:
    batches: list[list[bytes]] = []
    gate, entered = threading.Event(), threading.Event()

    def write(batch: list[bytes]) -> None:
        if not batches:
            entered.set()
            gate.wait(10)  # the first write is slow: everything after it queues
        batches.append(batch)

    writer = GroupWriter("lines", write)
    writer.put(b"a")
    await asyncio.to_thread(entered.wait, 10)  # the writer has taken "a" and is stuck in its write
    for item in (b"b", b"c", b"d"):
        writer.put(item)
    barrier = asyncio.ensure_future(writer.barrier())
    await asyncio.sleep(0.05)
    assert not barrier.done()  # "d" is not on disk yet
    gate.set()
    await asyncio.wait_for(barrier, 10)
    assert batches == [[b"a"], [b"b", b"c", b"d"]]  # one more write (one fsync) for three lines


async def test_a_snapshot_writer_writes_the_newest_state_once() -> None:
    written: list[list[bytes]] = []
    gate, entered = threading.Event(), threading.Event()
    state = {"n": 0}

    def write(batch: list[bytes]) -> None:
        if not written:
            entered.set()
            gate.wait(10)
        written.append(batch)

    writer = GroupWriter("snapshot", write, latest_only=True)
    writer.put(b"first")
    await asyncio.to_thread(entered.wait, 10)
    for n in range(1, 6):
        state["n"] = n
        writer.put(lambda: f"state {state['n']}".encode())  # encoded when its batch is taken
    state["n"] = 9
    gate.set()
    await asyncio.wait_for(writer.barrier(), 10)
    assert written == [[b"first"], [b"state 9"]]


async def test_a_failing_write_is_logged_and_never_wedges_the_barrier(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def write(batch: list[bytes]) -> None:
        raise OSError(28, "No space left on device")

    writer = GroupWriter("decision history", write)
    writer.put(b"x")
    await asyncio.wait_for(writer.barrier(), 10)
    assert "decision history not written" in caplog.text and "No space left" in caplog.text
    writer.put(b"y")
    await asyncio.wait_for(writer.barrier(), 10)  # the next batch is tried again


def test_without_a_loop_it_writes_at_once() -> None:
    batches: list[list[bytes]] = []
    writer = GroupWriter("lines", batches.append)
    writer.put(b"now")
    assert batches == [[b"now"]]


async def test_a_cancelled_barrier_leaves_the_others_waiting_and_answered() -> None:
    gate, entered = threading.Event(), threading.Event()

    def write(batch: list[bytes]) -> None:
        entered.set()
        gate.wait(10)

    writer = GroupWriter("lines", write)
    writer.put(b"a")
    await asyncio.to_thread(entered.wait, 10)
    first, second = asyncio.ensure_future(writer.barrier()), asyncio.ensure_future(writer.barrier())
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    await asyncio.wait_for(second, 10)
    assert first.cancelled()
    writer.put(b"b")
    await asyncio.wait_for(writer.barrier(), 10)  # the writer goes on
