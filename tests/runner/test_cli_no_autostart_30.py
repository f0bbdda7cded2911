"""Issue 30: `process` reads and `events` never start a gateway. With none running, `events` reads the
undelivered events the last one left on disk (as `approvals grants` reads its file), and the verbs that
need a gateway's memory say that none is running and fail with EXIT_UNAVAILABLE (69)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from engine.protocol.frames import socket_path
from engine.sessions.spool import SPOOL_NAME
from tests.helpers.gateway import FULL, cli, write_config

NOT_RUNNING = "exechost: no gateway is running; "


def _refused(proc: subprocess.CompletedProcess[str], state: Path) -> None:
    assert proc.returncode == 69, proc.stdout + proc.stderr
    assert proc.stderr.startswith(NOT_RUNNING) and "`exechost gateway start` starts one" in proc.stderr
    assert "started a gateway" not in proc.stderr
    assert not socket_path(state).exists()  # nothing was started to answer


def test_process_reads_say_no_gateway_runs_and_start_none(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    for argv in (
        ["process", "list"],
        ["process", "list", "--json"],
        ["process", "list", "--all"],
        ["process", "poll", "some-session"],
        ["process", "log", "some-session"],
        ["process", "follow", "some-session"],
        ["events", "--drain"],
        ["events", "--follow"],
    ):
        _refused(cli(state_dir, *argv, timeout=30), state_dir)
    assert cli(state_dir, "gateway", "status").returncode == 1


def test_events_are_read_from_disk_without_a_gateway_as_the_gateway_shows_them(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    empty = cli(state_dir, "events")
    assert empty.returncode == 0 and empty.stdout == "No events.\n", empty.stderr
    assert empty.stderr.startswith(NOT_RUNNING + "events read from ")
    spool = state_dir / SPOOL_NAME
    queues = {
        "agent:main:s1": ["Exec finished (one)", "Exec finished (two)"],
        "agent:other:s2": ["another agent's event"],
        "plain-key": ["the operator's event"],
    }
    spool.write_text(json.dumps({"version": 1, "queues": queues}))
    spool.chmod(0o600)
    before = spool.read_bytes()

    def shown(*argv: str) -> list[dict[str, str]]:
        proc = cli(state_dir, "events", "--json", *argv)
        assert proc.returncode == 0, proc.stderr
        return list(json.loads(proc.stdout)["details"]["events"])

    offline = shown()
    # The CLI is agent main unless told otherwise: its own events only, never another agent's.
    assert offline == [{"sessionKey": "agent:main:s1", "text": t} for t in queues["agent:main:s1"]]
    assert shown("--session", "s1") == offline  # a plain key names the agent's own scope
    assert shown("--session", "agent:other:s2") == []
    text = cli(state_dir, "events").stdout
    assert text == "[agent:main:s1] Exec finished (one)\n[agent:main:s1] Exec finished (two)\n"
    assert spool.read_bytes() == before  # read, not drained or moved
    assert not socket_path(state_dir).exists()

    started = cli(state_dir, "gateway", "start")
    assert started.returncode == 0, started.stderr
    try:
        assert shown() == offline  # what a running gateway answers, from the same spool
        assert shown("--session", "s1") == offline
    finally:
        assert cli(state_dir, "gateway", "stop").returncode == 0


def test_an_unreadable_spool_is_an_error_not_an_empty_list(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    spool = state_dir / SPOOL_NAME
    spool.write_text("{not json")
    spool.chmod(0o600)
    proc = cli(state_dir, "events")
    assert proc.returncode == 1 and "unreadable" in proc.stderr, proc.stdout + proc.stderr
    assert spool.read_text() == "{not json"  # left where it is for the gateway to set aside and report
    assert not socket_path(state_dir).exists()
