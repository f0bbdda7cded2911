"""The session host's own files on a nearly full disk: a short write is continued, never taken for the
whole file, and a claim (`<id>.json` before the spawn) that could not be written leaves no empty file
behind (the next gateway would take it for a run that may have started, and never start it)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from engine.sessions import host_io as hio
from engine.sessions.host_main import Host


def _disk(monkeypatch: pytest.MonkeyPatch, room: int, short: int = 0) -> None:
    """os.write as a disk with `room` bytes left: each write takes at most `short` bytes (0: all that fits),
    then ENOSPC."""
    left = [room]
    real = os.write

    def write(fd: int, data: bytes | memoryview) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = min(len(data), left[0], short or len(data))
        left[0] -= n
        return real(fd, bytes(data[:n]))

    monkeypatch.setattr(hio.os, "write", write)


def test_a_short_write_is_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _disk(monkeypatch, room=1 << 20, short=7)  # every write short, the disk not full
    data = json.dumps({"sessionId": "s1", "command": "x" * 500}).encode()
    for atomic in (False, True):
        hio.write_file(f"m{atomic}.json", data, atomic=atomic)
        assert (tmp_path / f"m{atomic}.json").read_bytes() == data


def test_a_full_disk_fails_the_write_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept.json").write_bytes(b'{"old": true}')
    _disk(monkeypatch, room=10, short=4)
    with pytest.raises(OSError) as raised:
        hio.write_file("kept.json", b'{"new": "x"}' * 10, atomic=True)
    assert raised.value.errno == errno.ENOSPC
    assert (tmp_path / "kept.json").read_bytes() == b'{"old": true}'  # the old file stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]  # no temp file left
    # The claim before a spawn: refused, and no empty or truncated `<id>.json` tells a next gateway that
    # this run may have started.
    with pytest.raises(OSError, match="not started"):
        Host._claim("s42", {"sessionId": "s42", "command": "true"})
    assert not (tmp_path / "s42.json").exists()
