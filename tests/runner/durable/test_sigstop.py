"""Issue 20: a gateway stopped with SIGSTOP leaves clients with a clear timeout (and no second gateway
started over it); after SIGCONT it serves again, sessions and all."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.helpers.daemon import Daemon
from tests.helpers.gateway import FULL, cli, write_config


def test_a_stopped_gateway_is_a_clear_timeout_and_recovers(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    with Daemon(state_dir) as daemon:
        bg = cli(state_dir, "exec", "--background", "--", "sleep 300")
        assert bg.returncode == 0, bg.stderr
        daemon.kill(signal.SIGSTOP)
        try:
            status = cli(state_dir, "gateway", "status")
            assert status.returncode == 1
            assert "gateway not answering" in status.stdout and "SIGSTOP" in status.stdout
            listed = cli(state_dir, "process", "list")  # autostarts by default: must not try here
            assert listed.returncode != 0 and "did not answer within" in listed.stderr
            assert "already running" not in listed.stderr
        finally:
            daemon.kill(signal.SIGCONT)
        assert cli(state_dir, "gateway", "status").returncode == 0
        assert "sleep 300" in cli(state_dir, "process", "list").stdout
        cli(state_dir, "gateway", "stop", "--kill-sessions")
