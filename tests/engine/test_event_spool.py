"""Undelivered system events on disk (issue 20): reloaded by the next SystemEvents, bounded, never corrupt."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from engine.sessions.events import SystemEvents
from engine.sessions.spool import MAX_BYTES, EventSpool


def test_events_not_drained_are_queued_again_by_the_next_owner(tmp_path: Path) -> None:
    spool = tmp_path / "state" / "events.json"
    first = SystemEvents(spool=EventSpool(spool))
    first.enqueue("agent:main", "Exec finished (one)")
    first.enqueue("agent:main", "Exec finished (two)")
    first.enqueue("s2", "Exec denied (three)")
    assert first.drain("s2") == ["Exec denied (three)"]
    assert stat.S_IMODE(os.stat(spool).st_mode) == 0o600
    second = SystemEvents(spool=EventSpool(spool))  # a new gateway after a crash
    assert second.peek("agent:main") == ["Exec finished (one)", "Exec finished (two)"]
    assert second.peek("s2") == []  # drained means delivered: not queued twice
    assert second.drain("agent:main") == ["Exec finished (one)", "Exec finished (two)"]
    assert SystemEvents(spool=EventSpool(spool)).keys() == []


def test_the_spool_is_bounded(tmp_path: Path) -> None:
    spool = tmp_path / "events.json"
    events = SystemEvents(max_per_key=10_000, spool=EventSpool(spool))
    for i in range(160):
        events.enqueue("agent:main", f"{i} " + "x" * 4000)
    assert spool.stat().st_size <= MAX_BYTES
    kept = SystemEvents(max_per_key=10_000, spool=EventSpool(spool)).peek("agent:main")
    assert kept and kept[-1].startswith("159 ")  # the newest survive


def test_an_unreadable_spool_is_kept_aside_not_replaced(tmp_path: Path) -> None:
    spool = tmp_path / "events.json"
    spool.write_text('{"version": 1, "queues": ')
    holder = EventSpool(spool)
    events = SystemEvents(spool=holder)
    assert events.keys() == [] and holder.problem and "unreadable" in holder.problem
    assert (tmp_path / "events.json.bad").read_text() == '{"version": 1, "queues": '
    events.enqueue("k", "t")
    assert json.loads(spool.read_text())["queues"] == {"k": ["t"]}


def test_the_spools_shares_are_counted_in_bytes_as_written(tmp_path: Path) -> None:
    """Over the cap, the owner holding the most bytes on disk gives way, whatever its character count:
    main's 4-byte characters and its control characters (written as 6-byte escapes) hold more bytes than
    ops's longer ASCII events, so main's oldest go, ops keeps every event, and main keeps its newest."""
    spool = tmp_path / "events.json"
    events = SystemEvents(max_per_key=10_000, spool=EventSpool(spool))
    for n in range(300):
        events.enqueue(f"agent:ops:k{n % 3}", f"{n} " + "o" * 400)  # ~122,000 characters and bytes
    for n in range(200):  # 100,000 characters, ~480 KB as written
        events.enqueue(f"agent:main:e{n % 2}", f"{n} " + "\U0001f600" * 300 + "\x01" * 200)
    spooled = json.loads(spool.read_text())["queues"]
    assert spool.stat().st_size <= MAX_BYTES
    assert sum(len(v) for k, v in spooled.items() if k.startswith("agent:ops:")) == 300
    mine = [t for k, v in spooled.items() if k.startswith("agent:main:") for t in v]
    assert 0 < len(mine) < 200 and any(t.startswith("199 ") for t in mine)
