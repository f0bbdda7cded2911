"""The pending asks' journal: replayed over the snapshot, torn lines, and a crash inside a compaction."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine.approvals.durable import PendingFile
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRecord, ApprovalRequest


def _ask(manager: ApprovalManager, command: str) -> ApprovalRecord:
    record, _ = manager.register(
        ApprovalRequest(command=command, cwd="/tmp"), resume={"params": {"command": command}}
    )
    return record


def _ids(pending: PendingFile) -> list[str]:
    return [ask.id for ask in pending.load()]


async def test_the_journal_replays_over_the_snapshot(tmp_path: Path) -> None:
    manager = ApprovalManager()
    pending = PendingFile(tmp_path / "pending-approvals.json")
    a, b, c = (_ask(manager, f"echo {n}") for n in "abc")
    pending.save([a])
    pending.append([pending.entry(b), pending.entry(c)])
    manager.resolve(a.id, "deny")
    manager.resolve(b.id, "allow-once")  # approved, not run yet: still on disk, decided
    pending.append([pending.entry(a), pending.entry(b)])
    stored = {ask.id: ask for ask in pending.load()}
    assert list(stored) == [b.id, c.id]
    assert stored[b.id].decision == "allow-once" and stored[c.id].decision is None
    manager.close()


async def test_a_torn_last_line_is_ignored_and_a_later_append_starts_clean(tmp_path: Path) -> None:
    manager = ApprovalManager()
    pending = PendingFile(tmp_path / "pending-approvals.json")
    a, b = _ask(manager, "echo a"), _ask(manager, "echo b")
    pending.append([pending.entry(a)])
    with pending.journal.open("ab") as fh:  # a write cut short by the crash: never acknowledged
        fh.write(pending.entry(b)[:40])
    assert _ids(pending) == [a.id]
    # The same in a live process (a failed write part-way): the next line must not be glued to it.
    pending._torn = True
    pending.append([pending.entry(b)])
    assert _ids(pending) == [a.id, b.id]
    assert "unreadable" in (pending.problem or "")
    manager.close()


async def test_a_crash_between_the_snapshot_and_emptying_the_journal_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction writes the lines it folds in, then the snapshot, then empties the journal; dying
    before the last step leaves an old journal that must replay to the new snapshot, not an older state."""
    manager = ApprovalManager()
    pending = PendingFile(tmp_path / "pending-approvals.json")
    a, b = _ask(manager, "echo a"), _ask(manager, "echo b")
    pending.append([pending.entry(a), pending.entry(b)])
    manager.resolve(a.id, "deny")  # settled after its last journal line was written

    def die() -> None:
        raise SystemExit("killed")

    monkeypatch.setattr(pending, "_truncate_journal", die)
    with pytest.raises(SystemExit):
        pending.write(pending.encode([a, b]), before=[pending.entry(a)])
    assert _ids(PendingFile(pending.path)) == [b.id]
    assert json.loads(pending.path.read_text())["asks"][0]["id"] == b.id
    manager.close()


async def test_compaction_empties_the_journal(tmp_path: Path) -> None:
    manager = ApprovalManager()
    pending = PendingFile(tmp_path / "pending-approvals.json")
    a = _ask(manager, "echo a")
    pending.append([pending.entry(a)])
    assert pending.journal_bytes > 0
    pending.write(pending.encode([a]))
    assert pending.journal.read_bytes() == b"" and pending.journal_bytes == 0
    assert _ids(pending) == [a.id]
    await asyncio.sleep(0)
    manager.close()


async def test_the_journal_is_made_in_a_private_dir_and_a_symlink_in_its_place_is_refused(
    tmp_path: Path,
) -> None:
    manager = ApprovalManager()
    state = tmp_path / "state"
    pending = PendingFile(state / "pending-approvals.json")
    a = _ask(manager, "echo a")
    pending.append([pending.entry(a)])  # no state dir yet: made 0700, the journal 0600
    assert (state.stat().st_mode & 0o777, pending.journal.stat().st_mode & 0o777) == (0o700, 0o600)
    assert _ids(pending) == [a.id] and pending.problem is None
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    pending.journal.unlink()
    pending.journal.symlink_to(victim)
    pending.append([pending.entry(_ask(manager, "echo b"))])
    assert victim.read_text() == "mine\n"  # nothing written through the link
    assert pending.problem is not None and "not saved" in pending.problem
    manager.close()


async def test_each_coalesced_requester_keeps_its_own_run_on_disk(tmp_path: Path) -> None:
    """A second session asking the same question joins the ask with its own resume data and run: the ask
    stays on disk until every requester's run has started, and a load gives each back."""
    manager = ApprovalManager()
    pending = PendingFile(tmp_path / "pending-approvals.json")
    first, _ = manager.register(
        ApprovalRequest(command="echo x", cwd="/tmp", session_key="k1"), resume={"params": {"s": "k1"}}
    )
    joined, new = manager.register(
        ApprovalRequest(command="echo x", cwd="/tmp", session_key="k2"), resume={"params": {"s": "k2"}}
    )
    assert joined is first and new
    slot = first.slot("k2")
    assert first.slot("k1") is None and slot is not None and slot["resume"] == {"params": {"s": "k2"}}
    manager.resolve(first.id, "allow-once")
    manager.note_run(first, {"sessionId": "a", "status": "completed"})  # the first requester's run is over
    pending.append([pending.entry(first)])
    [stored] = pending.load()
    entry = {"sessionKey": "k2", "nodeApprovalId": None, "resume": {"params": {"s": "k2"}}, "run": None}
    assert stored.joined == [entry]
    manager.note_run(first, {"sessionId": "b", "status": "starting"}, slot)
    pending.append([pending.entry(first)])
    assert [ask.joined[0]["run"]["status"] for ask in pending.load()] == ["starting"]  # may be running
    manager.note_run(first, {"sessionId": "b", "status": "completed"}, slot)
    pending.append([pending.entry(first)])
    assert pending.load() == []  # every requester's run is over: settled
    manager.close()
