"""Sessions against real process trees and floods: no survivors, no lost bytes, bounded memory."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.sessions import RunSpec, SessionManager
from engine.sessions.procs import alive, scan
from engine.sessions.textviews import PENDING_CHARS, RING_CHARS

PY = sys.executable
# Double fork + setsid: the daemon leaves the process group but keeps the session's stdout/stderr.
DAEMON = (
    f'{PY} -c "import os,time\n'
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
    "if os.fork(): os._exit(0)\n"
    "print('daemon', os.getpid(), flush=True); time.sleep(300)\""
)


@pytest.fixture
async def mgr(state_dir: Path) -> AsyncIterator[SessionManager]:
    manager = SessionManager(state_dir, kill_grace_sec=1.0)
    yield manager
    await manager.close()


def tree(marker: str) -> list[int]:
    return [p.pid for p in scan(marker=marker)]


async def wait_for_tree(marker: str, count: int) -> list[int]:
    for _ in range(500):
        pids = tree(marker)
        if len(pids) >= count:
            return pids
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} processes, saw {tree(marker)}")


async def test_kill_tree_leaves_no_survivors(mgr: SessionManager) -> None:
    result = await mgr.run(RunSpec(command="sleep 300 & sleep 300", scope_key="k", background=True))
    sid = result.details["sessionId"]
    session = mgr.get(sid)
    assert session is not None
    pids = await wait_for_tree(session.spec.marker, 3)  # sh + two sleeps
    killed = await mgr.process("kill", {"sessionId": sid}, "k")
    assert killed.text == f"Termination requested for session {sid}."
    await asyncio.wait_for(session.done.wait(), 15)
    assert session.kill_task is not None
    await session.kill_task
    assert [pid for pid in pids if alive(pid)] == []
    assert tree(session.spec.marker) == []


async def test_timeout_kills_double_forked_daemon(mgr: SessionManager) -> None:
    result = await mgr.run(
        RunSpec(command=f"{DAEMON}; sleep 300", timeout_sec=1, scope_key="k", yield_ms=60_000)
    )
    assert result.details["status"] == "failed"
    assert result.details["timedOut"] is True
    assert "daemon" in result.text
    daemon_pid = int(result.text.split("daemon ", 1)[1].split()[0])
    for _ in range(300):
        if not alive(daemon_pid):
            break
        await asyncio.sleep(0.01)
    assert not alive(daemon_pid)


async def test_stdio_holder_does_not_keep_session_running(mgr: SessionManager) -> None:
    result = await mgr.run(RunSpec(command=f"{DAEMON}; echo main done", scope_key="k", background=True))
    sid = result.details["sessionId"]
    session = mgr.get(sid)
    assert session is not None
    await asyncio.wait_for(session.done.wait(), 15)
    assert session.status == "completed"
    assert [p["reason"] for p in session.stray] == ["stdio"]
    daemon_pid = session.stray[0]["pid"]
    polled = await mgr.process("poll", {"sessionId": sid}, "k")
    assert "main done" in polled.text
    assert f"still held its output: pid {daemon_pid} (python" in polled.text
    assert polled.text.endswith("Process exited with code 0.")
    assert session.kill_task is not None
    await session.kill_task
    assert not alive(daemon_pid)


async def test_kill_reaches_daemon_that_left_stdio(mgr: SessionManager) -> None:
    quiet = DAEMON.replace("print('daemon', os.getpid(), flush=True); ", "")
    result = await mgr.run(
        RunSpec(command=f"{quiet} >/dev/null 2>&1 </dev/null; sleep 300", scope_key="k", background=True)
    )
    session = mgr.get(result.details["sessionId"])
    assert session is not None
    pids = await wait_for_tree(session.spec.marker, 3)  # sh, sleep, daemon
    await mgr.process("kill", {"sessionId": session.id}, "k")
    await asyncio.wait_for(session.done.wait(), 15)
    assert session.kill_task is not None
    await session.kill_task
    assert [pid for pid in pids if alive(pid)] == []


async def test_close_kills_everything(state_dir: Path) -> None:
    manager = SessionManager(state_dir, kill_grace_sec=0.5)
    markers = []
    for _ in range(3):
        result = await manager.run(RunSpec(command="sleep 300 & sleep 300", scope_key="k", background=True))
        session = manager.get(result.details["sessionId"])
        assert session is not None
        markers.append(session.spec.marker)
    pids = [pid for marker in markers for pid in await wait_for_tree(marker, 3)]
    await manager.close()
    assert [pid for pid in pids if alive(pid)] == []
    assert manager.list_sessions(None) == []


async def test_term_ignored_gets_sigkill(mgr: SessionManager) -> None:
    result = await mgr.run(
        RunSpec(
            command="trap '' TERM; echo armed; while :; do sleep 0.05; done", scope_key="k", background=True
        )
    )
    sid = result.details["sessionId"]
    assert "armed" in (await mgr.process("poll", {"sessionId": sid, "timeout": 5000}, "k")).text
    await mgr.process("kill", {"sessionId": sid}, "k")
    session = mgr.get(sid)
    assert session is not None
    await asyncio.wait_for(session.done.wait(), 15)
    assert session.exit_signal == "SIGKILL"


@pytest.mark.slow
async def test_thousand_fast_commands_lose_nothing(mgr: SessionManager) -> None:
    gate = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        async with gate:
            # Output larger than one pipe read, written right before exit: the #58146 race.
            result = await mgr.run(
                RunSpec(command=f"printf '%02000d\\n' {i}; echo err{i} >&2", scope_key="f")
            )
        expected = f"{i:02000d}\nerr{i}"
        assert result.text == expected, i

    await asyncio.gather(*(one(i) for i in range(1000)))
    assert mgr.list_sessions(None) == []


def _rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
async def test_one_gib_flood_stays_bounded(mgr: SessionManager) -> None:
    before = _rss_kib()
    command = "head -c 1073741824 /dev/zero | tr '\\0' x; echo; echo END-OF-FLOOD"
    result = await mgr.run(RunSpec(command=command, scope_key="g", background=True))
    sid = result.details["sessionId"]
    session = mgr.get(sid)
    assert session is not None
    stalled = mgr.subscribe(sid)  # a viewer that never reads must not hold the command back
    peak = before
    while not session.done.is_set():
        out = session.output
        assert out.ring.length <= RING_CHARS
        assert out.pending["stdout"].length <= PENDING_CHARS
        peak = max(peak, _rss_kib())
        await asyncio.sleep(0.2)
    out = session.output
    assert out.total_chars == 1024**3 + len("\nEND-OF-FLOOD\n")
    assert out.ring.length == RING_CHARS
    assert out.aggregated().startswith(f"[truncated: {1024**3 + 14 - RING_CHARS} earlier chars dropped")
    assert out.tail().endswith("x\nEND-OF-FLOOD\n")
    assert (peak - before) < 64 * 1024, f"RSS grew {(peak - before) // 1024} MiB"
    log_path = Path(str(out.log_path))
    assert 0 < log_path.stat().st_size <= mgr.log_cap_bytes
    polled = await mgr.process("poll", {"sessionId": sid}, "g")
    assert "overflowed the poll buffer" in polled.text
    assert polled.text.endswith("END-OF-FLOOD\n\nProcess exited with code 0.")
    assert os.path.exists(log_path)
    first = await stalled.get()
    assert first is not None and first.stream == "gap" and first.dropped > 1024**3 - 2 * 1024 * 1024
    queued = 0
    while (chunk := await stalled.get()) is not None:
        queued += len(chunk.data)
    assert 0 < queued <= stalled.max_bytes
