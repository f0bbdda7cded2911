"""Every agent write to a running session is decided under the policy in force now (handlers/process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.protocol.frames import RemoteError
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config


async def test_a_lockdown_refuses_the_agents_writes_and_lifting_it_restores_them(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir)
        try:
            started = await agent.request("exec", {"command": "cat", "background": True})
            sid = started["details"]["sessionId"]

            async def shows(text: str) -> bool:
                got = await agent.request("process", {"action": "log", "sessionId": sid})
                return text in got["text"]

            await agent.request("process", {"action": "write", "sessionId": sid, "data": "before\n"})
            await wait_until(lambda: shows("before"))
            lock = {"sessionKey": "agent:main", "directive": "/exec security=deny"}
            await operator.request("policy.override", lock)
            for action, extra in (("write", {"data": "x\n"}), ("send-keys", {"keys": ["Enter"]})):
                with pytest.raises(
                    RemoteError, match=r"input is refused: its exec policy is now security=deny"
                ):
                    await agent.request("process", {"action": action, "sessionId": sid, **extra})
            # The operator may always type into it.
            await operator.request("process", {"action": "write", "sessionId": sid, "data": "operator\n"})
            await wait_until(lambda: shows("operator"))
            await operator.request(
                "policy.override", {"sessionKey": "agent:main", "directive": "/exec reset"}
            )
            await agent.request("process", {"action": "write", "sessionId": sid, "data": "after\n"})
            await wait_until(lambda: shows("after"))
            await agent.request("process", {"action": "kill", "sessionId": sid})
        finally:
            await agent.close()
            await operator.close()
