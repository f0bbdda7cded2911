"""Issue 37 §2: a finished session kept for `cleanupMs` lives on disk; memory keeps a summary. After its
memory is dropped, `process poll` and `process log` still return every byte, and lists still show it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.sessions import RunSpec, SessionManager
from engine.sessions.logframes import spool_text
from engine.sessions.manager import ENDED, EndedHandle
from engine.sessions.textviews import RING_CHARS, TAIL_CHARS


@pytest.fixture
async def mgr(state_dir: Path) -> AsyncIterator[SessionManager]:
    manager = SessionManager(state_dir, kill_grace_sec=1.0)
    yield manager
    await manager.close()


async def _finished(mgr: SessionManager, command: str) -> str:
    res = await mgr.run(RunSpec(command=command, scope_key="s1", background=True))
    sid = str(res.details["sessionId"])
    session = mgr.get(sid)
    assert session is not None
    await session.done.wait()
    return sid


async def test_a_settled_session_serves_every_line_from_disk(mgr: SessionManager) -> None:
    sid = await _finished(mgr, "for i in $(seq 1 500); do echo line-$i; done; exit 3")
    session = mgr.get(sid)
    assert session is not None and not session.output.settled
    first = await mgr.process("poll", {"sessionId": sid}, "s1")  # drains what was unread, in memory
    assert first.text.split("\n")[0] == "line-1" and "line-500" in first.text
    before_list = mgr.list_sessions("s1")

    mgr._settle(session)  # what the manager does SETTLE_AFTER_SEC after the end
    assert session.output.settled and session.output.ring.length == 0 and not session.output.ring.chunks
    assert not session.output.decoders and session.done is ENDED and isinstance(session.handle, EndedHandle)
    log_file = mgr.log_dir / f"{sid}.log"
    # The log is the raw bytes, in the session host's spool frames.
    assert log_file.exists() and spool_text(log_file).split() == [f"line-{i}" for i in range(1, 501)]

    assert mgr.list_sessions("s1") == [
        {**row, "runtimeMs": mgr.list_sessions("s1")[0]["runtimeMs"]} for row in before_list
    ]
    full = await mgr.process("log", {"sessionId": sid, "offset": 0, "limit": 1000}, "s1")
    assert full.text.split("\n") == [f"line-{i}" for i in range(1, 501)]
    assert full.details["totalLines"] == 500 and full.details["exitCode"] == 3
    page = await mgr.process("log", {"sessionId": sid, "offset": 100, "limit": 2}, "s1")
    assert page.text == "line-101\nline-102"
    tail = await mgr.process("log", {"sessionId": sid}, "s1")
    assert tail.text.startswith("line-301\n") and "showing last 200 of 500 lines" in tail.text
    again = await mgr.process("poll", {"sessionId": sid}, "s1")
    assert again.details["aggregated"].split()[0] == "line-1" and again.details["exitCode"] == 3
    assert "Process exited with code 3." in again.text


async def test_unread_output_and_a_truncated_ring_survive_settling(mgr: SessionManager) -> None:
    # More than the ring holds: the log spilled while it ran; and nobody polled it yet.
    sid = await _finished(mgr, f"head -c {RING_CHARS + 50_000} /dev/zero | tr '\\0' x; echo; echo END")
    session = mgr.get(sid)
    assert session is not None and session.output.truncated
    mgr._settle(session)
    assert session.output.settled and session.output.truncated
    assert not session.output.raw.replay()  # the pane reads the disk too
    pane = await mgr.read_output(sid, limit=4)
    assert pane["data"] == "END\n"
    assert len(session.output.tail()) == TAIL_CHARS and session.output.tail().endswith("END\n")
    polled = await mgr.process("poll", {"sessionId": sid}, "s1")
    assert "END" in polled.text and "overflowed the poll buffer" in polled.text
    log = await mgr.process("log", {"sessionId": sid, "offset": 0, "limit": 5}, "s1")
    assert log.text.split("\n") == ["x" * (RING_CHARS + 50_000), "END"]
    aggregated = session.output.aggregated()
    assert aggregated.startswith("[") and aggregated.rstrip().endswith("END")  # the marker, then the end


async def test_a_session_that_printed_nothing_settles(mgr: SessionManager) -> None:
    sid = await _finished(mgr, "true")
    session = mgr.get(sid)
    assert session is not None
    mgr._settle(session)
    assert session.output.settled
    out = await mgr.process("log", {"sessionId": sid}, "s1")
    assert out.text == "(no output recorded)"
    removed = await mgr.process("remove", {"sessionId": sid}, "s1")
    assert removed.details["status"] == "completed" and mgr.get(sid) is None


async def test_a_settled_list_row_is_served_from_memory(mgr: SessionManager) -> None:
    """Lists build a row per session: its tail comes from the summary, not from a disk read per row."""
    sid = await _finished(mgr, "echo short")
    session = mgr.get(sid)
    assert session is not None
    mgr._settle(session)
    (mgr.log_dir / f"{sid}.log").unlink()  # the disk copy gone: the row still has its tail
    assert mgr.list_sessions("s1")[0]["tail"] == "short\n"
    long_sid = await _finished(mgr, f"head -c {TAIL_CHARS * 2} /dev/zero | tr '\\0' y; echo")
    long = mgr.get(long_sid)
    assert long is not None
    mgr._settle(long)
    assert long.output.tail() == "y" * (TAIL_CHARS - 1) + "\n"  # the summary's tail
    assert long.output.tail(TAIL_CHARS + 10) == "y" * (TAIL_CHARS + 9) + "\n"  # more than it holds: the disk
