"""An approved command never runs twice, whatever the disk (fresh round 17 c, class 7): a run starts only
once its `starting` note is on disk, and a `starting` note is the last word the next gateway acts on — it
adopts the run's live session or reports the run failed, never starts it again. Neighbours of the round's
attacks: a start note whose own write failed while a later write of other asks succeeded, and a note the
next gateway finds with no trace of the run (no session files: never spawned, or removed since)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRequest
from runner.gateway.journal import ApprovalJournal

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a small filesystem of its own needs root")


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A filesystem of `size` at `where` (root only): what a full disk looks like, deterministically."""
    where.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path, byte: bytes = b"\0") -> None:
    """Append `byte`s to `path` until its filesystem is full."""
    with contextlib.suppress(OSError), open(path, "ab", buffering=0) as f:
        while True:
            f.write(byte * 512)


@needs_root
async def test_a_start_note_that_failed_is_not_saved_though_a_later_write_succeeded(state_dir: Path) -> None:
    """The start note's write fails (the disk is full); before the run asks whether it was saved, a write
    of another ask succeeds (room came back). "Did the last write fail?" says no, and the run would start
    with the journal saying "approved, not run": the next gateway would run it again. Asked per ask, the
    answer is the note's own write's."""
    with small_tmpfs(state_dir.parent / "t", "1m") as fs:
        state = fs / "s"
        state.mkdir(mode=0o700)
        approvals = ApprovalManager()
        journal = ApprovalJournal(state, approvals)
        approvals.add_listener(lambda kind, record: journal.record(kind, record))
        journal.start()
        a, _ = approvals.register(ApprovalRequest(command="echo a", cwd="/tmp", agent_id="ops"), resume={})
        b, _ = approvals.register(ApprovalRequest(command="echo b", cwd="/tmp", agent_id="ops"), resume={})
        await approvals.durable()
        assert approvals.durable_problem(a) is None and approvals.durable_problem(b) is None
        ballast = fs / "ballast"
        fill(ballast)
        fill(journal.pending_file.journal, b"\n")  # its last page too (blank lines): no room at all
        approvals.note_run(a, {"sessionId": "s1", "instance": "i1", "status": "starting", "host": "gateway"})
        await approvals.durable()  # a's start note: not written
        assert approvals.durable_problem(a) is not None
        ballast.unlink()
        approvals.note_run(b, {"sessionId": "s2", "instance": "i2", "status": "starting", "host": "gateway"})
        await approvals.durable()  # b's: written
        assert approvals.durable_problem(b) is None
        assert approvals.durable_problem(a) is not None, "a's start was never saved, yet it would start"
        approvals.note_run(a, {**(a.run or {}), "status": "starting"})
        await approvals.durable()  # a's state written again, now with room: saved
        assert approvals.durable_problem(a) is None
        runs = {ask.id: ask.run for ask in journal.pending_file.load()}
        assert runs[a.id] is not None and runs[a.id]["status"] == "starting"
