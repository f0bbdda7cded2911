"""Issue 20: an ask waiting for the operator survives a SIGKILLed gateway (same id, same expiry); approved
after the restart it runs as approved — or is refused as approval-stale when what runs changed."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

from engine.approvals.durable import JOURNAL_SUFFIX, PENDING_NAME
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, cli, connect, wait_until, write_config
from tests.helpers.pending import fold_pending, stored_asks


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
        journal = pending_file.with_name(pending_file.name + JOURNAL_SUFFIX)
        assert stat.S_IMODE(journal.stat().st_mode) == 0o600  # the ask went to the journal
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
        assert stored_asks(state_dir) == []
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


def _long_run(state: Path) -> tuple[Path, Path, str]:
    """A command that logs each start, then runs until `go` exists: (log, go, command)."""
    write_config(state, ALLOWLIST)
    work = state.parent / "w"
    work.mkdir()
    log, go = work / "runs.log", work / "go"
    return log, go, f"echo run >> {log}; while [ ! -e {go} ]; do sleep 0.05; done"


async def test_an_approved_command_running_when_the_gateway_dies_is_not_run_again(state_dir: Path) -> None:
    """Approved, started, still running at the SIGKILL: the next gateway restored the ask as "approved,
    not yet run" and started a second copy beside the adopted first."""
    log, go, command = _long_run(state_dir)
    with Daemon(state_dir) as daemon:
        asked = await _ask(state_dir, command, "k4")
        assert cli(state_dir, "approve", asked["approvalSlug"], "allow-once").returncode == 0
        await wait_until(lambda: log.exists() and log.read_text() == "run\n", timeout=30)
        daemon.restart()  # SIGKILL mid-run, then a new gateway
        operator_view = cli(state_dir, "approvals", "pending", "--json")
        assert json.loads(operator_view.stdout)["details"]["approvals"] == []
        time.sleep(1.0)  # a wrongly restored ask would start its second copy now
        # The adopted first copy is that run (its instance kept by the session host): linked, not "unknown"
        rows = json.loads(cli(state_dir, "approvals", "history", "--json").stdout)["details"]["approvals"]
        assert [r["run"]["status"] for r in rows if r["id"] == asked["approvalId"]] == ["running"], rows
        go.touch()
        assert log.read_text() == "run\n"


async def test_an_approved_foreground_run_is_not_run_again_after_a_crash(state_dir: Path) -> None:
    """The same with the caller waiting in the foreground and a console attached: the run had not yielded
    yet, so nothing but the ask on disk said what had happened."""
    import asyncio

    log, go, command = _long_run(state_dir)
    with Daemon(state_dir) as daemon:
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        call = asyncio.ensure_future(
            agent.request("exec", {"command": command, "agentId": "main", "sessionKey": "k5"})
        )
        pending = await wait_until(operator.pending_approvals, timeout=30)
        await operator.request("approve", {"id": pending[0]["id"], "decision": "allow-once"})
        await wait_until(lambda: log.exists() and log.read_text() == "run\n", timeout=30)
        daemon.restart()
        call.cancel()
        time.sleep(1.0)
        go.touch()
        time.sleep(0.5)
        assert log.read_text() == "run\n"


async def test_an_approved_run_said_to_be_starting_is_reported_never_started_again(state_dir: Path) -> None:
    """The other side of the same window: approved, said to be starting as a session no holder ever
    started (the gateway died first, or the run's files were removed with it since: the disk cannot tell
    which). `starting` on disk means "may have run": the next gateway reports it failed and never starts
    it (fresh round 17 c: an approved command never runs twice, whatever the disk lacks); the agent asks
    again."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    work.mkdir()
    log = work / "runs.log"
    with Daemon(state_dir) as daemon:
        asked = await _ask(state_dir, f"echo run >> {log}", "k6")
        daemon.kill()
        path = fold_pending(state_dir)
        data = json.loads(path.read_text())
        ask = data["asks"][0]
        ask.update(decision="allow-once", resolved_by="op", resolved_at_ms=ask["created_at_ms"] + 1)
        ask["run"] = {"sessionId": "never-spawned", "status": "starting", "host": "gateway"}
        path.write_text(json.dumps(data))
        daemon.start()

        async def failed() -> list[str]:
            return [t for t in await _events(state_dir, "k6") if t.startswith("Exec failed")]

        texts = await wait_until(failed, timeout=30)
        assert f"gateway id={asked['approvalId']}" in texts[0] and "not run again" in texts[0], texts
        await wait_until(lambda: stored_asks(state_dir) == [], timeout=30)  # settled: never asked again
        assert not log.exists(), "a run said to be starting was started by the next gateway"


async def test_every_session_coalesced_into_an_ask_gets_its_run_after_a_crash(
    state_dir: Path, tmp_path: Path
) -> None:
    """Two sessions ask the same question: one ask, two requesters, each promised its own run. After a
    SIGKILL and an approval under the next gateway, each runs once and each session hears of it."""
    write_config(state_dir, ALLOWLIST)
    out = tmp_path / "ran.txt"
    command = f"echo ran >> {out}"
    with Daemon(state_dir) as daemon:
        first = await _ask(state_dir, command, "k1")
        second = await _ask(state_dir, command, "k2")
        assert second["approvalId"] == first["approvalId"]  # coalesced
        daemon.restart()
        assert cli(state_dir, "approve", first["approvalSlug"], "allow-once").returncode == 0

        async def finished(key: str) -> list[str]:
            return [t for t in await _events(state_dir, key) if t.startswith("Exec finished")]

        for key in ("k1", "k2"):
            texts = await wait_until(lambda k=key: finished(k), timeout=30)
            assert f"gateway id={first['approvalId']}" in texts[0] and "code 0" in texts[0]
        await wait_until(lambda: stored_asks(state_dir) == [], timeout=10)
        assert out.read_text() == "ran\nran\n"  # once per session
        # Each session following the shared ask (approvals.status with its key) sees its own run.
        agent = await connect(state_dir, "agent", operator=False)
        try:
            runs = [
                (
                    await agent.request(
                        "approvals.status", {"approvalId": first["approvalId"], "sessionKey": k}
                    )
                )["details"]["run"]
                for k in ("k1", "k2")
            ]
        finally:
            await agent.close()
        assert [r["status"] for r in runs] == ["completed", "completed"]
        assert runs[0]["sessionId"] != runs[1]["sessionId"]
        daemon.restart()  # settled: a third gateway runs nothing again
        listed = cli(state_dir, "approvals", "pending", "--json")
        assert json.loads(listed.stdout)["details"]["approvals"] == []
        time.sleep(0.5)
        assert out.read_text() == "ran\nran\n"
