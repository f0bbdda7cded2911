"""A path that is not UTF-8 in an ask (fresh round 17 b): one exact, showable form in the record, exact
resume data in the journal, and files an older gateway wrote (surrogatepass bytes) read back, never lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from engine import jsontext, ostext
from engine.approvals.durable import PendingFile
from engine.approvals.history import DecisionLog, encode_entry
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import NOT_UTF8, ApprovalRequest
from engine.approvals.socket.wire import PromptRequest
from engine.approvals.store import ApprovalsStore, Use
from engine.sessions.events import SystemEvents
from engine.sessions.spool import EventSpool

ODD = os.fsdecode(b"/w/\xff/p")  # what os.path.realpath gives for a directory named b'\xff'
ODD_SHOWN = "$'/w/\\xff/p'"


@given(st.binary(max_size=64))
def test_shown_is_utf8_and_reads_back_to_the_very_bytes(raw: bytes) -> None:
    text = os.fsdecode(raw)
    shown = ostext.shown(text)
    shown.encode("utf-8")  # never raises
    assert ostext.exact(shown) == text
    assert os.fsencode(ostext.exact(shown)) == raw
    assert ostext.shown(shown) == shown  # once shown, text stays as it is


def test_two_trees_that_differ_in_one_byte_are_shown_apart() -> None:
    """U+FFFD would show b'\\xff' and b'\\xfe' alike: the shown form names each byte."""
    a, b = ostext.shown(os.fsdecode(b"/w/\xff/p")), ostext.shown(os.fsdecode(b"/w/\xfe/p"))
    assert a == ODD_SHOWN and b == "$'/w/\\xfe/p'"
    assert ostext.shown(os.fsdecode(b"/w/a'b\\\xff")) == "$'/w/a\\'b\\\\\\xff'"


def test_the_request_owns_its_text_whoever_builds_it() -> None:
    request = ApprovalRequest(
        command="./p",
        cwd=os.fsdecode(b"/w/\xff"),
        resolved_path=ODD,
        decision_json={"segments": [{"resolvedPath": ODD, "argv": ["./p"]}], ODD: [ODD]},
        warnings=(f"names {ODD}",),
    )
    text = json.dumps(request.to_json(), ensure_ascii=False)
    text.encode("utf-8")
    assert request.resolved_path == ODD_SHOWN and request.cwd == "$'/w/\\xff'"
    assert request.decision_json["segments"][0]["resolvedPath"] == request.resolved_path
    assert request.warnings == ("$'names /w/\\xff/p'", NOT_UTF8)
    # a copy (the coalescing key) is built again: the same text, the warning once
    assert request.question().warnings == request.warnings
    clean = ApprovalRequest(command="ls", cwd="/tmp")
    assert clean.warnings == () and clean.question() == clean


async def test_a_journal_line_an_older_gateway_wrote_of_a_surrogate_is_read_and_loses_no_other(
    tmp_path: Path,
) -> None:
    manager = ApprovalManager()
    pending = PendingFile(tmp_path / "pending-approvals.json")
    a, _ = manager.register(ApprovalRequest(command="echo a", cwd="/tmp"), resume={"cwd": "/tmp"})
    b, _ = manager.register(ApprovalRequest(command="echo b", cwd="/tmp"), resume={"cwd": ODD})
    c, _ = manager.register(ApprovalRequest(command="echo c", cwd="/tmp"), resume={"cwd": "/tmp"})
    older_ask = json.loads(pending.entry(b))["ask"]
    older_ask["request"]["resolved_path"] = ODD  # raw: an older gateway kept the surrogate in the record
    older = json.dumps({"ask": older_ask}, ensure_ascii=False)
    with pending.journal.open("wb") as fh:
        fh.write(pending.entry(a) + b"\n")
        fh.write(older.encode("utf-8", "surrogatepass") + b"\n")  # as an older gateway wrote it: ED B3 BF
        fh.write(b'{"ask": {"id": "x", "request": \xff}}\n')  # and a line no UTF-8 decode reads
        fh.write(pending.entry(c) + b"\n")
    stored = {ask.id: ask for ask in pending.load()}
    assert list(stored) == [a.id, b.id, c.id], pending.problem
    assert stored[b.id].request.resolved_path == ODD_SHOWN
    assert stored[b.id].resume == {"cwd": ODD}  # machine data: exact
    assert "unreadable" in (pending.problem or "")
    manager.close()


async def test_the_journal_keeps_resume_data_exact_in_utf8(tmp_path: Path) -> None:
    manager = ApprovalManager()
    pending = PendingFile(tmp_path / "pending-approvals.json")
    record, _ = manager.register(
        ApprovalRequest(command="./p", cwd="/w", resolved_path=ODD), resume={"cwd": ODD}
    )
    line = pending.entry(record)
    line.decode("utf-8")  # valid UTF-8 (strict)
    pending.append([line])
    pending.save([record])
    pending.path.read_bytes().decode("utf-8")
    (back,) = PendingFile(pending.path).load()
    assert back.resume == {"cwd": ODD} and back.request == record.request
    manager.close()


def test_a_history_line_an_older_gateway_wrote_of_a_surrogate_is_shown(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path / "h")
    log.write_lines(
        [encode_entry({"kind": "decision", "v": 1, "id": "a1", "status": "deny", "agentId": "main"})]
    )
    older = json.dumps({"kind": "decision", "v": 1, "id": "b2", "status": "deny", "resolvedPath": ODD})
    with (tmp_path / "h" / "decisions.jsonl").open("ab") as fh:
        fh.write(older.encode("utf-8", "surrogatepass") + b"\n")
        fh.write(older.replace("b2", "c3").encode("ascii") + b"\n")  # the `\udcff` escape form
    rows = {e.id: e.view() for e in log.entries()}
    assert set(rows) == {"a1", "b2", "c3"}
    assert rows["b2"]["resolvedPath"] == rows["c3"]["resolvedPath"] == ODD_SHOWN
    for row in rows.values():
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    # and a line written now of such text (a run's) is UTF-8 that reads back shown
    line = encode_entry({"kind": "decision", "v": 1, "id": "d4", "status": "deny", "cwd": ODD})
    line.decode("utf-8")
    assert json.loads(line)["cwd"] == ODD_SHOWN


def test_the_approvals_file_stamps_and_keeps_a_non_utf8_path(tmp_path: Path) -> None:
    """The operator's own tree (an agent's writable file is never allowlisted without an ask) may hold a
    name that is not UTF-8: the use stamp of a run of it, and an allow-always pattern naming it, are
    written (the stamp failed before, every stamp of its batch with it); the pattern reads back exact."""
    store = ApprovalsStore(tmp_path / "exec-approvals.json")
    (entry,) = store.persist_allow_always("main", [ODD])
    store.record_uses([Use("main", entry.id, "p", ODD, 1)])
    store.path.read_bytes().decode("utf-8")  # valid UTF-8 (strict)
    (back,) = ApprovalsStore(store.path).load().agents["main"].allowlist
    assert back.pattern == ODD  # matched against the path the OS gives: exact
    assert back.last_resolved_path == ODD_SHOWN  # shown to the operator: the record's form


def test_an_event_naming_a_non_utf8_path_is_kept_and_loses_no_other_at_restart(tmp_path: Path) -> None:
    """An event's text may name the agent's path (`approval-stale: the working directory is now …`): the
    spool was written surrogatepass and read strict, so the next gateway moved it aside, every agent's
    undelivered events with it. The event is kept, shown in the record's form; an older spool is read."""
    spool = EventSpool(tmp_path / "events.json")
    events = SystemEvents(spool=spool)
    events.enqueue("agent:ops:k", "Exec finished: ops's result")
    events.enqueue("agent:main:k", f"Exec denied (approval-stale): the working directory is now {ODD}")
    spool.path.read_bytes().decode("utf-8")  # valid UTF-8 (strict)
    again = SystemEvents(spool=EventSpool(spool.path))
    assert again.peek("agent:ops:k") == ["Exec finished: ops's result"]
    (odd,) = again.peek("agent:main:k")
    assert odd.startswith("$'Exec denied") and "\\xff" in odd
    assert os.fsencode(ostext.exact(odd)).endswith(b"/w/\xff/p")
    # a spool an older gateway wrote (ED B3 BF): read, every queue kept
    older = json.dumps({"version": 1, "queues": {"agent:ops:k": ["kept"], "agent:main:k": [ODD]}})
    spool.path.write_bytes(older.encode("utf-8", "surrogatepass"))
    restored = SystemEvents(spool=EventSpool(spool.path))
    assert restored.peek("agent:ops:k") == ["kept"] and restored.peek("agent:main:k") == [ODD_SHOWN]


def test_an_exec_frames_ask_relayed_from_exec_approvals_sock_is_shown_exactly() -> None:
    """The console's exec-approvals.sock asks this host's decider about paths it resolved; relayed to the
    gateway (`approvals.relay`), a lone surrogate became U+FFFD in the frame (two trees shown alike)."""
    prompt = PromptRequest(id="r", command="./p", cwd=os.fsdecode(b"/w/\xff"), resolved_path=ODD)
    assert prompt.resolved_path == ODD_SHOWN and prompt.cwd == "$'/w/\\xff'"
    sent = jsontext.loads_wire(jsontext.dumps_wire({"resolvedPath": prompt.resolved_path, "cwd": prompt.cwd}))
    assert os.fsencode(ostext.exact(sent["resolvedPath"])) == b"/w/\xff/p"
