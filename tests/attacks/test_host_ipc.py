"""Every host run has an IPC namespace of its own (fresh round 10 a: a SysV segment one agent's run made
was attached by every other run): in the kept view (exechost-hostenter `enter`) and in a run's own bwrap
(no helper). Each run's is its own, ended with it (an inode number is then reused: not compared)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands import hostkeeper
from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap


def _ipc_of_a_run(cwd: Path) -> str:
    view = pinned_view(None, host=True)
    try:
        argv = view.wrap(["/bin/sh", "-c", "readlink /proc/self/ns/ipc"])
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@needs_bwrap
@pytest.mark.parametrize("helper", [True, False], ids=["kept-view", "own-bwrap"])
def test_each_host_run_has_an_ipc_namespace_of_its_own(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helper: bool
) -> None:
    if not helper:
        monkeypatch.setenv(hostkeeper.HELPER_ENV, "")
    elif hostkeeper.helper_path() is None:
        pytest.skip("needs exechost-hostenter")
    host = os.readlink("/proc/self/ns/ipc")
    run = _ipc_of_a_run(tmp_path)
    assert run.startswith("ipc:[") and run != host
