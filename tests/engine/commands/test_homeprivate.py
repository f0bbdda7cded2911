"""engine.commands.homeprivate: what it hides by the property, its cache of listings (every change of
what it caches: an entry added, a directory's own mode, a file's mode once read afresh) and its bounds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands import homeprivate


@pytest.fixture
def home(tmp_path: Path) -> Path:
    homeprivate.clear()
    h = tmp_path / "h"
    (h / "pub" / "deep").mkdir(parents=True)
    (h / "pub" / "deep" / "ok").write_text("x")
    (h / "pub" / "deep" / "tok").write_text("x")
    (h / "pub" / "deep" / "tok").chmod(0o600)
    (h / ".gnupg").mkdir(mode=0o700)
    (h / ".gnupg" / "k").write_text("x")
    return h


def _find(home: Path, **kw: object) -> homeprivate.Found:
    return homeprivate.find(str(home), [], [], (str(home),), **kw)  # type: ignore[arg-type]


def test_private_by_mode_not_by_name(home: Path) -> None:
    found = _find(home)
    assert found.dirs == [str(home / ".gnupg")]
    assert found.files == [str(home / "pub" / "deep" / "tok")]
    assert not found.past_budget


def test_the_cache_reads_only_what_changed(home: Path) -> None:
    _find(home)
    before = homeprivate.reads[0]
    again = _find(home)
    assert homeprivate.reads[0] == before  # nothing changed: no directory listed again
    (home / "pub" / "deep" / "new-secret").write_text("x")
    (home / "pub" / "deep" / "new-secret").chmod(0o600)
    found = _find(home)
    assert homeprivate.reads[0] == before + 1  # only the directory that changed
    assert str(home / "pub" / "deep" / "new-secret") in found.files
    assert again.files != found.files


def test_a_directory_made_private_later_is_hidden_by_its_own_stat(home: Path) -> None:
    _find(home)
    (home / "pub" / "deep").chmod(0o700)  # pub's listing is unchanged: deep's own stat says it
    found = _find(home)
    assert str(home / "pub" / "deep") in found.dirs
    assert str(home / "pub" / "deep" / "tok") not in found.files  # below a hidden dir: not listed


def test_a_file_made_private_in_place_is_seen_when_the_listing_is_read_afresh(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's mode is cached with its directory's listing: `chmod 600` in an unchanged directory is not
    seen until the listing is read afresh (REREAD_AFTER), which then finds it."""
    _find(home)
    (home / "pub" / "deep" / "ok").chmod(0o600)
    assert str(home / "pub" / "deep" / "ok") not in _find(home).files  # the documented window
    monkeypatch.setattr(homeprivate, "REREAD_AFTER", -1.0)
    assert str(home / "pub" / "deep" / "ok") in _find(home).files


def test_kept_paths_in_a_private_dir_show_and_their_siblings_hide_whatever_their_mode(home: Path) -> None:
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config").chmod(0o700)
    (home / ".config" / "git" / "config").write_text("x")
    (home / ".config" / "git" / "other").write_text("x")  # 0644, but below a private dir
    (home / ".config" / "chromium").mkdir(mode=0o755)
    kept = [str(home / ".config" / "git" / "config")]
    found = homeprivate.find(str(home), kept, [], (str(home),))
    assert str(home / ".config") not in found.dirs
    assert str(home / ".config" / "chromium") in found.dirs
    assert str(home / ".config" / "git" / "other") in found.files
    assert kept[0] not in found.files


def test_past_the_walk_budget_what_is_not_read_is_hidden(home: Path) -> None:
    found = _find(home, budget=1)
    assert found.past_budget
    assert str(home / "pub" / "deep") in found.dirs or str(home / "pub") in found.dirs


def test_past_the_mounts_their_directories_are_hidden(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(homeprivate, "MAX_MOUNTS", 3)
    many = home / "many"
    many.mkdir()
    for n in range(5):
        (many / f"t{n}").write_text("x")
        (many / f"t{n}").chmod(0o600)
    found = _find(home)
    assert str(many) in found.dirs  # five files, one cover
    assert not any(f.startswith(str(many) + os.sep) for f in found.files)
    assert len(found.dirs) + len(found.files) <= 3 and found.past_budget
    monkeypatch.setattr(homeprivate, "MAX_MOUNTS", 2)
    found = _find(home)  # one more: ~/pub/deep's file climbs to ~/pub (the home is never hidden)
    assert str(home / "pub") in found.dirs
    assert sorted(found.dirs) == [str(home / ".gnupg"), str(many), str(home / "pub")]


def test_a_link_to_a_public_dir_outside_is_walked_on_a_budget_of_its_own(home: Path, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    (disk / "sub").mkdir(parents=True)
    (disk / "sub" / "key").write_text("x")
    (disk / "sub" / "key").chmod(0o600)
    (home / "d").symlink_to(disk)
    (home / "share").symlink_to("/usr/share")  # a large tree: its own budget, never the home's
    found = _find(home)
    assert str(disk / "sub" / "key") in found.files
    assert str(home / ".gnupg") in found.dirs and not found.past_budget


def test_view_ops_cover_outermost_first_and_nothing_below_a_cover() -> None:
    found = homeprivate.Found(dirs=["/h/a/b", "/h/a"], files=["/h/a/f", "/h/g"])
    assert homeprivate.view_ops("/e", found) == [
        "--tmpfs", "/h/a", "--remount-ro", "/h/a", "--ro-bind", "/e", "/h/g",
    ]  # fmt: skip


def test_a_large_home_is_not_answered_on_an_event_loop(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not homeprivate.known(str(home))  # never walked: the first walk is a thread's
    _find(home)
    assert homeprivate.known(str(home))
    monkeypatch.setattr(homeprivate, "LOOP_DIRS", 2)
    assert not homeprivate.known(str(home))  # 4 directories stat'ed per view: a thread's too


def test_kept_paths_are_judged_by_their_own_mode_privacy_wins(home: Path) -> None:
    """Fresh round 14 c: a trusted file others may not read is hidden; a trusted dir is walked, shown with
    only what its own mode lets others read (a private one: every entry hidden); a public kept dir below a
    private one is reached and judged by its own mode; a shown dir (`never`: a hostWritable one) is not
    walked."""
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local").chmod(0o700)
    (home / ".local" / "bin" / "tool").write_text("x")
    (home / ".local" / "bin" / "deploy").write_text("x")
    (home / ".local" / "bin" / "deploy").chmod(0o700)
    (home / "bin").mkdir(mode=0o700)
    (home / "bin" / "tool").write_text("x")  # 0644, but in a private kept dir
    (home / "bin" / "sub").mkdir()
    (home / ".gitconfig.local").write_text("x")
    (home / ".gitconfig.local").chmod(0o600)
    (home / "work").mkdir(mode=0o700)
    (home / "work" / "f").write_text("x")
    (home / "work" / "f").chmod(0o600)
    kept_files = [str(home / ".gitconfig.local")]
    kept_dirs = [str(home / ".local" / "bin"), str(home / "bin")]
    found = homeprivate.find(str(home), kept_files, kept_dirs, (str(home), str(home / "work")))
    assert str(home / ".gitconfig.local") in found.files
    assert str(home / ".local" / "bin" / "deploy") in found.files
    assert str(home / ".local" / "bin" / "tool") not in found.files
    assert str(home / ".local" / "bin") not in found.dirs
    assert str(home / "bin" / "tool") in found.files and str(home / "bin" / "sub") in found.dirs
    assert str(home / "bin") not in found.dirs
    assert not any(p.startswith(str(home / "work")) for p in [*found.files, *found.dirs])
