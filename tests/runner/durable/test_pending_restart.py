"""Issue 20: an ask waiting for the operator survives a SIGKILLed gateway (same id, same expiry); approved
after the restart it runs as approved — or is refused as approval-stale when what runs changed."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

from engine.approvals.durable import PENDING_NAME
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, cli, connect, wait_until, write_config


async def _events(state: Path, key: str) -> list[str]:
    agent = await connect(state, "agent", operator=False)
    try:
        return [e["text"] for e in (await agent.request("events", {"sessionKey": key}))["events"]]
    finally:
        await agent.close()


async def _ask(state: Path, command: str, key: str) -> dict:
    agent = await connect(state, "agent", operator=False)
    try:
        res = await agent.request("exec", {"command": command, "agentId": "main", "sessionKey": key})
    finally:
        await agent.close()
    assert res["details"]["status"] == "approval-pending", res
    return res["details"]


async def test_a_pending_ask_survives_sigkill_and_runs_when_approved(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    with Daemon(state_dir) as daemon:
        asked = await _ask(state_dir, "echo approved-after-crash", "k1")
        pending_file = state_dir / PENDING_NAME
        assert stat.S_IMODE(pending_file.stat().st_mode) == 0o600
        daemon.restart()  # SIGKILL, then a new daemon
        listed = cli(state_dir, "approvals", "pending", "--json")
        rows = json.loads(listed.stdout)["details"]["approvals"]
        assert [(r["id"], r["expiresAtMs"]) for r in rows] == [(asked["approvalId"], asked["expiresAtMs"])]
        assert rows[0]["command"] == "echo approved-after-crash"
        out = cli(state_dir, "approve", asked["approvalSlug"], "allow-once")
        assert out.returncode == 0, out.stderr

        async def finished() -> list[str]:
            return [t for t in await _events(state_dir, "k1") if t.startswith("Exec finished")]

        texts = await wait_until(finished, timeout=30)
        assert f"gateway id={asked['approvalId']}" in texts[0] and "approved-after-crash" in texts[0]
        assert "code 0" in texts[0]
        # Settled: nothing left for a third gateway to ask again.
        assert json.loads(pending_file.read_text())["asks"] == []
        daemon.restart()
        again = cli(state_dir, "approvals", "pending", "--json")
        assert json.loads(again.stdout)["details"]["approvals"] == []


async def test_an_ask_restored_after_a_binary_swap_is_stale(state_dir: Path) -> None:
    """Approving after the restart must not run a different file than the one shown."""
    write_config(state_dir, ALLOWLIST)
    tool = state_dir.parent / "bin"
    tool.mkdir()
    prog = tool / "greet"
    shutil.copy("/bin/echo", prog)
    with Daemon(state_dir) as daemon:
        asked = await _ask(state_dir, f"{prog} hello", "k2")
        daemon.kill()
        # A new file at the same path (made before the old one goes, so it cannot reuse its inode).
        shutil.copy("/bin/true", tool / "greet.new")
        os.replace(tool / "greet.new", prog)
        daemon.start()
        assert cli(state_dir, "approve", asked["approvalSlug"], "allow-once").returncode == 0

        async def refused() -> list[str]:
            return [t for t in await _events(state_dir, "k2") if t.startswith("Exec denied")]

        texts = await wait_until(refused, timeout=30)
        assert "approval-stale" in texts[0] and asked["approvalId"] in texts[0]


async def test_an_ask_that_expired_while_no_gateway_ran_falls_back(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    daemon = Daemon(state_dir, env={"EXECHOST_APPROVAL_TIMEOUT_MS": "2000"})
    with daemon:
        asked = await _ask(state_dir, "echo never-approved", "k3")
        daemon.kill()
        await wait_until(lambda: time.time() * 1000 > asked["expiresAtMs"] + 100, timeout=30)
        daemon.start()

        async def timed_out() -> list[str]:
            return [t for t in await _events(state_dir, "k3") if "approval-timeout" in t]

        texts = await wait_until(timed_out, timeout=30)
        assert asked["approvalId"] in texts[0]
        assert os.path.exists(state_dir / PENDING_NAME)
