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
