"""End to end: the real `exechost console` in tmux; `exechost exec` asks, a key approves, output shows."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from engine.protocol.client import ControlClient
from engine.protocol.frames import GatewayUnavailable
from tests.helpers.gateway import ALLOWLIST, write_config
from tests.helpers.tmux import TmuxServer

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

EXECHOST = str(Path(sys.executable).parent / "exechost")


def wait_for_screen(tmux: TmuxServer, session: str, needle: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if needle in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared; last screen:\n{screen}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_console_in_tmux_approves_and_shows_output(state_dir: Path, tmux_server: TmuxServer) -> None:
    tmux = tmux_server
    write_config(state_dir, ALLOWLIST)
    session = f"ehc-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "TERM": "xterm-256color"}
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "140",
        "-y",
        "40",
        "-e",
        f"OPENCLAW_STATE_DIR={state_dir}",
        "-e",
        f"HOME={os.environ['HOME']}",
        f"{EXECHOST} console",
    )
    agent: subprocess.Popen[str] | None = None
    try:
        wait_for_screen(tmux, session, "gateway pid")
        agent = subprocess.Popen(
            [EXECHOST, "exec", "--background", "--", "printf 'e2e-%s\\n' approved-output"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_for_screen(tmux, session, "Approvals (1)")
        wait_for_screen(tmux, session, "printf")  # the row is painted a frame after the count
        wait_for_screen(tmux, session, "✗ miss")  # the detail marks the segment that missed the allowlist
        tmux("send-keys", "-t", session, "a")
        out, _ = agent.communicate(timeout=20)
        assert agent.returncode == 0, out
        wait_for_screen(tmux, session, "Approvals (0)")
        tmux("send-keys", "-t", session, "2")
        wait_for_screen(tmux, session, "e2e-approved-output")
        tmux("send-keys", "-t", session, "q")
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
        subprocess.run(tmux.argv("kill-session", "-t", session), capture_output=True)
        asyncio.run(_shutdown(state_dir))


async def _shutdown(state: Path) -> None:
    """Stop the gateway the console started, and wait until the daemon has really exited."""
    try:
        client = await ControlClient.connect(state, client="test", autostart=False, operator=True)
    except GatewayUnavailable:
        return
    with contextlib.suppress(ConnectionError):
        pid = (await client.request("status"))["pid"]
        await client.request("shutdown")
        await client.wait_closed()
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.05)
    await client.close()
