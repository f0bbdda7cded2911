"""Variants of fresh round 17 b's request budget: what a waiting request holds is charged, not its frame."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config

pytestmark = pytest.mark.asyncio

MiB = 1 << 20


def _rss() -> int:
    """This process's resident bytes (the gateway runs in it)."""
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


async def test_class3_a_field_the_verb_knows_is_charged_what_it_holds(state_dir: Path) -> None:
    """As fresh round 17 b, but the ~1 MiB each waiting poll carries is a field the process tool does know
    (`keys`, a list of two-letter strings: 5 bytes of JSON, ~59 of Python each), so it is kept, not
    dropped. Held: the agent's waiting requests are charged what they hold, so its 16 MiB budget bounds
    them; those that do not fit wait unread (their frame alone, charged), and the agent holds about its
    budget, not 15 x 12 MiB."""
    write_config(state_dir, FULL)
    keys = ["ab"] * 200_000  # ~1,000,000 bytes of JSON, ~12 MB of Python
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, operator=False)
        more = [await connect(state_dir, operator=False) for _ in range(4)]
        operator = await connect(state_dir)
        try:
            res = await agent.request("exec", {"command": "sleep 300", "background": True})
            sid = str(res["details"]["sessionId"])
            base = _rss()
            params = {"action": "poll", "sessionId": sid, "timeout": 120_000, "keys": keys}
            polls = [
                asyncio.ensure_future(client.request("process", params))
                for client in (agent, *more)
                for _ in range(3)
            ]
            mine = [c for c in server.connections if not c.operator and c.agent == "main"]
            assert len(mine) == 5

            def settled() -> bool:  # every poll running, or every connection of the agent waiting for room
                running = server._intake.requests.get("main", 0)
                return running >= 15 or (running >= 1 and all(c.intake_full for c in mine))

            await wait_until(settled, timeout=60)
            held = _rss() - base
            await operator.request("process", {"action": "kill", "sessionId": sid})
            for poll in polls:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(poll, 60)
            assert held < 4 * 16 * MiB, f"one agent's waiting requests hold {held / MiB:.0f} MiB"
        finally:
            for client in (agent, *more, operator):
                await client.close()


async def test_class3_asks_on_the_approval_socket_hold_their_whole_frame_while_a_human_decides(
    state_dir: Path,
) -> None:
    """The same class on exec-approvals.sock: each connection's `request` frame (at most 256,000 bytes)
    waits for a human (up to the prompt timeout) and held its whole decoded frame meanwhile, fields the
    socket never reads included: ~250 KB of `{}`s is ~6 MB of Python, and its 64 connections held ~370 MB.
    Held: what waits for the human is the prompt (PromptRequest), not the frame it came in."""
    from engine.approvals.socket.server import ApprovalSocketServer, RateLimit
    from tests.engine.approvals.test_approval_socket import TOKEN, Inbox

    path = state_dir / "exec-approvals.sock"
    inbox = Inbox(delay=3600)  # nobody decides while the test looks
    pad = [{} for _ in range(80_000)]  # ~240,000 bytes of JSON: under the socket's 256,000-byte frame cap
    writers: list[asyncio.StreamWriter] = []
    async with ApprovalSocketServer(path, TOKEN, decider=inbox, rate_limit=RateLimit(burst=1000)):
        base = _rss()
        for n in range(64):
            body = {"command": f"ls /{n}", "cwd": "/tmp", "agentId": "main", "pad": pad}
            frame = {"type": "request", "token": TOKEN, "id": f"r{n}", "request": body}
            _reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
            await writer.drain()
            writers.append(writer)
        await wait_until(lambda: len(inbox.asked) == 64, timeout=60)
        held = _rss() - base
        for writer in writers:
            writer.close()
    assert held < 64 * MiB, f"64 asks waiting on the approval socket hold {held / MiB:.0f} MiB"
