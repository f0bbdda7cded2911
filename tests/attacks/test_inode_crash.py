"""Issue 27, "Also": after the agent exhausted the inodes of the state dir's filesystem, a crash right after
the approval ran the approved command twice. The session host wrote a session's holder file after spawning
it and went on when it could not; the next gateway, finding no holder file, took the run for one that never
started and started it again. No holder file must mean "never ran": the host creates it before it spawns,
and refuses to spawn when it cannot."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest

from engine.sessions import LocalLauncher, RunSpec, SessionManager
from engine.sessions.host import HOLDERS_DIR, HostLauncher

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs with few inodes")


def _exhaust_inodes(directory: Path) -> None:
    for n in range(100_000):
        try:
            (directory / f"filler-{n}").touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return
    raise AssertionError("the inodes never ran out")


async def test_no_holder_file_means_the_command_never_ran(state_dir: Path, tmp_path: Path) -> None:
    holders = state_dir / HOLDERS_DIR
    holders.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=32,mode=0700", "tmpfs", str(holders)], check=True
    )
    host_pid = 0
    try:
        launcher = HostLauncher(holders, fallback=LocalLauncher())
        manager = SessionManager(state_dir, kill_grace_sec=1.0, launcher=launcher)
        link = await launcher.connect()
        assert link is not None, launcher.problem
        host_pid = link.host_pid
        _exhaust_inodes(holders)  # the agent's doing; the host is up with its socket and log

        ran = tmp_path / "ran"
        sid = manager.new_id()  # as an approval's run names its session before the spawn
        result = await manager.run(RunSpec(command=f"echo once >> {ran}", scope_key="s", session_id=sid))

        # The crash: gateway and host die together; the next gateway asks whether the run ever started.
        os.kill(host_pid, signal.SIGKILL)
        await manager.close()
        after = HostLauncher(holders, fallback=LocalLauncher())
        if after.never_started(sid):
            assert not ran.exists(), "it ran, yet the next gateway would run it again"
            assert result.details["status"] == "failed" and "No space left" in result.text, result.text
    finally:
        with contextlib.suppress(ProcessLookupError):
            if host_pid:
                os.kill(host_pid, signal.SIGKILL)
        subprocess.run(["umount", "-l", str(holders)], check=False)


async def test_without_a_session_host_no_record_means_no_run_either(state_dir: Path, tmp_path: Path) -> None:
    """The same with the inodes gone before the host could start: commands then run as the gateway's own
    children, and they too need their record on disk first."""
    holders = state_dir / HOLDERS_DIR
    holders.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=32,mode=0700", "tmpfs", str(holders)], check=True
    )
    try:
        _exhaust_inodes(holders)
        launcher = HostLauncher(holders, fallback=LocalLauncher())
        manager = SessionManager(state_dir, kill_grace_sec=1.0, launcher=launcher)
        ran = tmp_path / "ran"
        sid = manager.new_id()
        result = await manager.run(RunSpec(command=f"echo once >> {ran}", scope_key="s", session_id=sid))
        assert launcher.link is None  # it could not start: the command went to the fallback, or nowhere
        await manager.close()
        after = HostLauncher(holders, fallback=LocalLauncher())
        if after.never_started(sid):
            assert not ran.exists(), "it ran, yet the next gateway would run it again"
            assert result.details["status"] == "failed" and "No space left" in result.text, result.text
    finally:
        subprocess.run(["umount", "-l", str(holders)], check=False)
