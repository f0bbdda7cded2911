"""Past one session host's open-file limit, new sessions go to a second host (engine.sessions.hosts): all
of them run, a crashed gateway adopts them from both hosts, and input and output still reach each one."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

from engine.sessions import procs
from engine.sessions.hostlink import FD_RESERVE
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import FULL, connect, wait_until, write_config
from tests.runner.durable.test_sessions_survive import _log_has, _process

LIMIT = 300  # the first host's RLIMIT_NOFILE, lowered under it: room for (300 - reserve) / 2 sessions
SESSIONS = 120


async def _hosts(state: Path) -> list[dict]:
    operator = await connect(state, "console")
    try:
        status = await operator.request("status", {})
    finally:
        await operator.close()
    return list((status.get("sessionHost") or {}).get("hosts") or [])


async def _start_many(state: Path, commands: list[str], work: Path) -> list[str]:
    agent = await connect(state, "agent", operator=False)
    try:
        ids: list[str] = []
        for first in range(0, len(commands), 20):
            batch = [
                agent.request(
                    "exec", {"command": c, "agentId": "main", "background": True, "workdir": str(work)}
                )
                for c in commands[first : first + 20]
            ]
            for res in await asyncio.gather(*batch):
                assert res["details"]["status"] == "running", res["text"]
                ids.append(str(res["details"]["sessionId"]))
        return ids
    finally:
        await agent.close()


async def test_sessions_past_a_full_host_go_to_a_second_one_and_survive_a_crash(
    state_dir: Path, tmp_path: Path
) -> None:
    # One agent holds all 120 sessions here: lift its per-agent caps (issue 27 §2) past what the test needs.
    write_config(state_dir, FULL + f"maxSessionsPerAgent = {SESSIONS}\nmaxOutputBytesPerAgent = {1 << 40}\n")
    work = tmp_path / "w"
    work.mkdir()
    with Daemon(state_dir) as daemon:
        first = await _start_many(state_dir, ["cat"], work)
        [host] = await _hosts(state_dir)
        # The first host can hold far fewer files from now on; a new gateway learns it at hello.
        resource.prlimit(host["pid"], resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
        daemon.kill()
        daemon.start()
        await wait_until(lambda: _log_has(state_dir, first[0], ""), timeout=30)
        commands = ["exec sleep 3600"] * (SESSIONS - 2) + ["cat"]
        ids = first + await _start_many(state_dir, commands, work)
        hosts = await _hosts(state_dir)
        assert len(hosts) == 2, hosts
        assert hosts[0]["pid"] == host["pid"] and hosts[1]["pid"] != host["pid"]
        assert hosts[0]["fdLimit"] == LIMIT
        assert hosts[0]["fdsUsed"] + FD_RESERVE <= LIMIT  # the first host kept its reserve
        assert hosts[0]["sessions"] + hosts[1]["sessions"] == SESSIONS
        assert hosts[1]["sessions"] > 0
        assert Path(hosts[1]["dir"]).parent == Path(hosts[0]["dir"])

        daemon.kill()  # a crash: the next gateway finds both hosts' sessions
        daemon.start()
        listed = (await _process(state_dir, "list"))["details"]["sessions"]
        assert sorted(r["sessionId"] for r in listed if r["status"] == "running") == sorted(ids)
        assert [h["pid"] for h in await _hosts(state_dir)] == [hosts[0]["pid"], hosts[1]["pid"]]
        for sid, host_row in ((ids[0], hosts[0]), (ids[-1], hosts[1])):  # a `cat` in each host
            await _process(state_dir, "write", sessionId=sid, data=f"to-{host_row['pid']}\n")
            await wait_until(lambda s=sid, h=host_row: _log_has(state_dir, s, f"to-{h['pid']}"), timeout=30)

        operator = await connect(state_dir, "console")
        try:
            await operator.request("shutdown", {"killSessions": True})
        finally:
            await operator.close()
        daemon.proc.wait(timeout=60)  # type: ignore[union-attr]
    # Nothing left to hold: both hosts go, leaving no process behind.
    for row in hosts:
        await wait_until(lambda pid=row["pid"]: not procs.alive(pid), timeout=30)
