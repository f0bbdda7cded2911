"""A decision is acted upon only once the pending journal says it too (not only the history): a deny the
agent was told of must not come back after a crash as an ask still waiting for the operator."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config
from tests.helpers.pending import stored_asks


async def test_a_deny_reaches_the_agent_only_once_the_journal_settled_the_ask(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        pending = server.services.pending_file
        gate, held = threading.Event(), threading.Event()
        append = pending.append

        def slow_append(lines: list[bytes], **kwargs: object) -> None:
            if any(b'"settled"' in line for line in lines):
                held.set()
                gate.wait(10)  # the settling line's fsync is slow
            append(lines, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(pending, "append", slow_append)
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        call = asyncio.ensure_future(
            agent.request("exec", {"command": "uname -s", "agentId": "main", "sessionKey": "k"})
        )
        rows = await wait_until(operator.pending_approvals, timeout=30)
        await wait_until(lambda: len(stored_asks(state_dir)) == 1)  # the ask is on disk
        await operator.request("approve", {"id": rows[0]["id"], "decision": "deny"})
        await asyncio.to_thread(held.wait, 10)
        await asyncio.sleep(0.3)
        assert not call.done()  # the history has the deny; the journal does not yet
        assert len(stored_asks(state_dir)) == 1
        gate.set()
        res = await asyncio.wait_for(call, 30)
        assert res["details"]["status"] == "denied"
        assert stored_asks(state_dir) == []  # what a restart now finds: nothing waiting
        await agent.close()
        await operator.close()
