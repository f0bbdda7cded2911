"""The state-file primitives every store builds on: modes, atomicity, symlink refusal."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine import statefs


def test_atomic_write_modes(tmp_path: Path) -> None:
    target = tmp_path / "d" / "f.json"
    statefs.atomic_write(target, "{}")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(target.parent).st_mode) == 0o700
    assert target.read_text() == "{}"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_refuses_symlinked_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "d" / "f.json"
    link.parent.mkdir()
    link.symlink_to(victim)
    with pytest.raises(statefs.StateFileError):
        statefs.atomic_write(link, "evil")
    with pytest.raises(statefs.StateFileError):
        statefs.read_text(link)
    assert victim.read_text() == "keep"


def test_refuses_symlinked_dir(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(statefs.StateFileError):
        statefs.ensure_private_dir(tmp_path / "link")


def test_state_dir_from_env(state_dir: Path) -> None:
    assert statefs.state_dir() == state_dir
    assert statefs.state_dir({"HOME": "/x"}).name == ".openclaw"
