"""A refused view closes each of its copies' fds exactly once: a second close of a number another thread
had opened meanwhile took that run's fd from under it (bwrap: Can't find source path /proc/self/fd/N)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands import hostoutside, hostview, pinned


def test_a_refused_host_view_closes_each_copy_once(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[int] = []
    real_close = os.close

    def counting_close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    def refused(*_a: object, **_k: object) -> None:
        raise hostoutside.HostViewError("a directory exchanged for a link; refused")

    monkeypatch.setattr(hostview, "own_view_by_fd", refused)  # what a run of its own is given
    monkeypatch.setattr(pinned.os, "close", counting_close)
    with pytest.raises(hostoutside.HostViewError):
        pinned.pinned_view(None, [("/tmp/x/Makefile", b"all:\n")], host=True)
    assert closed and len(closed) == len(set(closed)), closed
