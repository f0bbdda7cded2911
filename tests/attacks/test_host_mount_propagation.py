"""A host run's view receives no mount the host makes after the run started (fresh round 10 a): a mount
propagated in keeps its own flags, so the operator's later mount under the read-only home was writable.
Both ways a run starts: the kept view (exechost-hostenter `enter`) and a run's own bwrap (a pinned run,
started by exechost-hostenter `own-pts`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import hostkeeper
from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap


@pytest.fixture
def shared_home(state_dir: Path) -> Iterator[Path]:
    """The home a tmpfs made a shared mount (a systemd host's / is shared), with a `vault` dir in it."""
    home = Path(os.environ["HOME"])
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(home)], check=True)
    vault = home / "vault"
    try:
        subprocess.run(["mount", "--make-shared", str(home)], check=True)
        vault.mkdir()
        yield vault
    finally:
        hostkeeper.stop()
        subprocess.run(["umount", "-l", str(vault)], capture_output=True, check=False)
        subprocess.run(["umount", "-l", str(home)], capture_output=True, check=False)


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts a shared tmpfs home")
@pytest.mark.parametrize("pinned", [False, True], ids=["kept-view", "own-bwrap"])
def test_a_mount_made_after_the_run_started_is_not_in_its_view(
    shared_home: Path, tmp_path: Path, pinned: bool
) -> None:
    if hostkeeper.helper_path() is None:
        pytest.skip("needs exechost-hostenter")
    script = tmp_path / "s.sh"
    script.write_text(f"echo in; read go; echo from-the-run > {shared_home}/planted; ls {shared_home}\n")
    files = [(str(script), script.read_bytes())] if pinned else []
    view = pinned_view(None, files, host=True)
    try:
        argv = view.wrap(["/bin/sh", str(script)])
        assert ("enter" in argv) != pinned and ("own-pts" in argv) == pinned
        run = subprocess.Popen(
            argv, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, pass_fds=view.fds,
        )  # fmt: skip
    finally:
        view.close()
    # the operator mounts their vault under the home once the run is in its view (it says so)
    assert run.stdout is not None and run.stdout.readline() == "in\n"
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(shared_home)], check=True)
    (shared_home / "ready").write_text("")
    out, err = run.communicate("go\n", timeout=60)
    assert not (shared_home / "planted").exists(), (out, err)
    assert "ready" not in out  # the run sees the home's own empty dir, not the vault


@needs_bwrap
def test_the_kept_namespace_is_private_before_any_run_enters_it(state_dir: Path) -> None:
    """bwrap leaves its namespace a slave of the host's: a mount made between the keeper's making and a
    run's entering would arrive with its own flags. The keeper's namespace is sealed private when made
    (exechost-hostenter `seal`): no mount of it has a master or peers (mountinfo's optional fields)."""
    if hostkeeper.helper_path() is None:
        pytest.skip("needs exechost-hostenter")
    pinned_view(None, host=True).close()  # makes the keeper
    try:
        (keeper,) = hostkeeper._keepers.values()
        mountinfo = Path(f"/proc/{keeper.pid}/mountinfo").read_text()
        assert mountinfo and "master:" not in mountinfo and "shared:" not in mountinfo
    finally:
        hostkeeper.stop()
