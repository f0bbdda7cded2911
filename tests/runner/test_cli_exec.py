"""The CLI verbs against a real daemon subprocess: lifecycle, exec/process/approve/events, exit codes."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.protocol.frames import socket_path
from tests.helpers.gateway import ALLOWLIST, FULL, IN_CHECKOUT, REPO, cli, write_config


def stop(state: Path) -> None:
    cli(state, "gateway", "stop")


def js(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.stdout.count("\n") == 1, proc.stdout + proc.stderr
    data: dict = json.loads(proc.stdout)
    assert set(data) == {"text", "details"}
    return data


def test_lifecycle_start_status_stop(state_dir: Path) -> None:
    assert cli(state_dir, "gateway", "status").returncode == 1
    try:
        started = js(cli(state_dir, "gateway", "start", "--json"))
        assert started["details"]["started"] is True
        again = js(cli(state_dir, "gateway", "start", "--json"))
        assert again["details"]["started"] is False and again["details"]["pid"] == started["details"]["pid"]
        second = cli(state_dir, "gateway", "run")
        assert second.returncode == 1 and "already running" in second.stderr
        status = js(cli(state_dir, "gateway", "status", "--json"))
        assert (
            status["details"]["status"] == "running" and status["details"]["pid"] == started["details"]["pid"]
        )
    finally:
        stopped = cli(state_dir, "gateway", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert cli(state_dir, "gateway", "status").returncode == 1
    assert not socket_path(state_dir).exists()
    assert cli(state_dir, "gateway", "stop").returncode == 0  # idempotent


def test_sigterm_is_graceful_and_keeps_sessions(state_dir: Path) -> None:
    """Issue 20: a graceful stop leaves background sessions to the next gateway; `gateway stop
    --kill-sessions` is the way to end them with it."""
    write_config(state_dir, FULL + IN_CHECKOUT)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "gateway", "run"],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while cli(state_dir, "gateway", "status").returncode != 0:  # ours, not an autostarted one
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        bg = js(cli(state_dir, "exec", "--json", "--background", "--", "sleep 300"))
        pid, sid = bg["details"]["pid"], bg["details"]["sessionId"]
        os.kill(pid, 0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not socket_path(state_dir).exists()
        os.kill(pid, 0)  # still running: the session host keeps it
        assert cli(state_dir, "process", "list").returncode == 69  # a read never starts a gateway (issue 30)
        assert cli(state_dir, "gateway", "start").returncode == 0  # a new one adopts the session
        listed = js(cli(state_dir, "process", "--json", "list"))
        assert sid in [r["sessionId"] for r in listed["details"]["sessions"]]
        stopped = cli(state_dir, "gateway", "stop", "--kill-sessions")
        assert stopped.returncode == 0 and "1 running session(s) were ended" in stopped.stdout
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("background session survived `gateway stop --kill-sessions`")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cli(state_dir, "gateway", "stop", "--kill-sessions")


def test_exec_json_and_exit_codes(state_dir: Path) -> None:
    write_config(state_dir, FULL + IN_CHECKOUT)
    try:
        ok = cli(state_dir, "exec", "--json", "--", "echo", "hi")
        assert ok.returncode == 0 and js(ok)["text"] == "hi"
        code = cli(state_dir, "exec", "--", "echo out; exit 7")
        assert code.returncode == 7 and code.stdout == "out\n\n(Command exited with code 7)\n"
        missing = cli(state_dir, "exec", "--json", "--", "definitely-not-a-command-xyz")
        assert missing.returncode == 1 and js(missing)["details"]["status"] == "failed"
        refused = cli(state_dir, "exec", "--env", "PATH=/x", "--", "true")
        assert refused.returncode == 1 and "PATH" in refused.stderr
        usage = cli(state_dir, "exec")
        assert usage.returncode == 2
        here = cli(state_dir, "exec", "--", "pwd")
        assert here.stdout.strip() == str(REPO)  # the caller's cwd by default
        there = cli(state_dir, "exec", "--workdir", "/tmp", "--", "pwd")
        assert there.stdout.strip() == "/tmp"
        bg = js(cli(state_dir, "exec", "--json", "--background", "--", "echo from-bg"))
        sid = bg["details"]["sessionId"]
        polled = js(cli(state_dir, "process", "poll", sid, "--timeout", "5000", "--json"))
        assert "from-bg" in polled["text"] and polled["details"]["status"] == "completed"
        listed = js(cli(state_dir, "process", "list", "--json"))
        assert [s["sessionId"] for s in listed["details"]["sessions"]] == [sid]
        unknown = cli(state_dir, "process", "poll", "--session", "nope-nope")
        assert "No session found for nope-nope" in unknown.stdout
    finally:
        stop(state_dir)


def test_pending_approve_and_events_from_the_cli(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    try:
        pending = cli(state_dir, "exec", "--json", "--session", "cli-s", "--", "echo cli-approved")
        assert pending.returncode == 10
        details = js(pending)["details"]
        assert details["status"] == "approval-pending"
        listed = js(cli(state_dir, "approvals", "pending", "--json"))
        assert [a["id"] for a in listed["details"]["approvals"]] == [details["approvalId"]]
        text = cli(state_dir, "approvals", "pending").stdout
        assert details["approvalSlug"] in text and "echo cli-approved" in text
        # Content binding: the operator sees the digest of what will run.
        import hashlib
        import shutil

        echo = os.path.realpath(shutil.which("echo") or "/bin/echo")
        digest = hashlib.sha256(Path(echo).read_bytes()).hexdigest()
        assert f"executable {echo}  sha256 {digest[:12]}" in text, text
        bad = cli(state_dir, "approve", details["approvalSlug"], "perhaps")
        assert bad.returncode == 2 and "usage: exechost approve ID DECISION" in bad.stderr
        ok = cli(state_dir, "approve", "allow-once", details["approvalSlug"])  # either order works
        assert ok.returncode == 0 and ok.stdout.startswith("Approval allow-once submitted for")
        missing = cli(state_dir, "approve", "0000000", "deny")
        assert missing.returncode == 1 and "unknown or expired approval id" in missing.stderr
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            events = js(cli(state_dir, "events", "--session", "cli-s", "--json"))["details"]["events"]
            if events:
                break
            time.sleep(0.1)
        assert events[0]["text"].startswith(f"Exec finished (gateway id={details['approvalId']}, session=")
        assert events[0]["text"].endswith("code 0)\ncli-approved")
        drained = cli(state_dir, "events", "--session", "cli-s", "--drain")
        assert "Exec finished" in drained.stdout
        assert cli(state_dir, "events", "--session", "cli-s").stdout == "No events.\n"
    finally:
        stop(state_dir)


def test_concurrent_clients_autostart_exactly_one_gateway(state_dir: Path) -> None:
    write_config(state_dir, FULL + IN_CHECKOUT)
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda i: cli(state_dir, "exec", "--json", "--", f"echo {i}"), range(4)))
        assert [js(r)["text"] for r in results] == ["0", "1", "2", "3"]
        log = (state_dir / "gateway.log").read_text()
        assert log.count("gateway listening on") == 1, log
    finally:
        stop(state_dir)


def test_install_service_writes_a_unit(state_dir: Path, tmp_path: Path) -> None:
    unit = tmp_path / "exechost-gateway.service"
    out = js(cli(state_dir, "gateway", "install-service", "--path", str(unit), "--json"))
    assert out["details"]["path"] == str(unit)
    text = unit.read_text()
    assert "[Service]" in text and "[Install]" in text and "WantedBy=default.target" in text
    assert f"ExecStart={sys.executable} -P -m runner gateway run" in text
    assert f'Environment="OPENCLAW_STATE_DIR={state_dir}"' in text
    assert "KillSignal=SIGTERM" in text and "Restart=on-failure" in text
    default = cli(state_dir, "gateway", "install-service")
    assert default.returncode == 0
    assert (Path(os.environ["HOME"]) / ".config/systemd/user/exechost-gateway.service").is_file()


def test_pty_stdin_and_follow_from_the_cli(state_dir: Path) -> None:
    write_config(state_dir, FULL + IN_CHECKOUT)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    try:
        tty = cli(state_dir, "exec", "--pty", "--", "tty")
        assert tty.returncode == 0 and tty.stdout.startswith("/dev/pts/"), tty.stdout + tty.stderr
        follow = subprocess.Popen(
            [sys.executable, "-m", "runner", "events", "--follow", "--session", "f1"],
            env=env,
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 20
            while js(cli(state_dir, "gateway", "status", "--json"))["details"]["connections"] < 2:
                assert time.monotonic() < deadline, "the follower never connected"
                time.sleep(0.1)
            time.sleep(0.2)  # connected; its `subscribe` is one request behind
            cat = js(cli(state_dir, "exec", "--json", "--background", "--session", "f1", "--", "cat"))
            sid = cat["details"]["sessionId"]
            wrote = cli(
                state_dir, "process", "write", sid, "--session-key", "f1", "--data", "typed\n", "--eof"
            )
            assert wrote.stdout.startswith("Wrote 6 bytes to session") and "(stdin closed)" in wrote.stdout
            polled = js(
                cli(state_dir, "process", "poll", sid, "--session-key", "f1", "--timeout", "5000", "--json")
            )
            assert "typed" in polled["text"]
            assert follow.stdout is not None
            ready, _, _ = select.select([follow.stdout], [], [], 20)
            line = follow.stdout.readline() if ready else ""
            assert line.startswith("[agent:main:f1] Exec completed") and "typed" in line
            # Other scopes cannot see or touch the session.
            other = cli(state_dir, "process", "poll", sid, "--session-key", "f2")
            assert f"No session found for {sid}" in other.stdout
        finally:
            follow.terminate()
            follow.wait(10)
    finally:
        stop(state_dir)


async def test_exec_says_it_waits_for_approval(state_dir: Path) -> None:
    """Issue 10: a CLI exec waiting for the operator says so on stderr (it used to hang silently)."""
    import asyncio

    from tests.helpers.gateway import connect, gateway

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        operator = await connect(state_dir, "console")
        await operator.request("approvals.attach")
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runner",
            "exec",
            "--",
            "echo approved-late",
            env=env,
            cwd=str(REPO),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert line.startswith("waiting for approval ") and "expires in 29:" in line
        slug = line.split()[3]
        assert f"exechost approve {slug} allow-once" in line
        pending = await operator.pending_approvals()
        assert [p["slug"] for p in pending] == [slug]
        await operator.request("approve", {"id": slug, "decision": "allow-once"})
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0 and "approved-late" in out.decode()
        await operator.close()


def test_cli_conventions_version_bad_enums_clamps_unknown_ids_and_killed(state_dir: Path) -> None:
    """Issue 10: --version; bad enums refused; clamps reported; unknown ids fail; a kill shows killed."""
    write_config(state_dir, ALLOWLIST)
    try:
        version = cli(state_dir, "--version")
        assert version.returncode == 0 and version.stdout.startswith("exechost ")
        bad = cli(state_dir, "exec", "--host", "bogus", "--", "true")
        assert (
            bad.returncode != 0 and "invalid host 'bogus' (expected auto|sandbox|gateway|node)" in bad.stderr
        )
        bad = cli(state_dir, "exec", "--security", "nonsense", "--", "true")
        assert bad.returncode != 0 and "invalid security 'nonsense'" in bad.stderr
        clamped = cli(state_dir, "exec", "--security", "full", "--ask", "off", "--", "wc -c /dev/null")
        assert "security=full was requested; the policy's security=allowlist applies" in clamped.stdout
        for action in ("poll", "log", "kill"):
            missing = cli(state_dir, "process", action, "no-such-session")
            assert missing.returncode == 1 and "session found for no-such-session" in missing.stdout, action
        write_config(state_dir, FULL + IN_CHECKOUT)
        started = js(cli(state_dir, "exec", "--json", "--background", "--", "sleep 30"))
        sid = started["details"]["sessionId"]
        assert cli(state_dir, "process", "kill", sid).returncode == 0
        for _ in range(100):
            listed = js(cli(state_dir, "process", "list", "--json"))
            row = next(s for s in listed["details"]["sessions"] if s["sessionId"] == sid)
            if row["status"] != "running":
                break
            time.sleep(0.05)
        assert row["status"] == "killed"
    finally:
        stop(state_dir)


def test_process_follow_history_allowlist_list_and_autostart_notice(state_dir: Path, tmp_path: Path) -> None:
    """Issue 10: `process follow`, `approvals history`, `approvals allowlist list` (scope, what a
    =command: entry stands for), add warnings, and a verb that starts the gateway says so."""
    write_config(state_dir, FULL + IN_CHECKOUT)
    try:
        assert cli(state_dir, "process", "list").returncode == 69  # a read starts none (issue 30)
        killed = cli(state_dir, "process", "kill", "no-such-session")
        assert "started a gateway (pid" in killed.stderr  # a verb that acts left a daemon behind
        started = js(
            cli(
                state_dir,
                "exec",
                "--json",
                "--background",
                "--",
                "for i in 1 2 3; do echo tick-$i; sleep 0.2; done; exit 5",
            )
        )
        followed = cli(state_dir, "process", "follow", started["details"]["sessionId"])
        assert followed.stdout.split() == ["tick-1", "tick-2", "tick-3"] and followed.returncode == 5
        assert "started a gateway" not in followed.stderr
        missing = cli(state_dir, "process", "follow", "no-such")
        assert missing.returncode == 1
        warn = cli(state_dir, "approvals", "allowlist", "add", "/usr/bin/definitely-not-here")
        assert warn.returncode == 0 and "does not exist (yet)" in warn.stderr
        warn = cli(state_dir, "approvals", "allowlist", "add", "bin/*", "--agent", "main")
        assert "never matches" in warn.stderr
        entries = cli(state_dir, "approvals", "allowlist", "list")
        assert (
            "*          /usr/bin/definitely-not-here" in entries.stdout
            and "main       bin/*" in entries.stdout
        )
        history = cli(state_dir, "approvals", "history")
        assert history.returncode == 0 and "No decided approvals yet." in history.stdout
    finally:
        stop(state_dir)


def test_status_says_the_config_broke_and_events_follow_shows_the_backlog(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    try:
        pending = js(cli(state_dir, "exec", "--json", "--session", "bk", "--", "echo backlog-item"))
        assert cli(state_dir, "approve", pending["details"]["approvalSlug"], "deny").returncode == 0
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
        follow = subprocess.Popen(
            [sys.executable, "-m", "runner", "events", "--follow", "--session", "bk"],
            env=env,
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert follow.stdout is not None
            ready, _, _ = select.select([follow.stdout], [], [], 20)
            assert ready and "Exec denied" in follow.stdout.readline()  # the backlog comes first
        finally:
            follow.terminate()
            follow.wait(10)
        (state_dir / "config.toml").write_text(ALLOWLIST + "\n[tools.exec]\nask = 'twice'\n")
        status = cli(state_dir, "gateway", "status")
        assert "config: " in status.stdout and "still running on the last good config" in status.stdout
    finally:
        stop(state_dir)
