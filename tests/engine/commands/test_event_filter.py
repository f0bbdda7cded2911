"""The path caches drop only on events about what they looked up (issue 31): an event about another name in
a watched directory keeps them, and every change to a looked-up name, a watched directory or a listing is
still seen at once."""

from __future__ import annotations

import os
from pathlib import Path

from engine.commands import which
from engine.commands.protected import protected_operand
from engine.commands.which import REAL, WATCH, real_path, resolve, resolve_key


def test_an_unrelated_name_keeps_the_cache_and_a_looked_up_one_drops_it(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = str(tmp_path / "a" / "f")
    assert real_path(path) == path
    generation = WATCH.generation
    (tmp_path / "scratch").write_text("x")  # a build writing next to the looked-up entry
    (tmp_path / "a" / "other").write_text("x")
    assert real_path(path) == path
    assert WATCH.generation == generation and REAL.get(path) == path  # nothing dropped
    os.rename(tmp_path / "a", tmp_path / "a-old")  # the looked-up name itself
    (tmp_path / "a").symlink_to(tmp_path / "b")
    assert real_path(path) == str(tmp_path / "b" / "f") == os.path.realpath(path)
    assert WATCH.generation != generation


def test_a_missing_name_appearing_is_seen(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    path = str(tmp_path / "new" / "f")
    assert real_path(path) == path
    (tmp_path / "new").symlink_to(tmp_path / "elsewhere")
    assert real_path(path) == str(tmp_path / "elsewhere" / "f")


def test_a_watched_directory_renamed_away_under_a_filtered_parent_is_seen(tmp_path: Path) -> None:
    """A PATH dir is watched for any event; its parent only for the names a real_path looked up there. The
    PATH dir's own name must still count in the parent: its watch followed the old inode away."""
    (tmp_path / "other").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real_path(str(tmp_path / "other" / "x"))  # the parent is watched, filtered to `other`
    path_var = f"{bin_dir}:/usr/bin:/bin"
    assert resolve("tool-31", str(tmp_path), path_var) is None
    os.rename(bin_dir, tmp_path / "bin-old")
    bin_dir.mkdir()
    tool = bin_dir / "tool-31"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert resolve("tool-31", str(tmp_path), path_var) == (str(tool), str(tool))


def test_a_link_planted_in_a_cwd_whose_listing_is_kept_is_caught(state_dir: Path, tmp_path: Path) -> None:
    """The cwd is watched (filtered to the names its resolution looked up) and listed: a new link in it is
    an event about a name nothing looked up, and must still drop the listing."""
    work = tmp_path / "work"
    work.mkdir()
    for n in range(which._LISTING_USES + 2):
        assert protected_operand(("cat", f"f{n}"), str(work)) is None
    assert str(work) in which.LINKS  # listed
    (work / "door").symlink_to(state_dir)
    assert protected_operand(("cat", "door"), str(work)) == "door"


def test_a_directory_operand_is_resolved_through_the_cache_and_sees_a_retarget(
    state_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    for operand in ("sub/", "sub/.", "sub/.."):
        assert protected_operand(("ls", operand), str(work)) is None
    assert f"{work}/sub/." in REAL  # cached: the retarget below must drop it
    os.rename(work / "sub", work / "sub-old")
    (work / "sub").symlink_to(state_dir)
    assert protected_operand(("ls", "sub/"), str(work)) == "sub/"
    assert protected_operand(("ls", "sub/."), str(work)) == "sub/."


def test_a_bare_name_lookup_is_shared_across_cwds_only_for_an_absolute_path(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    absolute = "/usr/bin:/bin"
    assert resolve_key("ls", str(one), absolute) == resolve_key("ls", str(two), absolute)
    assert resolve("ls", str(one), absolute) == resolve("ls", str(two), absolute) is not None
    # An empty entry is the cwd: the same name finds different files in different cwds.
    relative = ":/usr/bin:/bin"
    tool = two / "tool-31b"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert resolve("tool-31b", str(one), relative) is None
    assert resolve("tool-31b", str(two), relative) == (str(tool), str(tool))
    assert resolve("tool-31b", str(one), relative) is None
