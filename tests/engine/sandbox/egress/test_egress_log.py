"""The egress history: a log per principal, read back as one list, newest first."""

from __future__ import annotations

import json
from pathlib import Path

from engine.approvals.history import DecisionLog
from engine.sandbox.egress.log import LOG_DIR, LOG_NAME, EgressLog, encode, file_name
from engine.sandbox.egress.proxy import Connection


def _line(agent: str, name: str, at: int, principal: str | None = None) -> bytes:
    row = Connection(agent, "sbx", name, 443, "CONNECT", "refused", "r", "policy", startedAtMs=at)
    row.principal = agent if principal is None else principal
    return encode(row.to_json())


def test_each_principal_writes_its_own_log_and_reads_merge_newest_first(tmp_path: Path) -> None:
    history = tmp_path / "history"
    # a line of the one shared log earlier versions wrote is still shown
    DecisionLog(history, name=LOG_NAME).write_lines([_line("main", "old.test", 1)])
    log = EgressLog(history)
    log.write_lines([_line("main", "a.test", 10), _line("ops", "b.test", 20), _line("main", "c.test", 30)])
    log.write_lines([_line("ops", "d.test", 40, principal="shared"), _line("x/../y", "e.test", 50)])
    files = sorted(p.name for p in (history / LOG_DIR).iterdir())
    assert files == sorted(["main.jsonl", "ops.jsonl", "shared.jsonl", file_name("x/../y")])
    assert file_name("x/../y").startswith("x-") and "/" not in file_name("x/../y")
    assert [r["name"] for r in log.recent()] == ["e.test", "d.test", "c.test", "b.test", "a.test", "old.test"]
    assert [r["name"] for r in log.recent("main", 2)] == ["c.test", "a.test"]
    assert [r["name"] for r in log.recent("ops")] == ["d.test", "b.test"]  # (the shared sandbox's too)
    main = [json.loads(x) for x in (history / LOG_DIR / "main.jsonl").read_bytes().splitlines()]
    assert [r["name"] for r in main] == ["a.test", "c.test"]
