"""engine/sessions/events.py caps (text length, number of queues) and paged reads (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.sessions import events as events_mod
from engine.sessions.events import MAX_EVENT_CHARS, SystemEvents
from engine.sessions.spool import EventSpool


def test_a_long_text_is_cut_to_the_cap_and_says_so() -> None:
    events = SystemEvents()
    events.enqueue("agent:a", "x" * (MAX_EVENT_CHARS * 3))
    [text] = events.peek("agent:a")
    assert len(text) <= MAX_EVENT_CHARS and text.endswith("characters cut]")
    events.enqueue("agent:a", "short")
    assert events.peek("agent:a")[-1] == "short"


def test_queues_past_the_cap_drop_the_one_written_longest_ago(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_mod, "MAX_KEYS", 3)
    events = SystemEvents()
    for key in ("a", "b", "c"):
        events.enqueue(key, key)
    events.enqueue("a", "again")  # a is now the most recently written
    events.enqueue("d", "d")
    assert sorted(events.keys()) == ["a", "c", "d"]


def test_pages_cover_the_queue_in_order_and_stay_under_the_byte_cap() -> None:
    events = SystemEvents(max_per_key=50)
    for key in ("k1", "k2"):
        for i in range(50):
            events.enqueue(key, f"{key}-{i}-" + "y" * 900)
    seen: list[tuple[str, str]] = []
    start: int | None = 0
    pages = 0
    while start is not None:
        page, start = events.page(["k1", "k2"], start, max_bytes=10_000)
        assert page and sum(len(t) for _k, t in page) <= 10_000
        seen += page
        pages += 1
    assert pages > 5
    assert [t.split("-y")[0] for _k, t in seen] == [f"{k}-{i}" for k in ("k1", "k2") for i in range(50)]
    assert events.peek("k1")  # reading drains nothing


def test_a_drained_page_removes_exactly_what_it_returned(tmp_path: Path) -> None:
    spool = EventSpool(tmp_path / "events.json")
    events = SystemEvents(spool=spool)
    for i in range(30):
        events.enqueue("k", f"e{i}-" + "z" * 1000)
    got: list[str] = []
    while True:
        page, more = events.page(["k"], 99, drain=True, max_bytes=5_000)
        got += [t.split("-")[0] for _k, t in page]
        if more is None:
            break
        assert more == 0  # a drain always goes on from the front
    assert got == [f"e{i}" for i in range(30)] and events.peek("k") == []
    assert SystemEvents(spool=EventSpool(tmp_path / "events.json")).keys() == []  # persisted drained


def test_one_event_larger_than_a_page_is_still_returned() -> None:
    events = SystemEvents()
    events.enqueue("k", "w" * 3000)
    page, more = events.page(["k"], 0, max_bytes=100)
    assert len(page) == 1 and more is None
