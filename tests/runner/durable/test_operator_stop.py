"""Issue 37 §3: `gateway stop` sticks. A caller waiting on an ask keeps waiting but starts no gateway, and
says the operator stopped it; a fresh verb is refused with the same reason; `gateway start` lifts the stop
and the waiting caller gets its run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from engine.protocol.frames import socket_path
from engine.protocol.stopped import STOPPED_NAME
from engine.unixsock import socket_is_live
from tests.helpers.gateway import ALLOWLIST, REPO, cli, connect, wait_until, write_config


async def _line_with(stream: object, text: str) -> str:
    lines: list[str] = []
    while True:
        line = await asyncio.wait_for(asyncio.to_thread(stream.readline), 60)  # type: ignore[attr-defined]
        lines.append(line)
        assert line, f"stream ended before {text!r}: {lines}"
        if text in line:
            return line


async def test_a_stop_sticks_until_the_operator_starts_the_gateway(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    assert cli(state_dir, "gateway", "start").returncode == 0
    caller: subprocess.Popen[str] | None = None
    try:
        approver = await connect(state_dir, "console")
        await approver.request("approvals.attach")  # an approver: the call waits instead of returning
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
        caller = subprocess.Popen(
            [sys.executable, "-m", "runner", "exec", "--", "echo", "sticks-ok"],
            env=env,
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        async def asked() -> list:
            return (await approver.request("approvals.pending"))["approvals"]

        ask = (await wait_until(asked, timeout=30))[0]
        await _line_with(caller.stderr, f"waiting for approval {ask['slug']}")
        await approver.close()

        stopped = cli(state_dir, "gateway", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert "start none until `exechost gateway start`" in stopped.stdout
        assert (state_dir / STOPPED_NAME).exists()
        said = await _line_with(caller.stderr, "the gateway was stopped by the operator; waiting")
        assert ask["slug"] in said

        # A fresh verb is refused with the reason, and starts nothing either.
        fresh = cli(state_dir, "exec", "--", "echo", "fresh")
        assert fresh.returncode == 69, (fresh.stdout, fresh.stderr)
        assert "stopped by the operator" in fresh.stderr and "exechost gateway start" in fresh.stderr
        assert not socket_is_live(socket_path(state_dir))
        assert cli(state_dir, "gateway", "status").returncode == 1
        assert caller.poll() is None  # still waiting

        assert cli(state_dir, "gateway", "start").returncode == 0
        assert not (state_dir / STOPPED_NAME).exists()

        def rows() -> list[str]:
            return [a for a in cli(state_dir, "approvals", "pending").stdout.split("\n") if ask["slug"] in a]

        await wait_until(rows, timeout=30)
        assert cli(state_dir, "approve", ask["slug"], "allow-once").returncode == 0
        out, err = await asyncio.to_thread(caller.communicate, timeout=120)
        assert caller.returncode == 0, (out, err)
        assert "sticks-ok" in out
        assert "lost the gateway" not in err
    finally:
        if caller is not None and caller.poll() is None:
            caller.kill()
            caller.wait()
        cli(state_dir, "gateway", "stop")


def test_restart_lifts_an_earlier_stop(state_dir: Path) -> None:
    assert cli(state_dir, "gateway", "stop").returncode == 0  # none running: the stop is recorded anyway
    assert (state_dir / STOPPED_NAME).exists()
    refused = cli(state_dir, "process", "list")
    assert refused.returncode == 69 and "stopped by the operator" in refused.stderr
    try:
        restarted = cli(state_dir, "gateway", "restart")
        assert restarted.returncode == 0, restarted.stderr
        assert not (state_dir / STOPPED_NAME).exists()
    finally:
        cli(state_dir, "gateway", "stop")
