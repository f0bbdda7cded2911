"""Issue 37 §1: the gateway answers before its kept sessions are adopted. `status` says how far adoption
is; a request naming a session not adopted yet waits for it (never "not found"), a list waits for all."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine.sessions import adopt
from tests.helpers.gateway import FULL, cli, connect, gateway, wait_until, write_config


async def test_status_and_requests_during_adoption(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")
    write_config(state_dir, FULL)
    work = tmp_path / "w"
    work.mkdir()
    sids: list[str] = []
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        for n in range(3):
            res = await agent.request(
                "exec",
                {"command": f"echo kept-{n}; sleep 600", "background": True, "workdir": str(work)},
            )
            sids.append(res["details"]["sessionId"])
        for sid in sids:

            async def printed(sid: str = sid) -> bool:
                out = await agent.request("process", {"action": "log", "sessionId": sid})
                return "kept-" in out["text"]

            await wait_until(printed, timeout=30)
        await agent.close()
    # The gateway stopped; the session host keeps the three. The next one adopts them, one held back here.
    blocked = sids[1]
    gate = asyncio.Event()
    real = adopt._adopt_one

    async def held_back(manager: Any, launcher: Any, paths: Any, meta: Any, live: bool) -> Any:
        if paths.session_id == blocked:
            await gate.wait()
        return await real(manager, launcher, paths, meta, live)

    monkeypatch.setattr(adopt, "_adopt_one", held_back)
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        status = await operator.request("status")
        assert status["adoption"]["total"] == 3 and status["adoption"]["done"] is False
        assert status["adoption"]["adopted"] < 3
        shown = await asyncio.to_thread(cli, state_dir, "gateway", "status")
        assert shown.returncode == 0 and "of 3 kept session(s)" in shown.stdout and "adopting" in shown.stdout

        agent = await connect(state_dir, "agent", operator=False)
        # The held-back session: its request waits for its adoption, and is never answered "not found".
        poll = asyncio.ensure_future(agent.request("process", {"action": "log", "sessionId": blocked}))
        listing = asyncio.ensure_future(agent.request("process", {"action": "list"}))
        # A request that touches no kept session is answered meanwhile (a new command runs).
        fresh = await agent.request("exec", {"command": "echo fresh", "workdir": str(work)})
        assert fresh["details"]["status"] == "completed" and fresh["details"]["aggregated"] == "fresh"
        assert fresh.get("details", {}).get("sessionId") not in sids
        assert not poll.done() and not listing.done()
        assert server.services.sessions.adopting(blocked)

        gate.set()
        out = await poll
        assert out["details"]["status"] == "running" and "kept-1" in out["text"]
        rows = (await listing)["details"]["sessions"]
        assert {r["sessionId"] for r in rows} >= set(sids)

        async def adopted() -> bool:
            return bool((await operator.request("status"))["adoption"]["done"])

        await wait_until(adopted, timeout=30)
        status = await operator.request("status")
        assert status["adoption"]["adopted"] == 3 and status["adoptedSessions"] == 3
        shown = await asyncio.to_thread(cli, state_dir, "gateway", "status")
        assert "adopted 3 kept session(s)" in shown.stdout
        for sid in sids:
            await agent.request("process", {"action": "kill", "sessionId": sid})
        await agent.close()
        await operator.close()


async def test_a_finished_session_is_adopted_from_disk(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One that ended and was reported before the restart is listed without reading its output; `log`
    and `poll` then read every byte from the session host's spool."""
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")
    write_config(state_dir, FULL)
    script = "for i in $(seq 1 300); do echo out-$i; done; echo oops >&2; exit 4"
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        sid = (await agent.request("exec", {"command": script, "background": True}))["details"]["sessionId"]

        async def ended() -> dict:
            out = await agent.request("process", {"action": "poll", "sessionId": sid, "timeout": 2000})
            return out if out["details"]["status"] != "running" else {}

        await wait_until(ended, timeout=30)
        before = (await agent.request("process", {"action": "list"}))["details"]["sessions"]
        await agent.close()
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        rows = (await agent.request("process", {"action": "list"}))["details"]["sessions"]
        session = server.services.sessions.get(sid)
        assert session is not None and session.output.settled and session.handle is not None
        assert not session.output.ring.chunks and session.output.pending["stdout"].length == 0
        row = next(r for r in rows if r["sessionId"] == sid)
        old = next(r for r in before if r["sessionId"] == sid)
        for field in ("status", "exitCode", "endedAt", "totalChars", "tail", "command", "startedAt"):
            assert row[field] == old[field], field
        log = await agent.request("process", {"action": "log", "sessionId": sid, "offset": 0, "limit": 400})
        assert log["text"].split("\n") == [f"out-{i}" for i in range(1, 301)] + ["oops"]
        poll = await agent.request("process", {"action": "poll", "sessionId": sid})
        assert poll["details"]["exitCode"] == 4 and "Process exited with code 4." in poll["text"]
        removed = await agent.request("process", {"action": "remove", "sessionId": sid})
        assert removed["details"]["status"] == "completed"
        assert not list((state_dir / "holders").glob(f"{sid}.*"))  # its files went with its row
        await agent.close()
