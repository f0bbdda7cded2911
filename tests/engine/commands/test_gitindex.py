"""engine.commands.gitindex reads the gitlinks git itself lists, in every index version, or refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.commands.gitindex import UnreadableIndex, gitlinks

ID = ["-c", "user.email=a@b", "-c", "user.name=a"]


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *ID, *args], cwd=repo, check=True, capture_output=True).stdout


def _gitlinks_by_git(repo: Path) -> list[str]:
    out = _git(repo, "ls-files", "-s", "-z")
    return [e.split(b"\t", 1)[1].decode() for e in out.split(b"\0") if e.startswith(b"160000 ")]


def _repo(tmp_path: Path, fmt: str, *, intent_to_add: bool) -> Path:
    repo = tmp_path / fmt
    subprocess.run(["git", "init", "-q", f"--object-format={fmt}", str(repo)], check=True)
    for i in range(40):
        d = repo / f"dir{i % 4}" / f"deeper{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"a_file_with_a_longer_name_{i}.txt").write_text(str(i))
    _git(repo, "add", "-A")
    oid = "1" * (64 if fmt == "sha256" else 40)
    for i in range(5):
        _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{oid},dir{i}/deeper1/sub{i}")
    if intent_to_add:  # an extended-flags entry: version 3 at least
        (repo / "ita.txt").write_text("x")
        _git(repo, "add", "-N", "ita.txt")
    return repo


@pytest.mark.parametrize("fmt", ["sha1", "sha256"])
@pytest.mark.parametrize(("version", "intent_to_add"), [(2, False), (3, True), (4, False), (4, True)])
def test_gitlinks_are_the_ones_git_lists(tmp_path: Path, fmt: str, version: int, intent_to_add: bool) -> None:
    repo = _repo(tmp_path, fmt, intent_to_add=intent_to_add)
    _git(repo, "update-index", "--index-version", str(version))
    index = repo / ".git" / "index"
    assert int.from_bytes(index.read_bytes()[4:8], "big") == version
    want = _gitlinks_by_git(repo)
    assert len(want) == 5
    assert gitlinks(str(index), 32 if fmt == "sha256" else 20) == want


def test_a_split_index_is_refused_not_half_read(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "sha1", intent_to_add=False)
    _git(repo, "update-index", "--split-index")
    with pytest.raises(UnreadableIndex, match="split index"):
        gitlinks(str(repo / ".git" / "index"))


def test_damaged_or_foreign_indexes_are_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "sha1", intent_to_add=False)
    index = repo / ".git" / "index"
    data = index.read_bytes()
    for bad in (data[: len(data) // 2], b"DIRC\x00\x00\x00\x09" + data[8:], b"XXXX" + data[4:]):
        index.write_bytes(bad)
        with pytest.raises(UnreadableIndex):
            gitlinks(str(index))
    assert gitlinks(str(repo / "no-such-index")) == []


def test_the_cache_follows_the_bytes(tmp_path: Path) -> None:
    """The answer is kept per sha256 of the index: a new gitlink is new bytes, so a new answer."""
    repo = _repo(tmp_path, "sha1", intent_to_add=False)
    index = str(repo / ".git" / "index")
    assert len(gitlinks(index)) == 5
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'2' * 40},late/sub")
    assert "late/sub" in gitlinks(index)
    _git(repo, "update-index", "--force-remove", "late/sub")
    assert "late/sub" not in gitlinks(index)
