"""A host view whose source vanishes between listing and opening (a socket closed, a container's dir removed
as another run ends) is made again from what is there now; one that keeps vanishing is refused, and a name
exchanged for a link is refused at once (tests/attacks/test_host_view_bindfd.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands import hostoutside, hostview
from tests.helpers.bwrap import needs_bwrap


def _close(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)


@needs_bwrap
def test_a_source_gone_after_listing_makes_the_view_again(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = hostview.view_args
    calls: list[int] = []

    def vanishing(*args: object, **kwargs: object) -> list[str]:
        ops = made(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(len(ops))
        if len(calls) == 1:
            gone = tmp_path / "gone"
            gone.mkdir()
            ops += ["--ro-bind", str(gone), "/opt/gone"]
            gone.rmdir()  # listed, then removed before the view opens its sources
        return ops

    monkeypatch.setattr(hostview, "view_args", vanishing)
    ops, fds = hostview.view_by_fd(str(state_dir))
    _close(fds)
    assert len(calls) == 2
    assert "/opt/gone" not in ops


@needs_bwrap
def test_a_source_that_keeps_vanishing_is_refused(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = hostview.view_args
    calls: list[int] = []

    def always_gone(*args: object, **kwargs: object) -> list[str]:
        calls.append(1)
        return [*made(*args, **kwargs), "--ro-bind", str(tmp_path / "never"), "/opt/never"]  # type: ignore[arg-type]

    monkeypatch.setattr(hostview, "view_args", always_gone)
    with pytest.raises(hostoutside.HostViewError, match="kept vanishing"):
        hostview.view_by_fd(str(state_dir))
    assert len(calls) == hostview.VIEW_ATTEMPTS
