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
