"""Each path cache a policy decision reads (issue 19) sees a change to what it caches at once: a stale answer
would let a retargeted symlink or a moved directory through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import statefs
from engine.commands import which
from engine.commands.allowlist import AllowlistEntry, bare_name_path, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.protected import protected_operand, protected_root
from engine.commands.which import REAL, named_path, real_path
from engine.errors import InvalidInput


def retarget(link: Path, target: Path) -> None:
    """Point `link` at `target` atomically (rename over it), as an attacker racing a check would."""
    tmp = link.with_name(link.name + ".new")
    tmp.symlink_to(target)
    os.replace(tmp, link)


def test_real_path_sees_a_retargeted_directory_link(tmp_path: Path) -> None:
    (tmp_path / "a" / "d").mkdir(parents=True)
    (tmp_path / "b" / "d").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    path = str(tmp_path / "link" / "d" / "f")
    assert real_path(path) == str(tmp_path / "a" / "d" / "f")
    assert path in REAL  # cached (inotify is available here): the next answers come from the cache
    retarget(tmp_path / "link", tmp_path / "b")
    assert real_path(path) == str(tmp_path / "b" / "d" / "f") == os.path.realpath(path)


def test_real_path_sees_links_planted_deep_and_ancestors_moved(tmp_path: Path) -> None:
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    path = str(tmp_path / "x" / "y" / "z" / "w")
    assert real_path(path) == path  # `z` is missing: the name is kept as written
    (tmp_path / "x" / "y" / "z").symlink_to(tmp_path / "elsewhere")  # created below a watched dir
    assert real_path(path) == str(tmp_path / "elsewhere" / "w")
    (tmp_path / "x" / "y" / "z").unlink()
    assert real_path(path) == path
    # An ancestor renamed away and replaced by a link.
    os.rename(tmp_path / "x", tmp_path / "x-old")
    (tmp_path / "x").symlink_to(tmp_path / "elsewhere")
    assert real_path(path) == os.path.realpath(path) == str(tmp_path / "elsewhere" / "y" / "z" / "w")


def test_real_path_never_caches_proc(tmp_path: Path) -> None:
    """/proc changes without inotify events (a process's cwd, its fds): such answers are not kept."""
    assert real_path("/proc/self/cwd") == os.path.realpath("/proc/self/cwd")
    assert "/proc/self/cwd" not in REAL


def test_named_path_sees_a_retargeted_directory_link(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "bin").symlink_to(tmp_path / "a")
    tool = str(tmp_path / "bin" / "tool")
    assert named_path(tool) == str(tmp_path / "a" / "tool")
    assert named_path(tool) == str(tmp_path / "a" / "tool")  # from the cache
    retarget(tmp_path / "bin", tmp_path / "b")
    assert named_path(tool) == str(tmp_path / "b" / "tool")


def test_protected_operand_sees_a_link_retargeted_into_the_state_dir(state_dir: Path, tmp_path: Path) -> None:
    """An allowlisted `cat door/gateway.json` answered once while `door` pointed somewhere harmless must be
    caught as soon as `door` points at the state dir."""
    work = tmp_path / "work"
    (work / "harmless").mkdir(parents=True)
    (work / "door").symlink_to(work / "harmless")
    argv = ("cat", "door/gateway.json")
    assert protected_operand(argv, str(work)) is None
    assert protected_operand(argv, str(work)) is None  # cached directory answer
    retarget(work / "door", state_dir)
    assert protected_operand(argv, str(work)) == "door/gateway.json"
    # The last hop too: a file name that becomes a link into the state dir.
    (work / "harmless" / "notes").write_text("x")
    argv = ("cat", "door2/notes")
    (work / "door2").symlink_to(work / "harmless")
    assert protected_operand(argv, str(work)) is None
    (work / "harmless" / "notes").unlink()
    (work / "harmless" / "notes").symlink_to(state_dir / "gateway.json")
    assert protected_operand(argv, str(work)) == "door2/notes"


def test_protected_root_follows_the_state_dir_env_and_its_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "state").symlink_to(tmp_path / "one")
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "state"))
    assert protected_root() == str(tmp_path / "one")
    retarget(tmp_path / "state", tmp_path / "two")
    assert protected_root() == str(tmp_path / "two")
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "one"))
    assert protected_root() == str(tmp_path / "one")


def test_literal_entry_follows_its_directory_link(tmp_path: Path) -> None:
    """`/…/tools/show` names the file through `tools` as it points now, not as it pointed when the entry was
    first compiled."""
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "show").write_text("#!/bin/sh\n")
        (tmp_path / side / "show").chmod(0o755)
    (tmp_path / "tools").symlink_to(tmp_path / "a")
    entries = [AllowlistEntry(str(tmp_path / "tools" / "show"))]
    command = analyze_command(f"{tmp_path}/a/show x")
    env = {"PATH": "/usr/bin:/bin"}
    assert evaluate_allowlist(command, entries, cwd=str(tmp_path), env=env).satisfied
    retarget(tmp_path / "tools", tmp_path / "b")
    assert not evaluate_allowlist(command, entries, cwd=str(tmp_path), env=env).satisfied
    moved = analyze_command(f"{tmp_path}/b/show x")
    assert evaluate_allowlist(moved, entries, cwd=str(tmp_path), env=env).satisfied


def test_bare_name_path_is_not_a_stale_path_answer(tmp_path: Path) -> None:
    """`approvals allowlist add rg` stores what PATH finds now: a program added, shadowed or removed later
    changes the answer (it used to be lru_cached forever)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    path_var = f"{first}:{second}"
    with pytest.raises(InvalidInput):
        bare_name_path("ehtool", path_var)
    (second / "ehtool").write_text("#!/bin/sh\n")
    (second / "ehtool").chmod(0o755)
    assert bare_name_path("ehtool", path_var) == str(second / "ehtool")
    (first / "ehtool").write_text("#!/bin/sh\n")
    (first / "ehtool").chmod(0o755)
    assert bare_name_path("ehtool", path_var) == str(first / "ehtool")
    (first / "ehtool").unlink()
    (second / "ehtool").unlink()
    with pytest.raises(InvalidInput):
        bare_name_path("ehtool", path_var)


def test_account_home_cache_is_dropped_when_the_passwd_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The account's home is kept per (uid, passwd file stamp): plant a wrong answer for the current stamp,
    change the file, and the real answer comes back."""
    monkeypatch.delenv("OPENCLAW_HOME", raising=False)
    passwd = tmp_path / "passwd"
    passwd.write_text("one\n")
    monkeypatch.setattr(statefs, "PASSWD_FILE", str(passwd))
    real = statefs.home_dir()
    ((key, _),) = statefs._HOMES.items()
    statefs._HOMES[key] = "/stale"
    assert statefs.home_dir() == "/stale"  # the cache answers while the file is unchanged
    passwd.write_text("one\ntwo\n")
    assert statefs.home_dir() == real
    passwd.unlink()
    assert statefs.home_dir() == real  # no file to stamp: never cached
    assert statefs._HOMES == {}


def test_real_path_is_not_cached_when_nothing_can_be_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(which.WATCH, "watch", lambda dirs: False)
    REAL.clear()
    (tmp_path / "d").mkdir()
    assert real_path(str(tmp_path / "d")) == str(tmp_path / "d")
    assert str(tmp_path / "d") not in REAL


def test_a_spent_watch_budget_starts_over_instead_of_caching_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived gateway sees more directories than its inotify budget: the watcher starts over (every
    cached answer dropped) and caching resumes, where it used to stop for good."""
    monkeypatch.setattr(which, "_WATCH_MAX", len(which.WATCH.watched) + 8)
    paths = []
    for n in range(12):
        (tmp_path / f"d{n}").mkdir()
        paths.append(str(tmp_path / f"d{n}" / "f"))
        assert real_path(paths[-1]) == paths[-1]
    generation = which.WATCH.generation
    assert real_path(paths[0]) == paths[0]
    assert paths[0] in REAL and which.WATCH.generation == generation
    # Still correct after the start-over: a change is seen.
    (tmp_path / "elsewhere").mkdir()
    os.rename(tmp_path / "d0", tmp_path / "d0-old")
    (tmp_path / "d0").symlink_to(tmp_path / "elsewhere")
    assert real_path(paths[0]) == str(tmp_path / "elsewhere" / "f")


def test_resolve_sees_a_path_dir_replaced_by_another(tmp_path: Path) -> None:
    """A watch follows its inode: `mv bin bin.old && mkdir bin` leaves the path unwatched unless the cache
    watches it again, and a program planted there afterwards would not be seen (found in issue 19)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path_var = f"{bin_dir}:/usr/bin:/bin"
    assert (
        which.resolve("ls", str(tmp_path), path_var)
        == which.resolve_uncached("ls", str(tmp_path), path_var)[0]
    )
    os.rename(bin_dir, tmp_path / "bin.old")
    bin_dir.mkdir()
    assert (
        which.resolve("ls", str(tmp_path), path_var)
        == which.resolve_uncached("ls", str(tmp_path), path_var)[0]
    )
    planted = bin_dir / "ls"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    assert which.resolve("ls", str(tmp_path), path_var) == (str(planted), str(planted))
