"""The on-disk decision log (issue 20): private fsync'd lines, bounded rotation, torn lines tolerated."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine.approvals.history import LOG_NAME, DecisionLog, HistoryError, decision_line, encode_entry


def _view(i: int, agent: str = "main", command: str = "echo hi") -> dict:
    return {
        "id": f"{i:08d}-0000-4000-8000-000000000000",
        "status": "allow-once",
        "resolvedBy": "console",
        "resolvedAtMs": 1000 + i,
        "createdAtMs": 900 + i,
        "command": command,
        "agentId": agent,
        "cwd": "/tmp",
    }


def test_lines_are_private_and_merged_newest_first(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path / "history")
    log.record_decision(_view(1))
    log.record_decision(_view(2, agent="ops"))
    log.record_run(_view(1)["id"], {"sessionId": "s1", "status": "running", "exitCode": None})
    log.record_session_end({"sessionId": "s1", "status": "failed", "exitCode": 3, "endedAt": 5})
    assert stat.S_IMODE(os.stat(tmp_path / "history").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(log.path_of("main")).st_mode) == 0o600
    rows = log.entries()
    assert [r.agent_id for r in rows] == ["ops", "main"]
    run = rows[1].run
    assert run is not None and run["status"] == "failed" and run["exitCode"] == 3 and run["endedAt"] == 5
    assert [r.agent_id for r in log.entries("main")] == ["main"]
    # A fresh reader (the next gateway) sees the same.
    assert [r.id for r in DecisionLog(tmp_path / "history").entries()] == [r.id for r in rows]
    assert log.find(_view(2)["id"][:8]) is not None


def test_a_torn_last_line_is_skipped_and_closed_by_the_next_append(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path / "h")
    log.record_decision(_view(1))
    with open(log.path_of("main"), "ab") as fh:  # a crash in the middle of a line
        fh.write(json.dumps({"kind": "decision", "v": 1, **_view(2)}).encode()[:40])
    assert [r.id for r in DecisionLog(tmp_path / "h").entries()] == [_view(1)["id"]]
    fresh = DecisionLog(tmp_path / "h")  # a restarted gateway appends after the torn line
    fresh.record_decision(_view(3))
    assert [r.id for r in fresh.entries()] == [_view(3)["id"], _view(1)["id"]]
    assert log.path_of("main").read_bytes().endswith(b"\n")


def test_rotation_keeps_a_bounded_number_of_files(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path / "h", rotate_bytes=4096, keep_files=3)
    for i in range(200):
        log.record_decision(_view(i, command="x" * 200))
    names = sorted(p.name for p in (tmp_path / "h").iterdir())
    main = log.path_of("main").name  # (main's own log: decisions.a.main.jsonl)
    assert names == [main, f"{main}.1", f"{main}.2"]
    assert all(p.stat().st_size <= 4096 for p in (tmp_path / "h").iterdir())
    rows = log.entries()
    assert rows[0].id == _view(199)["id"]  # the newest survive, the oldest rotated out
    assert _view(0)["id"] not in {r.id for r in rows}
    assert 0 < len(rows) < 200


def test_a_symlinked_log_is_refused(tmp_path: Path) -> None:
    (tmp_path / "h").mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    log = DecisionLog(tmp_path / "h")
    log.path_of("main").symlink_to(target)
    with pytest.raises(HistoryError, match="symlink"):
        log.record_decision(_view(1))
    assert log.problem is not None and "symlink" in log.problem
    assert target.read_text() == "keep\n"


def test_a_log_restored_with_looser_bits_is_tightened_by_the_next_append(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path / "history")
    log.record_decision(_view(1))
    path = log.path_of("main")
    os.chmod(path, 0o644)
    log.record_decision(_view(2))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [r.id for r in log.entries()] == [_view(2)["id"], _view(1)["id"]]


def test_each_agent_rotates_only_its_own_log_and_reads_merge_them_all(tmp_path: Path) -> None:
    """One agent's lines (each may keep a 64 KiB command) never push another's decisions off the disk."""
    log = DecisionLog(tmp_path / "h", rotate_bytes=4096, keep_files=2)
    log.record_decision(_view(1, agent="ops"))
    log.record_decision({**_view(2, agent=""), "resolvedBy": "operator"})  # ownerless: the operator's file
    log.record_decision(_view(3, agent="a b/../c"))  # no plain name: a digest names its file
    log.record_run(_view(1)["id"], {"sessionId": "s1", "status": "starting"})
    for i in range(10, 200):
        log.write_lines([encode_entry(decision_line({**_view(i), "command": "x" * 1000}))])
    files = {p.name for p in (tmp_path / "h").iterdir()}
    assert {LOG_NAME, "decisions.a.ops.jsonl", "decisions.a.main.jsonl", "decisions.a.main.jsonl.1"} <= files
    assert not any(".." in n or " " in n for n in files) and any(n.startswith("decisions.h.") for n in files)
    ops_lines = log.path_of("ops").read_text().splitlines()  # its run line went with its decision
    assert [json.loads(line)["kind"] for line in ops_lines] == ["decision", "run"]
    kept = {r.id: r for r in DecisionLog(tmp_path / "h", keep_files=2).entries()}  # the next gateway's read
    assert {_view(1)["id"], _view(2)["id"], _view(3)["id"], _view(199)["id"]} <= set(kept)
    assert _view(10)["id"] not in kept  # main's own oldest rotated out of main's own log
    assert kept[_view(1)["id"]].run == {"sessionId": "s1", "status": "starting"}
    assert [r.id for r in log.entries("ops")] == [_view(1)["id"]]
    assert log.find(_view(3)["id"]) is not None and log.find(_view(10)["id"]) is None
    # A restarted gateway (index at start) files a run of an approval decided before it with its agent.
    fresh = DecisionLog(tmp_path / "h", keep_files=2)
    fresh.index()
    fresh.record_run(_view(1)["id"], {"sessionId": "s1", "status": "running"})
    assert len(fresh.path_of("ops").read_text().splitlines()) == 3
