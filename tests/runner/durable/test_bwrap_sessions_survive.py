"""Issue 28 for host=sandbox with backend = "bwrap": sandbox sessions (pipes and a terminal) outlive a
SIGKILLed gateway exactly as Docker's do. The scope's sandbox is its keeper's child, not the gateway's; the
session host holds the pipe commands' FIFO ends and is the terminal's parent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.protocol.client import ControlClient
from engine.sandbox import bwrap
from engine.sandbox.settings import state_id
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import connect, wait_until, write_config

CONFIG = (
    '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
)

pytestmark = [pytest.mark.bwrap, needs_bwrap]


@pytest.fixture
def sandboxed(state_dir: Path) -> Iterator[Path]:
    write_config(state_dir, CONFIG)
    try:
        yield state_dir
    finally:
        bwrap.remove_all()
    # Removed after their gateway died (keepers nobody reaps at once): no pids cgroup stays behind.
    assert not list(Path("/sys/fs/cgroup/pids").glob(f"exechost-{state_id()}-*"))


async def _log(client: ControlClient, sid: str) -> str:
    got = await client.request("process", {"action": "log", "sessionId": sid, "limit": 100_000})
    return str(got.get("text") or "")


async def _has(client: ControlClient, sid: str, needle: str) -> str | None:
    text = await _log(client, sid)
    return text if needle in text else None


async def test_a_bwrap_sandbox_session_outlives_the_gateway(sandboxed: Path) -> None:
    state = sandboxed
    counter = "i=0; while [ $i -lt 60 ]; do echo line-$i; i=$((i+1)); sleep 0.05; done; echo done"
    reader = "while read l; do echo got-$l; done; echo reader-end"
    with Daemon(state) as daemon:
        agent = await connect(state, "agent", operator=False)
        a = (await agent.request("exec", {"command": counter, "background": True}))["details"]
        b = (await agent.request("exec", {"command": reader, "background": True}))["details"]
        quick = (await agent.request("exec", {"command": "exit 7", "background": True}))["details"]
        term = (await agent.request("exec", {"command": "cat", "background": True, "pty": True}))["details"]
        await agent.request(
            "process", {"action": "write", "sessionId": term["sessionId"], "data": "tty-one\n"}
        )
        assert a["status"] == "running" and a["ranOn"].startswith("sandbox"), a
        await agent.request("process", {"action": "write", "sessionId": b["sessionId"], "data": "one\n"})
        await wait_until(lambda: _has(agent, a["sessionId"], "line-3"), timeout=30)
        await wait_until(lambda: _has(agent, term["sessionId"], "tty-one"), timeout=30)
        await agent.close()
        daemon.kill()  # SIGKILL mid-output: the sandbox (its keeper's) and the session host carry on
        await asyncio.sleep(1.0)
        daemon.start()
        agent = await connect(state, "agent", operator=False)
        listed = {r["sessionId"]: r for r in await agent.list_sessions()}
        assert {a["sessionId"], b["sessionId"], quick["sessionId"]} <= set(listed), listed
        text = await wait_until(lambda: _has(agent, a["sessionId"], "done"), timeout=30)
        lines = [x for x in text.splitlines() if x.startswith("line-")]
        assert lines == [f"line-{i}" for i in range(60)]
        assert listed[quick["sessionId"]]["exitCode"] == 7
        await agent.request("process", {"action": "write", "sessionId": b["sessionId"], "data": "two\n"})
        await wait_until(lambda: _has(agent, b["sessionId"], "got-two"), timeout=30)
        assert "got-one" in await _log(agent, b["sessionId"])
        await agent.request("process", {"action": "kill", "sessionId": b["sessionId"]})
        await agent.request(
            "process", {"action": "write", "sessionId": term["sessionId"], "data": "tty-two\n"}
        )
        await wait_until(lambda: _has(agent, term["sessionId"], "tty-two"), timeout=30)
        await agent.request("process", {"action": "kill", "sessionId": term["sessionId"]})

        async def ended() -> bool:
            rows = {r["sessionId"]: r for r in await agent.list_sessions()}
            return all(rows[x["sessionId"]]["status"] != "running" for x in (b, term))

        await wait_until(ended, timeout=30)
        await agent.close()
