"""The decision history's id index: `find` of an id nobody decided (or an ambiguous prefix) is answered
without reading the files, and the index follows every append and rotation (what it caches changes)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.history import DecisionLog, encode_entry


def _line(approval_id: str, agent: str = "main") -> bytes:
    return encode_entry({"kind": "decision", "v": 1, "id": approval_id, "status": "deny", "agentId": agent})


def test_the_index_answers_unknown_ids_without_a_read_and_follows_appends_and_rotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = DecisionLog(tmp_path / "h", rotate_bytes=4096, keep_files=2)
    log.write_lines([_line("abc-1"), _line("abd-2")])
    log.index()
    reads: list[int] = []
    real = DecisionLog.lines

    def counted(self: DecisionLog) -> Iterable[dict[str, Any]]:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(DecisionLog, "lines", counted)
    assert log.find("zz0001") is None and log.find("ab") is None  # unknown; ambiguous prefix
    assert reads == []
    entry = log.find("ABC")  # a unique prefix (any case): read
    assert entry is not None and entry.id == "abc-1" and reads == [1]
    # An append reaches the index at once (no rebuild: no read until it is looked up).
    log.write_lines([_line("fresh-3")])
    assert reads == [1] and log.might_hold("fresh") and not log.might_hold("stale")
    assert reads == [1]
    found = log.find("fresh-3")
    assert found is not None and found.id == "fresh-3"
    # Rotation of main's log drops its oldest file (keep_files=2): its ids leave the index, rebuilt.
    big = "x" * 1500
    for n in range(8):
        log.write_lines(
            [
                encode_entry(
                    {
                        "kind": "decision",
                        "v": 1,
                        "id": f"r{n}",
                        "status": "deny",
                        "agentId": "main",
                        "cmd": big,
                    }
                )
            ]
        )
    reads.clear()
    assert not log.might_hold("abc-1") and reads == [1]  # rebuilt once, after the rotation
    assert log.might_hold("r7") and reads == [1]
