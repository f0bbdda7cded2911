"""Issue 37: `process list` walks the registry's ordered index (a page costs its rows, not a sort of every
session retained). The index follows every add, replace and drop; counts follow `listed`."""

from __future__ import annotations

from pathlib import Path

from engine.sessions.launcher import RunSpec
from engine.sessions.output import SessionOutput
from engine.sessions.registry import Registry, Session


def _session(sid: str, scope: str, started: int, *, listed: bool = True, exited: bool = True) -> Session:
    session = Session(
        id=sid,
        spec=RunSpec(command=f"echo {sid}", scope_key=scope),
        cwd="/",
        output=SessionOutput(None),
        started_at=started,
        backgrounded=listed,
    )
    session.exited = exited
    return session


def test_the_index_follows_adds_replaces_drops_and_listing(tmp_path: Path) -> None:
    reg = Registry()
    for n in range(6):
        reg.add(_session(f"s{n}", "a" if n % 2 else "b", 1000 + n))
    reg.add(_session("fg", "a", 2000, listed=False, exited=False))  # a foreground run: the operator's
    assert [s.id for s in reg.ordered()] == ["fg", "s5", "s4", "s3", "s2", "s1", "s0"]
    assert [s.id for s in reg.ordered("a")] == ["fg", "s5", "s3", "s1"]
    assert reg.listed_count(None) == 7 and reg.listed_count("a") == 3 and reg.listed_count("b") == 3
    assert [s.id for s in reg.ordered("a", after=(-1005, "s5"))] == ["s3", "s1"]

    reg.drop("s3")
    reg.add(_session("s4", "a", 500))  # the same id again: moved, and to another scope
    assert [s.id for s in reg.ordered()] == ["fg", "s5", "s2", "s1", "s0", "s4"]
    assert [s.id for s in reg.ordered("b")] == ["s2", "s0"] and reg.listed_count("b") == 2
    assert reg.listed_count("a") == 3  # s5, s1, s4

    fg = reg.get("fg")
    assert fg is not None
    fg.exited = True  # it ended unlisted: the operator's view stops counting it
    assert reg.listed_count(None) == 5
    fg.retained = True  # kept after all (its output overflowed)
    assert reg.listed_count(None) == 6 and reg.listed_count("a") == 4
    for sid in ("fg", "s5", "s1", "s4", "s2", "s0"):
        reg.drop(sid)
    assert list(reg.ordered()) == [] and list(reg.ordered("a")) == []
    assert reg.listed_count(None) == 0 and reg.listed_count("a") == 0
