"""Issue 20 with one session host per state dir: a gateway SIGKILLed in the middle of a command's output
loses no byte of it, and the same host (same pid, same sessions) serves gateway after gateway."""

from __future__ import annotations

import os
from pathlib import Path

from engine.sessions import procs
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import FULL, connect, wait_until, write_config
from tests.runner.durable.test_sessions_survive import _log_has, _process, _start


async def _host_pid(state: Path) -> int:
    operator = await connect(state, "console")
    try:
        status = await operator.request("status", {})
    finally:
        await operator.close()
    host = status.get("sessionHost") or {}
    assert isinstance(host.get("pid"), int), status
    return int(host["pid"])


async def _ended(state: Path, sid: str) -> dict:
    out = await _process(state, "poll", sessionId=sid)
    return out if out["details"].get("exitCode") is not None else {}


async def test_sigkill_mid_output_loses_no_byte(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, FULL)
    work = tmp_path / "w"
    work.mkdir()
    # Numbered lines, steadily, until told to stop; then the count.
    script = (
        "i=0; while [ ! -e stop ]; do echo line-$i; i=$((i+1)); "
        "[ $((i % 40)) = 0 ] && sleep 0.01; done; echo total-$i"
    )
    with Daemon(state_dir) as daemon:
        sid = await _start(state_dir, script, work)
        await wait_until(lambda: _log_has(state_dir, sid, "line-200"))
        daemon.kill()  # mid-output: the host keeps reading the command into the spool
        daemon.start()
        await wait_until(lambda: _log_has(state_dir, sid, "line-"), timeout=30)
        (work / "stop").touch()
        await wait_until(lambda: _ended(state_dir, sid), timeout=60)
        log = (await _process(state_dir, "log", sessionId=sid, offset=0, limit=10_000_000))["text"]
        lines = log.split()
        assert lines[-1].startswith("total-"), lines[-3:]
        total = int(lines[-1].removeprefix("total-"))
        assert total > 200
        assert lines[:-1] == [f"line-{i}" for i in range(total)]  # every line, once, in order


async def test_the_same_host_serves_two_gateway_restarts(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, FULL)
    with Daemon(state_dir) as daemon:
        sid = await _start(state_dir, "cat", tmp_path)
        host = await _host_pid(state_dir)
        for n in range(2):
            await _process(state_dir, "write", sessionId=sid, data=f"before-{n}\n")
            await wait_until(lambda n=n: _log_has(state_dir, sid, f"before-{n}"))
            if n == 0:
                daemon.kill()  # a crash
                daemon.start()
            else:
                daemon.restart()
            assert await _host_pid(state_dir) == host  # re-attached, not replaced
            os.kill(host, 0)
            listed = (await _process(state_dir, "list"))["details"]["sessions"]
            assert [(r["sessionId"], r["status"]) for r in listed] == [(sid, "running")]
        await _process(state_dir, "write", sessionId=sid, data="after-both\n")
        await wait_until(lambda: _log_has(state_dir, sid, "after-both"))
        log = (await _process(state_dir, "log", sessionId=sid))["text"]
        assert log.split() == ["before-0", "before-1", "after-both"]
        await _process(state_dir, "kill", sessionId=sid)
        await wait_until(lambda: _gone(state_dir, sid), timeout=30)
    # The daemon stopped with nothing left to hold: the host goes too, leaving no process behind.
    await wait_until(lambda: not procs.alive(host), timeout=30)


async def _gone(state: Path, sid: str) -> dict:
    out = await _process(state, "poll", sessionId=sid)
    return out if out["details"].get("status") not in ("running", None) else {}
