"""Issue 30 item 8: `exechost: started a gateway (pid …)` is not printed over the console's TUI by a CLI run
as a background job of the console's terminal; in the terminal's foreground (or to a file) it is."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

from engine.protocol.stopped import clear_stop
from tests.helpers.gateway import FULL, REPO, cli, write_config

# Runs with the pty as its controlling terminal (a new session, then TIOCSCTTY), so its own process group is
# the terminal's foreground; `background` puts the CLI in a process group of its own, as `cmd &` does.
LAUNCHER = """
import fcntl, os, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
background = sys.argv[1] == "background"
pid = os.fork()
if pid == 0:
    if background:
        os.setpgid(0, 0)
    os.execv(sys.executable, [sys.executable, "-m", "runner", *sys.argv[2:]])
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def on_a_terminal(state: Path, how: str, *args: str) -> str:
    master, slave = os.openpty()
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, how, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env=env,
        cwd=str(REPO),
    )
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        assert ready, "the CLI did not finish"
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(60) == 0, out
    return out.decode()


def test_started_gateway_notice_not_printed_by_a_background_job(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    try:
        # `exec` starts a gateway when none runs (`process list` no longer does: issue 30).
        text = on_a_terminal(state_dir, "background", "exec", "--", "echo", "ran-in-background")
        assert "ran-in-background" in text and "started a gateway" not in text
        assert cli(state_dir, "gateway", "status").returncode == 0  # it did start one
        cli(state_dir, "gateway", "stop")
        # An operator's stop sticks (issue 37): no client starts a gateway behind it. Lifted here so that
        # the foreground CLI starts one again, the case whose notice this test reads.
        clear_stop(state_dir)
        text = on_a_terminal(state_dir, "foreground", "exec", "--", "echo", "ran-in-foreground")
        assert "exechost: started a gateway (pid " in text and "ran-in-foreground" in text
    finally:
        cli(state_dir, "gateway", "stop")
