"""A decision line is never dropped and never carries every requester (issue 27: an agent joining one ask
from hundreds of session keys made its decision line too long for the reader, erasing the decision)."""

from __future__ import annotations

from pathlib import Path

from engine.approvals.history import MAX_LINE_BYTES, DecisionLog, decision_line, encode_entry
from engine.approvals.request import SHOWN_REQUESTERS


def _view(**extra: object) -> dict[str, object]:
    requesters = [{"sessionKey": f"{'k' * 240}{i}", "host": "gateway"} for i in range(1000)]
    base = {"id": "a" * 36, "status": "deny", "command": "echo hi", "agentId": "main", "count": 1000}
    return {**base, "requesterCount": 1000, "requesters": requesters, **extra}


def test_decision_line_names_a_few_requesters_and_the_count() -> None:
    line = decision_line(_view())
    assert len(line["requesters"]) == SHOWN_REQUESTERS and line["requesterCount"] == 1000


def test_history_line_is_never_dropped(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path / "history")
    huge = "x" * (MAX_LINE_BYTES * 2)
    # Too long even with the command cut: the essentials are kept, the decision is still read back.
    entry = {**decision_line(_view(command=huge)), "agentReason": huge, "cwd": huge}
    line = encode_entry(entry)
    assert len(line) < MAX_LINE_BYTES
    log.write_lines([line])
    (got,) = log.entries()
    assert got.id == "a" * 36 and got.view()["status"] == "deny"
