"""engine/sandbox/beneath: the primitives every host write into a sandbox-writable tree goes through."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sandbox import beneath


@pytest.fixture(params=["openat2", "per-component"])
def root(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[int]:
    if request.param == "openat2" and not beneath.has_openat2():
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(beneath, "use_openat2", request.param == "openat2")
    (tmp_path / "box").mkdir()
    fd = os.open(tmp_path / "box", os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_a_link_at_any_depth_is_refused_and_named(root: int, tmp_path: Path) -> None:
    box, outside = tmp_path / "box", tmp_path / "outside"
    (outside / "b" / "c").mkdir(parents=True)
    (box / "a").mkdir()
    (box / "a" / "b").symlink_to(outside / "b")
    for create in (None, 0o755):
        with pytest.raises(beneath.Refused) as got:
            beneath.open_dir(root, "a/b/c", create=create)
        assert got.value.rel == "a/b" and "symlink" in got.value.why
    assert sorted(os.listdir(outside / "b")) == ["c"]  # nothing created through the link
    with beneath.opened_dir(root, "a/new/deeper", create=0o750) as fd:
        assert stat.S_ISDIR(os.fstat(fd).st_mode)
    assert (box / "a" / "new" / "deeper").is_dir()


@pytest.mark.parametrize("rel", ["../x", "/etc", "a/../../x", "a/\0"])
def test_only_plain_relative_paths(root: int, rel: str) -> None:
    with pytest.raises(beneath.Refused):
        beneath.open_dir(root, rel, create=0o755)


def test_writes_never_go_through_a_link(root: int, tmp_path: Path) -> None:
    box, victim = tmp_path / "box", tmp_path / "victim"
    victim.write_text("keep")
    victim.chmod(0o600)
    (box / "planted").symlink_to(victim)
    with pytest.raises(FileExistsError):
        beneath.write_file(root, "planted", b"new")  # a new file only: the link stays, untouched
    beneath.write_file(root, "planted", b"new", replace=True, times_ns=(5, 7_000_000_000))
    assert victim.read_text() == "keep" and not (box / "planted").is_symlink()
    assert (box / "planted").read_bytes() == b"new" and (box / "planted").stat().st_mtime_ns == 7_000_000_000
    assert sorted(os.listdir(box)) == ["planted"]  # no temp file left behind
    (box / "link2").symlink_to(victim)
    with pytest.raises(beneath.Refused, match="symlink"):
        beneath.chmod(root, "link2", 0o666)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    beneath.chown(root, "link2", -1, os.getgid())  # changes the link itself (lchown), if anything
    beneath.rename(root, "link2", "moved")
    assert (box / "moved").is_symlink() and victim.read_text() == "keep"
    beneath.unlink(root, "moved")
    assert victim.exists() and not (box / "moved").exists()
    with pytest.raises(beneath.Refused):
        beneath.write_file(root, "../escape", b"x")
