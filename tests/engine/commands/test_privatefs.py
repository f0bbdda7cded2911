"""An agent's private dirs are a capped filesystem of their own (engine.commands.privatefs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.commands import hostprivate, privatefs

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts tmpfs")


def test_the_caps_are_a_share_of_the_state_dirs_filesystem_within_bounds(tmp_path: Path) -> None:
    nbytes, inodes = privatefs.caps(str(tmp_path))
    st = os.statvfs(tmp_path)
    assert 1 << 20 <= nbytes <= min(privatefs.MAX_BYTES, max(1 << 20, st.f_blocks * st.f_frsize // 8))
    assert 64 <= inodes <= privatefs.MAX_INODES


@needs_root
def test_an_agents_private_dirs_are_one_capped_filesystem_kept_across_runs(tmp_path: Path) -> None:
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,nr_inodes=800", "tmpfs", str(state)], check=True)
    try:
        private = (str(tmp_path / "a"), str(tmp_path / "b"))
        for dest in private:
            os.mkdir(dest)
        binds = hostprivate.binds(str(state), "main", private)
        top = hostprivate.agent_dir(str(state), "main")
        assert os.path.ismount(top) and all(s.startswith(top + "/") for s, _d in binds)
        (Path(binds[0][0]) / "kept").write_text("x")
        assert hostprivate.binds(str(state), "main", private) == binds  # the same mount, found again
        assert (Path(binds[0][0]) / "kept").read_text() == "x"
        usage = shutil.disk_usage(top)
        assert usage.total == 2 << 20  # an eighth of the state dir's 16 MiB
        assert os.statvfs(top).f_files == 100  # and of its inodes
        other = hostprivate.binds(str(state), "ops", private)
        assert os.stat(other[0][0]).st_dev != os.stat(binds[0][0]).st_dev  # another agent's is its own
        with pytest.raises(OSError), open(Path(binds[0][0]) / "big", "wb") as f:
            f.write(b"\0" * (3 << 20))
            f.flush()
        assert shutil.disk_usage(state).free > 8 << 20  # none of it on the state dir's disk
    finally:
        subprocess.run(["umount", "-R", "-l", str(state)], check=False)


@needs_root
def test_detach_all_leaves_a_state_dir_that_can_be_removed(tmp_path: Path) -> None:
    """Whoever removes a state dir (the demo as it quits) detaches its agents' mounts first: rmtree cannot
    remove a mountpoint, and the demo's root was left behind."""
    state = tmp_path / "with space"
    state.mkdir(mode=0o700)
    hostprivate.binds(str(state), "main", (str(tmp_path),))
    hostprivate.binds(str(state), "ops", (str(tmp_path),))
    assert len(privatefs.mounted(str(state))) == 2
    assert privatefs.detach_all(str(state)) == 2
    assert privatefs.mounted(str(state)) == []
    shutil.rmtree(state)
    assert not state.exists()
