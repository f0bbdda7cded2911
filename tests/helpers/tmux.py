"""A tmux server of the test's own: two test runs on one machine share no sessions, server or global env."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


class TmuxServer:
    """`tmux -S <own socket>`: the default server (`/tmp/tmux-$UID/default`) is every run's and anyone's
    `kill-server` or session of the same name there is this test's failure."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def argv(self, *args: str) -> list[str]:
        return ["tmux", "-S", str(self.socket), *args]

    def __call__(self, *args: str) -> str:
        return subprocess.run(self.argv(*args), check=True, capture_output=True, text=True).stdout

    def has_session(self, session: str) -> bool:
        return subprocess.run(self.argv("has-session", "-t", session), capture_output=True).returncode == 0

    def pane_pid(self, session: str) -> int:
        return int(self("display-message", "-p", "-t", session, "#{pane_pid}").strip())


@pytest.fixture
def tmux_server() -> Iterator[TmuxServer]:
    home = Path(tempfile.mkdtemp(prefix="ehtx-", dir="/tmp"))  # short: a Unix socket path
    server = TmuxServer(home / "s")
    try:
        yield server
    finally:
        subprocess.run(server.argv("kill-server"), capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
