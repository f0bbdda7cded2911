"""Issue 30 item 3: Ctrl-C reaches a PTY session, through the daemon as users run it (sessions held by the
session host, which must not pass its own ignored SIGINT/SIGHUP on to the commands it starts)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.helpers.gateway import FULL, cli, write_config


def js(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout))


def ignored(mask_hex: str) -> set[int]:
    mask = int(mask_hex, 16)
    return {sig for sig in range(1, 64) if mask >> (sig - 1) & 1}


def test_ctrl_c_reaches_a_pty_session_held_by_the_session_host(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    try:
        status = js(cli(state_dir, "gateway", "start", "--json"))["details"]
        assert status["holdsSessions"], status  # the daemon's way: sessions live in the session host
        # No command the host starts keeps its ignored signals, PTY or pipes.
        for flags in (["--pty"], []):
            shown = cli(state_dir, "exec", *flags, "--", "grep ^SigIgn: /proc/self/status")
            assert shown.returncode == 0, shown.stdout + shown.stderr
            lost = ignored(shown.stdout.split()[-1]) & {signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
            assert not lost, (flags, shown.stdout)
        # ^C typed into the terminal: the line discipline sends SIGINT to the foreground job, which ends.
        cat = js(cli(state_dir, "exec", "--json", "--pty", "--background", "--session", "s", "--", "cat"))
        sid = cat["details"]["sessionId"]
        sent = cli(state_dir, "process", "send-keys", sid, "--session-key", "s", "--keys", "C-c")
        assert sent.returncode == 0, sent.stdout + sent.stderr
        poll = ["process", "poll", sid, "--session-key", "s", "--timeout", "20000", "--json"]
        polled = js(cli(state_dir, *poll))
        details = polled["details"]
        assert (details["status"], details["exitSignal"], details["aggregated"]) == ("failed", "SIGINT", "^C")
    finally:
        cli(state_dir, "gateway", "stop", "--kill-sessions")
