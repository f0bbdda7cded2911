"""Issue 20: a background session outlives a SIGKILLed gateway — output keeps going to disk, the next
gateway adopts it (same id, full log, write/kill, PTY), and one that ended meanwhile reports its exit."""

from __future__ import annotations

import json
from pathlib import Path

from engine.sessions.host import HOLDERS_DIR
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import FULL, connect, wait_until, write_config

# Prints a line, waits for a file, prints, waits for another, prints, exits 7.
SCRIPT = (
    "echo before; while [ ! -e go1 ]; do sleep 0.02; done; echo during; "
    "while [ ! -e go2 ]; do sleep 0.02; done; echo after; exit 7"
)


async def _process(state: Path, action: str, **params: object) -> dict:
    agent = await connect(state, "agent", operator=False)
    try:
        return await agent.request("process", {"action": action, "agentId": "main", **params})
    finally:
        await agent.close()


async def _start(state: Path, command: str, work: Path, **extra: object) -> str:
    agent = await connect(state, "agent", operator=False)
    try:
        res = await agent.request(
            "exec", {"command": command, "agentId": "main", "background": True, "workdir": str(work), **extra}
        )
    finally:
        await agent.close()
    assert res["details"]["status"] == "running", res
    return str(res["details"]["sessionId"])


async def _log_has(state: Path, sid: str, text: str) -> bool:
    out = await _process(state, "log", sessionId=sid)
    return text in out["text"]


def _spool(state: Path, sid: str) -> bytes:
    path = state / HOLDERS_DIR / f"{sid}.spool"
    return path.read_bytes() if path.exists() else b""


async def test_a_running_session_is_adopted_with_what_it_wrote_meanwhile(
    state_dir: Path, tmp_path: Path
) -> None:
    write_config(state_dir, FULL)
    work = tmp_path / "w"
    work.mkdir()
    with Daemon(state_dir) as daemon:
        sid = await _start(state_dir, SCRIPT, work)
        await wait_until(lambda: _log_has(state_dir, sid, "before"))
        daemon.kill()  # SIGKILL: the session host keeps it
        (work / "go1").touch()
        await wait_until(lambda: b"during" in _spool(state_dir, sid))  # written while no gateway ran
        daemon.start()
        listed = (await _process(state_dir, "list"))["details"]["sessions"]
        row = next(r for r in listed if r["sessionId"] == sid)
        assert row["status"] == "running"
        log = (await _process(state_dir, "log", sessionId=sid))["text"]
        assert "before" in log and "during" in log
        (work / "go2").touch()

        async def ended() -> dict:
            out = await _process(state_dir, "poll", sessionId=sid)
            return out if out["details"].get("exitCode") is not None else {}

        out = await wait_until(ended, timeout=30)
        assert out["details"]["exitCode"] == 7
        log = (await _process(state_dir, "log", sessionId=sid))["text"]
        assert log.split() == ["before", "during", "after"]


async def test_a_session_that_ended_during_the_outage_reports_its_exit(
    state_dir: Path, tmp_path: Path
) -> None:
    write_config(state_dir, FULL)
    work = tmp_path / "w"
    work.mkdir()
    with Daemon(state_dir) as daemon:
        sid = await _start(state_dir, SCRIPT, work)
        await wait_until(lambda: _log_has(state_dir, sid, "before"))
        daemon.kill()
        (work / "go1").touch()
        (work / "go2").touch()
        exit_file = state_dir / HOLDERS_DIR / f"{sid}.exit"
        await wait_until(exit_file.exists, timeout=30)
        written = json.loads(exit_file.read_text())
        assert written["code"] == 7
        daemon.start()

        async def ended() -> dict:
            out = await _process(state_dir, "poll", sessionId=sid)
            return out if out["details"].get("exitCode") is not None else {}

        out = await wait_until(ended, timeout=30)
        assert out["details"]["exitCode"] == 7
        assert "after" in out["text"] or "after" in (await _process(state_dir, "log", sessionId=sid))["text"]
        agent = await connect(state_dir, "agent", operator=False)
        rows = (await agent.request("sessions.list", {}))["sessions"]
        await agent.close()
        row = next(r for r in rows if r["sessionId"] == sid)
        # The end the session host wrote down, not when this gateway learnt of it.
        assert row["exitCode"] == 7 and row["endedAt"] == written["endedAt"]


async def test_an_adopted_session_takes_input_and_can_be_killed(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, FULL)
    with Daemon(state_dir) as daemon:
        sid = await _start(state_dir, "cat", tmp_path)
        await _process(state_dir, "write", sessionId=sid, data="one\n")
        await wait_until(lambda: _log_has(state_dir, sid, "one"))
        daemon.restart()
        await _process(state_dir, "write", sessionId=sid, data="two\n")
        await wait_until(lambda: _log_has(state_dir, sid, "two"))
        await _process(state_dir, "kill", sessionId=sid)

        async def gone() -> dict:
            out = await _process(state_dir, "poll", sessionId=sid)
            return out if out["details"].get("status") not in ("running", None) else {}

        out = await wait_until(gone, timeout=30)
        assert out["details"]["status"] in ("failed", "killed"), out


async def test_an_adopted_pty_session_keeps_its_terminal(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, FULL)
    with Daemon(state_dir) as daemon:
        sid = await _start(state_dir, "sh -c 'tty; exec cat'", tmp_path, pty=True)
        await wait_until(lambda: _log_has(state_dir, sid, "/dev/pts/"))
        daemon.restart()
        await _process(state_dir, "send-keys", sessionId=sid, literal="typed-after-restart", keys=["Enter"])
        await wait_until(lambda: _log_has(state_dir, sid, "typed-after-restart"))
        agent = await connect(state_dir, "console")
        resized = await agent.request("sessions.resize", {"sessionId": sid, "cols": 91, "rows": 33})
        assert resized["cols"] == 91
        await agent.close()
        await _process(state_dir, "kill", sessionId=sid)
