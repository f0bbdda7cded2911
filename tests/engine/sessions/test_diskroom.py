"""An output log stops short of the state dir's filesystem's reserve, so the gateway's own records always
have room (engine.sessions.diskroom)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sessions import diskroom
from engine.sessions.output import SessionOutput

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "fs"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=200", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_the_reserve_is_a_share_of_the_filesystem_within_bounds() -> None:
    st = os.statvfs("/")
    room, _inodes = diskroom.reserve(st)
    assert diskroom.RESERVE_MIN <= room <= diskroom.RESERVE_MAX


@needs_root
def test_a_flood_of_output_leaves_the_reserve_free(small_fs: Path) -> None:
    out = SessionOutput(small_fs / "s.log")
    room, _inodes = diskroom.reserve(os.statvfs(small_fs))
    chunk = b"x" * (1 << 20)  # as the session host's reader hands them over
    for _ in range(8):
        out.feed("stdout", chunk)
    free = shutil.disk_usage(small_fs).free
    assert out.log_capped and room <= free < room + 4 * diskroom.SLACK, (room, free)
    assert "chars not kept" in out.full_text_sync()  # the gap says so; the ring keeps the end
    # another session's log stops there too (a new one is made only with a piece's room beyond it)
    other = SessionOutput(small_fs / "t.log")
    for _ in range(4):
        other.feed("stdout", chunk)
    assert shutil.disk_usage(small_fs).free >= room
    out.close()
    other.close()


@needs_root
def test_a_log_with_room_keeps_every_byte(small_fs: Path) -> None:
    out = SessionOutput(small_fs / "s.log")
    data = b"y" * (3 << 19)  # 1.5 MiB: well within a 4 MiB filesystem's room
    out.feed("stdout", data[: 1 << 20])
    out.feed("stdout", data[1 << 20 :])
    out.finish()
    assert not out.log_capped and out.full_text_sync() == data.decode()
    out.close()
