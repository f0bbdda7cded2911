"""The gateway's helpers come only from directories only root can change, never from the inherited PATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import sysbin


def test_a_helper_planted_on_path_is_never_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = tmp_path / "prlimit"
    planted.write_text("#!/bin/sh\ntouch planted\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    found = sysbin.which("prlimit")
    assert found is None or not found.startswith(str(tmp_path))
    assert sysbin.which("definitely-no-such-helper") is None


def test_only_system_dirs_are_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "tool").chmod(0o755)
    monkeypatch.setattr(sysbin, "SYSTEM_PATH", (str(tmp_path),))
    # tmp_path is not root's alone (pytest's tmp dirs are the user's, /tmp is world-writable)
    assert sysbin.which("tool") is None
    monkeypatch.setattr(sysbin, "SYSTEM_PATH", ("/usr/bin", "/bin"))
    assert sysbin.which("sh") is not None


def test_a_root_is_trusted_as_ours_only_when_no_other_account_holds_it(tmp_path: Path) -> None:
    """foreign_hold (the hostWritable judgement): ours under a sticky /tmp passes; another owner, a
    directory above writable by others without sticky, or one above owned by another account refuses."""
    me = os.geteuid()
    other = me + 4242
    root = tmp_path / "work"
    root.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "w").mkdir()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "w").mkdir()
    assert sysbin.foreign_hold_at(str(root), me) is None
    assert sysbin.foreign_hold_at(str(sticky / "w"), me) is None
    assert "writable by other accounts" in (sysbin.foreign_hold_at(str(shared / "w"), me) or "")
    assert f"not this gateway's uid {other}" in (sysbin.foreign_hold_at(str(root), other) or "")
    if me == 0:  # only root can give a directory to another account
        os.chown(tmp_path, other, other)
        assert f"owned by uid {other}" in (sysbin.foreign_hold_at(str(root), me) or "")
    assert sysbin.foreign_hold_at(str(tmp_path / "missing"), me) is not None
