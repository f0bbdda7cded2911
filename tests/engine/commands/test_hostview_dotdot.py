"""A git include with `..` in it (hosttrust.walked_dirs): every directory the kernel walks before a `..` is
kept as a directory in the view (made empty when missing, bound read-only), so the file git reads is the
one the view keeps, whatever link a host run would plant on the way (fresh round 8 r)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.commands import hostoutside, hosttrust, hostview

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_each_directory_walked_before_a_dotdot_is_named_where_the_kernel_finds_it() -> None:
    paths = ["/r/team/sub/../inc", "/r/a/b/c/../../inc", "/r/plain/inc", "/r/x/../y/../z"]
    assert hosttrust.walked_dirs(paths) == ["/r/team/sub", "/r/a/b/c", "/r/a/b", "/r/x", "/r/y"]


def _bound_ro(args: list[str], path: str) -> bool:
    return any(args[i : i + 3] == ["--ro-bind", path, path] for i in range(len(args) - 2))


def test_a_missing_walked_directory_is_made_and_kept_read_only(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    team = state_dir.parent / "team"
    team.mkdir()
    (home / ".gitconfig").write_text(f"[include]\n\tpath = {team}/sub/../a/b/../../inc\n")
    args = hostview.view_args(str(state_dir))
    for walked in (team / "sub", team / "a" / "b", team / "a"):
        assert walked.is_dir() and not walked.is_symlink(), walked
        assert _bound_ro(args, str(walked)), (walked, args)
    # the file git reads, found as the kernel finds it now that nothing on the way is missing
    inc = team / "inc"
    assert os.path.realpath(f"{team}/sub/../a/b/../../inc") == str(inc)
    assert inc.is_file() and _bound_ro(args, str(inc))
    assert str(team / "sub") in hosttrust.protected(str(state_dir))


def test_a_hostwritable_dir_holding_a_walked_directory_is_refused(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / "proj").mkdir()
    (home / ".gitconfig").write_text(f"[include]\n\tpath = {home}/proj/sub/../inc\n")
    outside = hostoutside.Outside(writable=("~/proj",))
    with pytest.raises(hostoutside.HostViewError, match="hostWritable names ~/proj"):
        hostview.view_args(str(state_dir), outside=outside)
