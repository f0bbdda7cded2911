"""Who besides this account may change a path: one walk up its directories, judged by owner and mode."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from engine import pathtrust


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
    assert pathtrust.foreign_hold_at(str(root), me) is None
    assert pathtrust.foreign_hold_at(str(sticky / "w"), me) is None
    assert "writable by other accounts" in (pathtrust.foreign_hold_at(str(shared / "w"), me) or "")
    assert f"not this gateway's uid {other}" in (pathtrust.foreign_hold_at(str(root), other) or "")
    if me == 0:  # only root can give a directory to another account
        os.chown(tmp_path, other, other)
        assert f"owned by uid {other}" in (pathtrust.foreign_hold_at(str(root), me) or "")
    assert pathtrust.foreign_hold_at(str(tmp_path / "missing"), me) is not None


def test_the_path_helpers_are_root_s_alone(tmp_path: Path) -> None:
    """only_root_changes: a system dir passes; a dir of this account, or a missing one, does not (a sticky
    dir is not forgiven there: a PATH dir is root's alone)."""
    assert pathtrust.only_root_changes("/usr/bin")
    assert not pathtrust.only_root_changes("/tmp")  # sticky, world-writable
    assert not pathtrust.only_root_changes(str(tmp_path))  # below the sticky /tmp
    assert not pathtrust.only_root_changes(str(tmp_path / "missing"))


def test_a_state_dir_is_judged_more_strictly_below_a_sticky_dir(tmp_path: Path) -> None:
    """strict_hold (a state dir's judgement) and foreign_hold (a bound root's) share the rule: root's or
    ours, no group/other write unless sticky. They differ where documented: strict_hold also judges the dir's
    own mode, takes a dir yet to be made, and refuses a sticky shared dir right below a sticky one (the
    entry below a sticky dir must be no one else's to write); foreign_hold takes that one."""
    me = os.geteuid()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    inner = sticky / "inner"
    inner.mkdir()
    os.chmod(inner, 0o1777)
    (inner / "s").mkdir(mode=0o700)
    assert pathtrust.foreign_hold_at(str(inner / "s"), me) is None
    assert "writable by its group or by others (mode 1777)" in pathtrust.strict_hold(str(inner / "s"), me)
    (sticky / "s").mkdir(mode=0o700)
    assert pathtrust.strict_hold(str(sticky / "s"), me) == ""
    assert pathtrust.strict_hold(str(sticky / "new" / "deeper"), me) == ""  # yet to be made
    assert pathtrust.foreign_hold_at(str(sticky / "new"), me) is not None  # a root must be present
    os.chmod(sticky / "s", 0o770)
    assert pathtrust.foreign_hold_at(str(sticky / "s"), me) is None  # its own mode is the operator's choice
    assert "writable by its group" in pathtrust.strict_hold(str(sticky / "s"), me)


def test_a_link_on_the_way_is_judged_as_the_link(tmp_path: Path) -> None:
    """chain_to never follows a link: one left in a path (never resolved) is judged as what it is, a name
    anyone may write (lrwxrwxrwx), so it fails every judgement."""
    me = os.geteuid()
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "w").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert pathtrust.foreign_hold_at(str(tmp_path / "real" / "w"), me) is None
    assert "link is writable by other accounts" in (
        pathtrust.foreign_hold_at(str(tmp_path / "link"), me, holder=True) or ""
    )
    assert "not a directory" in pathtrust.strict_hold(str(tmp_path / "link"), me)


def _named_tree(tmp_path: Path) -> tuple[Path, Path]:
    os.chmod(tmp_path, 0o755)
    team, mine = tmp_path / "team", tmp_path / "mine"
    team.mkdir(mode=0o755)
    mine.mkdir(mode=0o700)
    (mine / "f").write_text("x")
    os.chmod(mine / "f", 0o600)
    os.symlink(mine, team / "cfg")
    return team, mine


def test_named_hold_judges_the_dir_holding_a_link_on_the_way(tmp_path: Path) -> None:
    team, _mine = _named_tree(tmp_path)
    named = str(team / "cfg" / "f")
    assert pathtrust.named_hold(named, os.geteuid()) == ""
    os.chmod(team, 0o775)  # a team dir another account may write: it may re-point the link
    assert f"{team} is writable by other accounts" in pathtrust.named_hold(named, os.geteuid())


def test_named_hold_judges_what_is_named_and_the_fd_opened(tmp_path: Path) -> None:
    team, mine = _named_tree(tmp_path)
    named = str(team / "cfg" / "f")
    os.chmod(mine / "f", 0o620)
    assert "writable by its group" in pathtrust.named_hold(named, os.geteuid())
    os.chmod(mine / "f", 0o600)
    assert "changed while it was judged" in pathtrust.named_hold(named, os.geteuid(), os.stat(team))


def test_named_hold_judges_a_socket_by_its_dirs_and_owner_not_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent socket's write bits say who may connect to it; who may replace it is its dir's to say."""
    team, mine = _named_tree(tmp_path)
    monkeypatch.chdir(mine)  # bound by a short relative name: tmp_path may pass the 107 bytes of sun_path
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("s")
        os.chmod(mine / "s", 0o777)
        named = str(team / "cfg" / "s")
        assert pathtrust.named_hold(named, os.geteuid()) == ""
        if os.geteuid() == 0:  # (only root can give it to another account)
            os.chown(mine / "s", 65534, 65534)
            assert "is owned by uid 65534" in pathtrust.named_hold(named, 0)
            os.chown(mine / "s", 0, 0)
        os.chmod(team, 0o775)  # another account may re-point the link at its own socket
        assert f"{team} is writable by other accounts" in pathtrust.named_hold(named, os.geteuid())
