"""The registry's running/shown counters (what `status` reports, O(1)) agree with a full scan through every
session state change: foreground, backgrounded, exited, retained, removed, swept (issue 19)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.sessions import RunSpec, SessionManager


@pytest.fixture
async def mgr(state_dir: Path) -> AsyncIterator[SessionManager]:
    manager = SessionManager(state_dir, kill_grace_sec=1.0)
    yield manager
    await manager.close()


def scanned(mgr: SessionManager) -> tuple[int, int]:
    rows = mgr.list_sessions(None)
    return len(rows), sum(1 for row in rows if row["status"] == "running")


def agree(mgr: SessionManager) -> tuple[int, int]:
    assert mgr.registry.counts() == scanned(mgr)
    return mgr.registry.counts()


async def test_counters_follow_every_state_change(mgr: SessionManager) -> None:
    assert agree(mgr) == (0, 0)
    fg = asyncio.ensure_future(mgr.run(RunSpec(command="sleep 0.5", scope_key="s1")))
    for _ in range(200):  # the foreground run shows in the operator's list while it runs
        if mgr.registry.counts() == (1, 1):
            break
        await asyncio.sleep(0.01)
    assert agree(mgr) == (1, 1)
    await fg
    assert agree(mgr) == (0, 0)  # a finished foreground run vanishes
    ids = []
    for _ in range(3):
        result = await mgr.run(RunSpec(command="sleep 30", scope_key="s1", background=True))
        ids.append(str(result.details["sessionId"]))
    assert agree(mgr) == (3, 3)
    await mgr.process("kill", {"sessionId": ids[0]}, "s1")
    for _ in range(300):
        if mgr.registry.counts()[1] == 2:
            break
        await asyncio.sleep(0.01)
    assert agree(mgr) == (3, 2)  # killed: still listed, no longer running
    await mgr.process("remove", {"sessionId": ids[1]}, "s1")
    for _ in range(300):
        if mgr.registry.counts() == (2, 1):
            break
        await asyncio.sleep(0.01)
    assert agree(mgr) == (2, 1)
    # Output past the ring keeps a finished foreground run (retained) so `process log` can page it.
    await mgr.run(RunSpec(command="head -c 400000 /dev/zero | tr '\\0' x", scope_key="s1"))
    _, running = agree(mgr)
    assert running == 1
    mgr.registry.sweep(now=2**62)  # every finished session is past its TTL
    assert agree(mgr) == (1, 1)
    assert mgr.registry.get(ids[2]) is not None


async def test_replacing_a_session_id_does_not_double_count(mgr: SessionManager) -> None:
    result = await mgr.run(RunSpec(command="sleep 30", scope_key="s1", background=True))
    session = mgr.registry.get(str(result.details["sessionId"]))
    assert session is not None
    mgr.registry.add(session)  # the same session added again
    assert agree(mgr) == (1, 1)


async def test_process_list_is_paged_and_the_pages_add_up(
    mgr: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`process list` answers at most LIST_PAGE_BYTES of rows with a `next` cursor (a frame used to exceed
    1 MiB at ~2,700 sessions); following the cursors yields every session once, in list order."""
    from engine.sessions import actions

    for n in range(30):
        await mgr.run(RunSpec(command=f"sleep 30 # {n:03d} " + "x" * 200, scope_key="s1", background=True))
    monkeypatch.setattr(actions, "LIST_PAGE_BYTES", 4096)
    whole = [row["sessionId"] for row in mgr.list_sessions("s1")]
    seen: list[str] = []
    params: dict[str, object] = {}
    pages = 0
    while True:
        result = await mgr.process("list", params, "s1")
        rows = result.details["sessions"]
        assert rows and len(rows) < 30
        seen += [row["sessionId"] for row in rows]
        pages += 1
        if "next" not in result.details:
            break
        assert result.details["total"] == 30 and "more sessions" in result.text
        params = {"cursor": result.details["next"]}
    assert pages > 2
    assert sorted(seen) == sorted(whole) and len(seen) == len(set(seen)) == 30
    assert seen == [
        row["sessionId"]
        for row in sorted(mgr.list_sessions("s1"), key=lambda r: (-r["startedAt"], r["sessionId"]))
    ]
    # A cursor that names nothing known reads as the first page, never an error.
    assert (await mgr.process("list", {"cursor": "junk"}, "s1")).details["sessions"][0]["sessionId"] == seen[
        0
    ]


SPAWN_UNTIL_FULL = """
import asyncio, resource, sys
from pathlib import Path
from engine.sessions import RunSpec, SessionManager

async def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (96, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    mgr = SessionManager(Path(sys.argv[1]), kill_grace_sec=0.5)
    try:
        for _ in range(200):
            result = await mgr.run(RunSpec(command="sleep 30", scope_key="s", background=True))
            if result.details["status"] != "running":
                print(result.text)
                return
        print("never refused")
    finally:
        await mgr.close()

asyncio.run(main())
"""


def test_running_out_of_fds_is_a_clear_failed_result(state_dir: Path) -> None:
    """The open-file limit reached anyway: the exec fails with what happened and what to do, no traceback."""
    import subprocess
    import sys

    from tests.helpers.gateway import REPO

    proc = subprocess.run(
        [sys.executable, "-c", SPAWN_UNTIL_FULL, str(state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Too many open files: the gateway's limit is 96" in proc.stdout
    assert "process remove" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_gateway_start_raises_the_soft_open_file_limit() -> None:
    import resource
    import subprocess
    import sys

    from tests.helpers.gateway import REPO

    script = (
        "import resource\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from engine.sessions.procs import raise_open_file_limit\n"
        "print(*raise_open_file_limit(), hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=str(REPO), check=True
    ).stdout.split()
    soft, hard, before = (int(x) for x in out)
    assert hard == before and soft == (hard if hard != resource.RLIM_INFINITY else 1 << 20) and soft > 256
