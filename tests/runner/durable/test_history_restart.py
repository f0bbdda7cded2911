"""Issue 20: decision history is on disk — it outlives a SIGKILLed gateway, shows each run's current status,
and a full log disk is a clear error while the gateway keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from engine.approvals.history import HISTORY_DIR
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, cli, connect, wait_until, write_config


async def _ask_and_approve(state: Path, command: str) -> dict:
    """An agent asks (no console attached: approval-pending), the operator approves, the run ends."""
    agent = await connect(state, "agent", operator=False)
    operator = await connect(state, "operator")
    try:
        res = await agent.request("exec", {"command": command, "agentId": "main"})
        slug = res["details"]["approvalSlug"]
        await operator.request("approve", {"id": slug, "decision": "allow-once"})

        async def ended() -> dict:
            out = await agent.request("approvals.status", {"approvalId": slug, "agentId": "main"})
            run = out["details"]["run"] or {}
            return out if run.get("exitCode") is not None else {}

        return await wait_until(ended, timeout=30)
    finally:
        await agent.close()
        await operator.close()


async def test_history_survives_sigkill_and_shows_the_current_status(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    with Daemon(state_dir) as daemon:
        done = await _ask_and_approve(state_dir, "echo durable-history; exit 3")
        slug = done["details"]["approval"]["slug"]
        sid = done["details"]["run"]["sessionId"]
        daemon.restart()  # SIGKILL: nothing is flushed on the way out
        out = cli(state_dir, "approvals", "history", "--json")
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout)["details"]["approvals"]
        assert [r["slug"] for r in rows] == [slug]
        row = rows[0]
        assert row["status"] == "allow-once" and row["resolvedBy"] == "operator"
        assert row["command"] == "echo durable-history; exit 3" and row["agentId"] == "main"
        # The run ended before the crash: its end was written, so it is not shown as `running`.
        assert row["run"]["sessionId"] == sid
        assert row["run"]["status"] == "completed" and row["run"]["exitCode"] == 3
        text = cli(state_dir, "approvals", "history")
        assert f"{slug}  main  allow-once by operator -> completed (code 3)" in text.stdout
        # `approvals status` of a decision made by the previous gateway still answers.
        agent = await connect(state_dir, "agent", operator=False)
        status = await agent.request("approvals.status", {"approvalId": slug, "agentId": "main"})
        assert status["details"]["run"]["exitCode"] == 3
        await agent.close()


def _mount_tmpfs(path: Path) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir(mode=0o700, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(path)])
    return res.returncode == 0


def _fill(path: Path) -> Path:
    """Fill the filesystem at `path` to the last byte."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * chunk):
                    pass
    finally:
        os.close(fd)
    with pytest.raises(OSError) as info, open(path / "probe", "wb") as fh:
        fh.write(b"x" * 8192)
        fh.flush()
        os.fsync(fh.fileno())
    assert info.value.errno == errno.ENOSPC
    with contextlib.suppress(FileNotFoundError):
        (path / "probe").unlink()
    return filler


async def test_a_full_log_disk_is_a_clear_error_and_the_gateway_keeps_serving(state_dir: Path) -> None:
    history_dir = state_dir / HISTORY_DIR
    if not _mount_tmpfs(history_dir):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        write_config(state_dir, ALLOWLIST)
        with Daemon(state_dir) as daemon:
            await _ask_and_approve(state_dir, "echo before-full")
            filler = _fill(history_dir)
            # Longer than the page tmpfs already gave the log, so the append needs a block it cannot get.
            big = "echo while-full # " + "x" * 6000
            done = await _ask_and_approve(state_dir, big)  # the decision still stands, and ran
            assert done["details"]["run"]["exitCode"] == 0
            out = cli(state_dir, "approvals", "history")
            assert out.returncode == 0
            assert "decision history not written: the disk is full" in out.stderr
            assert "before-full" in out.stdout
            operator = await connect(state_dir, "operator")
            status = await operator.request("status")
            assert "the disk is full" in (status["historyError"] or "")
            filler.unlink()  # room again: the next decision is written, the torn tail skipped
            await _ask_and_approve(state_dir, "echo after-full")
            status = await operator.request("status")
            assert status["historyError"] is None
            await operator.close()
            daemon.restart()
            out = cli(state_dir, "approvals", "history")
            assert "before-full" in out.stdout and "after-full" in out.stdout and not out.stderr
    finally:
        await asyncio.to_thread(subprocess.run, ["umount", "-l", str(history_dir)])


async def test_a_decision_is_on_disk_before_its_command_runs(state_dir: Path, tmp_path: Path) -> None:
    """The history is written off the loop in groups: the approved command must still wait for its
    decision line (an audit that a crash could lose after the command ran would be no audit)."""
    import threading

    from tests.helpers.gateway import gateway

    write_config(state_dir, ALLOWLIST)
    marker = tmp_path / "ran"
    async with gateway(state_dir) as server:
        gate = threading.Event()
        real = server.services.journal.history.write_lines

        def slow(lines: list[bytes]) -> None:
            gate.wait(20)
            real(lines)

        server.services.journal.history.write_lines = slow  # type: ignore[method-assign]
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        call = asyncio.ensure_future(
            agent.request("exec", {"command": f"touch {marker}", "agentId": "main", "sessionKey": "k"})
        )
        await wait_until(lambda: server.services.approvals.pending(), timeout=20)
        await operator.request(
            "approve", {"id": server.services.approvals.pending()[0].id, "decision": "allow-once"}
        )
        await asyncio.sleep(0.3)
        assert not marker.exists()  # decided, not yet recorded: not run
        gate.set()
        assert (await asyncio.wait_for(call, 20))["details"]["status"] == "completed"
        assert marker.exists()
        assert "touch" in (state_dir / HISTORY_DIR / "decisions.a.main.jsonl").read_text()  # main's own log
        await agent.close()
        await operator.close()
