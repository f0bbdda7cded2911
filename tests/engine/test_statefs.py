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


def test_atomic_write_into_a_shared_dir_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "bin"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    statefs.atomic_write(shared / "tool.sh", "echo hi\n", 0o755, private_dir=False)
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(shared / "tool.sh").st_mode) == 0o755
    (tmp_path / "elsewhere").write_text("secret")
    (shared / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(statefs.StateFileError):
        statefs.atomic_write(shared / "link", "clobbered", private_dir=False)
    assert (tmp_path / "elsewhere").read_text() == "secret"


def test_try_lock_is_held_until_its_fd_closes(tmp_path: Path) -> None:
    target = tmp_path / "d" / "thing.sock"
    first = statefs.try_lock(target)
    assert first is not None
    assert statefs.try_lock(target) is None  # flock is per open file: a second open cannot take it
    os.close(first)
    again = statefs.try_lock(target)
    assert again is not None
    os.close(again)
    assert stat.S_IMODE(os.stat(tmp_path / "d" / "thing.sock.lock").st_mode) == 0o600


@pytest.mark.parametrize(
    ("started_with", "kept"), [(0o000, 0o022), (0o002, 0o022), (0o077, 0o077), (0o027, 0o027)]
)
def test_a_daemon_umask_is_never_looser_than_022(started_with: int, kept: int) -> None:
    """Whoever starts a daemon (an agent's client autostarting the gateway with umask 0) gives its runs no
    write for other accounts; an operator's stricter umask is kept as it is."""
    old = os.umask(started_with)
    try:
        assert statefs.settle_umask() == kept
        assert os.umask(old) == kept
    finally:
        os.umask(old)
