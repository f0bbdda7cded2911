"""The egress history: a log per principal, read back as one list, newest first."""

from __future__ import annotations

import json
from pathlib import Path

from engine.approvals.history import DecisionLog
from engine.sandbox.egress.log import LOG_DIR, LOG_NAME, EgressLog, encode, file_name
from engine.sandbox.egress.proxy import SHARED, Connection


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
    log.write_lines([_line("ops", "d.test", 40, principal=SHARED), _line("x/../y", "e.test", 50)])
    files = sorted(p.name for p in (history / LOG_DIR).glob("*.jsonl"))
    assert files == sorted(["main.jsonl", "ops.jsonl", "@shared.jsonl", file_name("x/../y")])
    assert file_name("x/../y").startswith("#") and "/" not in file_name("x/../y")
    assert [r["name"] for r in log.recent()] == ["e.test", "d.test", "c.test", "b.test", "a.test", "old.test"]
    assert [r["name"] for r in log.recent("main", 2)] == ["c.test", "a.test"]
    assert [r["name"] for r in log.recent("ops")] == ["d.test", "b.test"]  # (the shared sandbox's too)
    main = [json.loads(x) for x in (history / LOG_DIR / "main.jsonl").read_bytes().splitlines()]
    assert [r["name"] for r in main] == ["a.test", "c.test"]


def test_an_agent_named_shared_and_the_shared_scope_keep_apart(tmp_path: Path) -> None:
    """The shared-scope sandbox's principal is no agent id (`scope:` holds a `:`), and its log's name is
    none an agent's can be: an agent called `shared` has its own log, share and label."""
    from engine.principals import valid_name
    from engine.sandbox.egress.proxy import SHARED
    from runner.cli.sandboxtext import format_egress

    assert not valid_name(SHARED)
    assert file_name(SHARED) != file_name("shared") == "shared.jsonl"
    assert file_name(SHARED) not in {file_name("x/../y"), file_name("scope_shared")}
    history = tmp_path / "history"
    log = EgressLog(history)
    log.write_lines([_line("shared", "own.test", 10), _line("ops", "scope.test", 20, principal=SHARED)])
    files = sorted(p.name for p in (history / LOG_DIR).glob("*.jsonl"))
    assert files == sorted(["shared.jsonl", file_name(SHARED)])
    rows = {r["name"]: r for r in log.recent()}
    assert rows["own.test"]["principal"] == "shared" and rows["scope.test"]["principal"] == SHARED
    shown = format_egress([rows["own.test"], rows["scope.test"]])
    assert "agent shared sandbox" in shown and "shared (settings of ops)" in shown


def test_the_shared_scopes_old_log_moves_once(tmp_path: Path) -> None:
    """Earlier versions wrote the shared scope's connections as principal `shared` to `shared.jsonl`, the
    name an agent `shared` now has: the first open moves those files (rotated ones too) to the scope's
    name, and later opens leave the agent's new `shared.jsonl` where it is."""
    from engine.sandbox.egress.proxy import SHARED

    history = tmp_path / "history"
    old = DecisionLog(history / LOG_DIR, name="shared.jsonl", rotate_bytes=4096, keep_files=3)
    for at in range(30):  # enough to rotate: shared.jsonl and shared.jsonl.1
        old.write_lines([_line("ops", f"old{at}.test", at, principal="shared")])
    before = sorted(p.name for p in (history / LOG_DIR).iterdir())
    assert "shared.jsonl.1" in before
    log = EgressLog(history)
    rows = log.recent(limit=1000)  # the first use moves them
    names = sorted(p.name for p in (history / LOG_DIR).iterdir() if not p.name.startswith("."))
    assert names == sorted("@" + name for name in before)
    assert len(rows) == 30 and {r["principal"] for r in rows} == {SHARED}
    log.write_lines([_line("shared", "own.test", 100)])  # the agent `shared`, after the move
    again = EgressLog(history)  # a restart: nothing moves any more
    assert (history / LOG_DIR / "shared.jsonl").exists()
    rows = again.recent(limit=1000)
    assert [r["principal"] for r in rows if r["name"] == "own.test"] == ["shared"]
    assert len(rows) == 31
