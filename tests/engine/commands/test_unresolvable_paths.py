"""A path whose resolution fails (a racer turned a link back into a file between its lstat and readlink)
fails the decision closed: the command misses with a reason naming the path, no OSError escapes."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.commands.allowlist import AllowlistEntry, AllowlistResult, evaluate_allowlist
from engine.commands.analysis import analyze_command

CAT = shutil.which("cat") or "/usr/bin/cat"


def readlink_fails_for(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.readlink of `path` raises EINVAL, as when the link is swapped back to a file after its lstat."""
    real: Callable[..., str] = os.readlink

    def readlink(target: str | os.PathLike[str], *args: object, **kw: object) -> str:
        if os.fspath(target) == str(path):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), os.fspath(target))
        return real(target, *args, **kw)

    monkeypatch.setattr(os, "readlink", readlink)


def decide(command: str, cwd: Path) -> AllowlistResult:
    analysis = analyze_command(command)
    assert analysis.ok, analysis.reason
    entries = [AllowlistEntry(pattern=CAT)]
    return evaluate_allowlist(analysis, entries, cwd=str(cwd), env={"PATH": "/usr/bin:/bin"})


def test_an_operand_link_that_cannot_be_read_misses(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path.resolve() / "w"
    work.mkdir()
    (work / "x").write_text("notes\n")
    (work / "y").symlink_to(work / "x")
    assert decide("cat y", work).satisfied  # the link itself is fine
    readlink_fails_for(work / "y", monkeypatch)
    for command in ("cat y", f"cat {work}/y", "cat --x=y x"):
        result = decide(command, work)
        assert not result.satisfied, command
        reason = result.segments[0].reason or ""
        assert "could not be resolved" in reason and "/y" in reason, reason
    assert decide("cat x", work).satisfied  # only the word that cannot be resolved is judged so


def test_a_cwd_that_cannot_be_resolved_misses(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path.resolve()
    (root / "real").mkdir()
    (root / "here").symlink_to(root / "real")
    readlink_fails_for(root / "here", monkeypatch)
    result = decide("cat x", root / "here")
    assert not result.satisfied
    assert "could not be resolved" in (result.segments[0].reason or "")


def test_a_flood_of_events_never_holds_a_decision_in_the_drain(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A racer renaming in a watched directory makes events as fast as a drain reads them: the drain reads
    a bounded amount, then takes everything as changed (the rest is read next time), never spins (a
    decision of the round-4 G racer test hung there for minutes)."""
    import struct

    from engine.commands import which

    work = tmp_path.resolve()
    which.real_path(str(work))  # the watch is open and has something cached
    watch = which.WATCH
    event = struct.pack("iIII", 1, 0x100, 0, 16) + b"x".ljust(16, b"\0")  # IN_CREATE of `x`

    class Flood:
        reads = 0

        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        def read(self, fd: int, size: int) -> bytes:
            if fd != watch.fd:
                return os.read(fd, size)
            self.reads += 1
            if self.reads > 200:
                raise AssertionError("the drain did not stop")
            return event * (size // len(event))

    class AlwaysReady:
        def poll(self, timeout: int = 0) -> list[tuple[int, int]]:
            return [(watch.fd, 1)]

    flood = Flood()
    monkeypatch.setattr(which, "os", flood)
    monkeypatch.setattr(watch, "poller", AlwaysReady())
    assert watch.changed() is True
    assert 0 < flood.reads <= 64
    assert str(work) not in which.REAL  # everything cached was dropped
