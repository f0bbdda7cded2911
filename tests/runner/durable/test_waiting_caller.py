"""Issue 20: a CLI caller waiting for the operator when the gateway is SIGKILLed reconnects (the gateway
comes back), keeps waiting on the same ask, and prints the run's result once it is approved."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from engine.protocol.frames import socket_path
from engine.unixsock import socket_is_live
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, REPO, cli, connect, wait_until, write_config


async def test_a_waiting_cli_caller_survives_a_gateway_crash(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    daemon = Daemon(state_dir).start()
    caller: subprocess.Popen[str] | None = None
    try:
        approver = await connect(state_dir, "console")
        await approver.request("approvals.attach")  # an approver: the call waits instead of returning
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
        caller = subprocess.Popen(
            [sys.executable, "-m", "runner", "exec", "--", "echo", "reconnected-ok"],
            env=env,
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        async def asked() -> list:
            return (await approver.request("approvals.pending"))["approvals"]

        ask = (await wait_until(asked, timeout=30))[0]
        # The caller is told it waits once the ask is on disk: kill only after that promise was made.
        assert caller.stderr is not None
        said = await asyncio.wait_for(asyncio.to_thread(caller.stderr.readline), 30)
        assert f"waiting for approval {ask['slug']}" in said
        daemon.kill()  # SIGKILL while the caller waits
        await approver.close()
        # The caller reconnects and, finding no gateway, starts one (as every CLI verb does).
        await wait_until(lambda: socket_is_live(socket_path(state_dir)), timeout=60)

        def rows() -> list[str]:
            return [a for a in cli(state_dir, "approvals", "pending").stdout.split("\n") if ask["slug"] in a]

        listed = await wait_until(rows, timeout=30)
        assert "echo reconnected-ok" in listed[0]
        assert cli(state_dir, "approve", ask["slug"], "allow-once").returncode == 0
        out, err = caller.communicate(timeout=120)
        assert caller.returncode == 0, (out, err)
        assert "reconnected-ok" in out
        assert f"lost the gateway; waiting for approval {ask['slug']}" in err
    finally:
        if caller is not None and caller.poll() is None:
            caller.kill()
            caller.wait()
        daemon.stop()
        cli(state_dir, "gateway", "stop")
