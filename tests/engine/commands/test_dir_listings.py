"""The operand check answers "is this name a symlink?" from a watched directory listing (issue 19) instead of
one lstat per operand: every change to the directory must be seen by the next decision."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from engine.commands import which
from engine.commands.protected import protected_operand
from engine.commands.which import LINKS, REAL, WATCH, real_path, resolve


def listed(work: Path, state_dir: Path) -> None:
    """Ask about enough names in `work` that its listing is read and kept."""
    for n in range(which._LISTING_USES + 1):
        assert protected_operand(("cat", f"probe{n}"), str(work)) is None
    assert str(work) in LINKS


def reference(word: str, cwd: Path, state_dir: Path) -> str | None:
    """The answer with no cache at all."""
    real = os.path.realpath(os.path.join(cwd, word))
    root = os.path.realpath(state_dir)
    return word if real == root or real.startswith(root + "/") else None


def test_a_link_planted_in_a_listed_directory_is_caught(state_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes").write_text("x")
    listed(work, state_dir)
    assert protected_operand(("cat", "token"), str(work)) is None
    (work / "token").symlink_to(state_dir / "gateway.json")  # created
    assert protected_operand(("cat", "token"), str(work)) == "token"
    listed(work, state_dir)  # listed again, the link in it: answered from the listing
    assert "token" in LINKS[str(work)]
    assert protected_operand(("cat", "token"), str(work)) == "token"
    assert protected_operand(("cat", "-n", "token"), str(work)) == "token"
    tmp = work / "notes.new"
    tmp.symlink_to(state_dir)
    os.replace(tmp, work / "notes")  # renamed over a regular file
    assert protected_operand(("cat", "notes"), str(work)) == "notes"
    assert protected_operand(("grep", "-r", "--file=notes"), str(work)) == "notes"
    (work / "notes").unlink()
    (work / "notes").write_text("x")  # a link replaced by a file: no longer inside
    assert protected_operand(("cat", "notes"), str(work)) is None
    assert protected_operand(("cat", "token"), str(work)) == "token"


def test_a_directory_that_appears_later_is_listed_again(state_dir: Path, tmp_path: Path) -> None:
    """A missing directory holds no links; creating it (and a link in it) is seen."""
    work = tmp_path / "work"
    work.mkdir()
    for n in range(which._LISTING_USES + 1):
        assert protected_operand(("cat", f"sub/f{n}"), str(work)) is None
    assert LINKS.get(str(work / "sub")) == frozenset()
    (work / "sub").mkdir()
    (work / "sub" / "f0").symlink_to(state_dir)
    assert protected_operand(("cat", "sub/f0"), str(work)) == "sub/f0"
    # The missing directory's stand-in: a regular file where a directory would be.
    (work / "file").write_text("x")
    for n in range(which._LISTING_USES + 1):
        assert protected_operand(("cat", f"file/f{n}"), str(work)) is None
    (work / "file").unlink()
    (work / "file").symlink_to(state_dir)
    assert protected_operand(("cat", "file/f0"), str(work)) == "file/f0"


def test_a_listed_directory_renamed_away_and_replaced(state_dir: Path, tmp_path: Path) -> None:
    """A watch follows its inode: after `mv d d.old && mkdir d` the new `d` must be watched anew."""
    work = tmp_path / "work"
    (work / "d").mkdir(parents=True)
    # Keep `work` itself out of the resolution caches' watches: only `work/d` is watched, for its listing.
    cwd = work / "d"
    listed(cwd, state_dir)
    os.rename(cwd, work / "d.old")
    cwd.mkdir()
    assert protected_operand(("cat", "x"), str(cwd)) is None
    listed(cwd, state_dir)
    (cwd / "x").symlink_to(state_dir)
    assert protected_operand(("cat", "x"), str(cwd)) == "x"
    # The old inode's watch still reports; its events must not drop anything wrongly kept.
    (work / "d.old" / "y").symlink_to(state_dir)
    assert protected_operand(("cat", "d.old/y"), str(work)) == "d.old/y"


def test_events_in_a_listed_directory_drop_only_its_listing(state_dir: Path, tmp_path: Path) -> None:
    """A busy directory an operand named (`/tmp`) must not empty the PATH caches on every file written."""
    busy = tmp_path / "busy"
    busy.mkdir()
    listed(busy, state_dir)
    path = str(tmp_path / "x" / "y")
    real_path(path)
    assert path in REAL
    generation = WATCH.generation
    (busy / "scratch").write_text("x")
    assert protected_operand(("cat", "scratch"), str(busy)) is None
    assert WATCH.generation == generation and path in REAL  # only the listing was dropped
    (busy / "scratch2").symlink_to(state_dir)
    assert protected_operand(("cat", "scratch2"), str(busy)) == "scratch2"


def test_a_listed_directory_used_by_a_path_lookup_drops_everything(state_dir: Path, tmp_path: Path) -> None:
    """The same directory (here under a second name, as `/bin` is `/usr/bin`) watched for a cached PATH
    answer: a program planted there must be seen, so its events must drop everything, not just the listing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "alias").symlink_to(bin_dir)
    path_var = f"{tmp_path / 'alias'}:/usr/bin:/bin"
    listed(bin_dir, state_dir)  # watched for its listing first
    assert resolve("ls", str(tmp_path), path_var) == which.resolve_uncached("ls", str(tmp_path), path_var)[0]
    planted = bin_dir / "ls"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    assert resolve("ls", str(tmp_path), path_var) == (str(tmp_path / "alias" / "ls"), str(planted))
    # And the other order: watched for a PATH answer first, then listed.
    other = tmp_path / "bin2"
    other.mkdir()
    path_var = f"{other}:/usr/bin:/bin"
    resolve("cat", str(tmp_path), path_var)
    listed(other, state_dir)
    planted = other / "cat"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    assert resolve("cat", str(tmp_path), path_var) == (str(planted), str(planted))


def test_big_and_pseudo_directories_are_not_listed(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(which, "_LISTING_MAX", 3)
    big = tmp_path / "big"
    big.mkdir()
    for n in range(5):
        (big / f"f{n}").write_text("x")
    for n in range(which._LISTING_USES + 2):
        assert protected_operand(("cat", f"g{n}"), str(big)) is None
    assert str(big) not in LINKS
    (big / "g0").symlink_to(state_dir)
    assert protected_operand(("cat", "g0"), str(big)) == "g0"
    for _ in range(which._LISTING_USES + 1):
        protected_operand(("cat", "/proc/self/cwd"), str(tmp_path))
    assert "/proc/self" not in LINKS and "/proc" not in LINKS


def test_listings_agree_with_no_cache_through_random_changes(state_dir: Path, tmp_path: Path) -> None:
    """Random creations, links (harmless or into the state dir), renames over, removals and directory swaps,
    each followed by checks of every name: the cached answers equal the uncached ones every time."""
    rng = random.Random(19)
    work = tmp_path / "work"
    (work / "d").mkdir(parents=True)
    names = [f"n{i}" for i in range(6)]
    for _ in range(300):
        where = work / rng.choice(["", "d"])
        name = rng.choice(names)
        target = where / name
        action = rng.randrange(6)
        try:
            if action == 0:
                target.write_text("x")
            elif action == 1:
                target.symlink_to(state_dir / "gateway.json")
            elif action == 2:
                target.symlink_to(tmp_path)
            elif action == 3:
                tmp = where / "tmp-link"
                tmp.symlink_to(rng.choice([state_dir, tmp_path]))
                os.replace(tmp, target)
            elif action == 4:
                target.unlink()
            elif (work / "d").is_dir() and not (work / "d").is_symlink():
                os.rename(work / "d", work / f"old{rng.randrange(10**9)}")
                (work / "d").mkdir()
        except (FileExistsError, FileNotFoundError, IsADirectoryError, OSError):
            pass
        for base in (work, work / "d"):
            for word in [*names, *(f"d/{n}" for n in names)]:
                assert protected_operand(("cat", word), str(base)) == reference(word, base, state_dir), (
                    base,
                    word,
                )
