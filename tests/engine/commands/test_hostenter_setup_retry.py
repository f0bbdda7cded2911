"""A run's own bwrap whose setup failed (nothing of the run started) is started again by own-pts, and only
bwrap's own setup words are ever taken for such a failure: the command's bytes, its exit and its terminal
stay as they were."""

from __future__ import annotations

import os
import pty
import shutil
import signal
import subprocess
from pathlib import Path

from engine.commands import hostkeeper
from engine.sessions import host_io
from tests.helpers.bwrap import needs_bwrap

pytestmark = needs_bwrap
SETUP_FAILURE = "bwrap: Can't find source path /proc/self/fd/97: No such file or directory"


def _flaky(tmp_path: Path, failures: int) -> tuple[Path, Path]:
    """A bwrap that fails its setup, as bwrap does, on its first `failures` calls, then is the real one."""
    real = shutil.which("bwrap")
    assert real is not None
    tries = tmp_path / "tries"
    flaky = tmp_path / "bwrap"
    flaky.write_text(
        "#!/bin/sh\n"
        f"echo try >> {tries}\n"
        f'if [ "$(wc -l < {tries})" -le {failures} ]; then\n'
        f'  echo "{SETUP_FAILURE}" >&2; exit 1\n'
        "fi\n"
        f'exec {real} "$@"\n'
    )
    flaky.chmod(0o755)
    return flaky, tries


def _argv(bwrap: Path, script: str) -> list[str]:
    helper = hostkeeper.helper_path()
    assert helper is not None
    return [
        *host_io.VIEW_HEAD,
        helper,
        "own-pts",
        "-",
        "--",
        str(bwrap),
        "--dev-bind",
        "/",
        "/",
        "--unshare-pid",
        "--as-pid-1",
        "--proc",
        "/proc",
        "--",
        helper,
        *host_io.STATUS_WORDS,
        "--",
        helper,
        "check-cwd",
        "-",
        "--",
        "/bin/sh",
        "-c",
        script,
    ]


def _run(argv: list[str], **kwargs: object) -> tuple[subprocess.Popen[bytes], int | None]:
    argv, status_read, status_write = host_io.status_pipe(argv)
    assert status_read is not None and status_write is not None
    proc = subprocess.Popen(argv, pass_fds=(status_write,), **kwargs)  # type: ignore[call-overload]
    os.close(status_write)
    return proc, status_read


def test_a_run_whose_bwrap_failed_its_setup_is_started_again_and_shows_only_its_own_bytes(
    tmp_path: Path,
) -> None:
    flaky, tries = _flaky(tmp_path, failures=2)
    proc, status = _run(
        _argv(flaky, "echo out; echo err >&2; exit 3"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = proc.communicate(timeout=60)
    assert (out, err, proc.returncode) == (b"out\n", b"err\n", 3)
    assert host_io.status_exit(status, proc.args, proc.returncode) == (3, None)
    assert tries.read_text().split() == ["try"] * 3


def test_a_bwrap_that_never_gets_through_its_setup_is_tried_six_times_and_says_why_once(
    tmp_path: Path,
) -> None:
    flaky, tries = _flaky(tmp_path, failures=10)
    proc, status = _run(_argv(flaky, "echo ran"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert (out, err.decode(), proc.returncode) == (b"", SETUP_FAILURE + "\n", 1)
    assert host_io.status_exit(status, proc.args, proc.returncode) == (1, None)
    assert tries.read_text().split() == ["try"] * 6


def test_a_commands_own_bwrap_words_and_exit_1_are_never_taken_for_a_setup_failure(tmp_path: Path) -> None:
    """After the run's pid 1 started, every byte on stderr is the run's: a command that says what bwrap
    says and exits 1 runs once."""
    flaky, tries = _flaky(tmp_path, failures=0)
    marks = tmp_path / "marks"
    proc, status = _run(
        _argv(flaky, f'echo run >> {marks}; echo "{SETUP_FAILURE}" >&2; exit 1'),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _out, err = proc.communicate(timeout=60)
    assert (err.decode(), proc.returncode) == (SETUP_FAILURE + "\n", 1)
    assert host_io.status_exit(status, proc.args, proc.returncode) == (1, None)
    assert marks.read_text() == "run\n" and tries.read_text() == "try\n"


def test_the_commands_stderr_is_still_its_terminal(tmp_path: Path) -> None:
    flaky, _tries = _flaky(tmp_path, failures=1)
    master, slave = pty.openpty()
    try:
        proc, status = _run(
            _argv(flaky, "test -t 2 && echo stderr-is-a-tty >&2"), stdin=slave, stdout=slave, stderr=slave
        )
        os.close(slave)
        seen = b""
        while b"stderr-is-a-tty" not in seen:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0
        assert b"stderr-is-a-tty" in seen and b"bwrap:" not in seen
        os.close(status)
    finally:
        os.close(master)


def test_a_term_sent_to_own_pts_alone_ends_the_run(tmp_path: Path) -> None:
    """own-pts stays bwrap's parent now: a signal to its pid only (not the group) is passed on to bwrap,
    whose end it tells as it was."""
    flaky, _tries = _flaky(tmp_path, failures=0)
    proc, status = _run(_argv(flaky, "echo ready; exec sleep 600"), stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    proc.stdout.close()
    os.close(status)
