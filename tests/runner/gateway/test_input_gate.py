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


async def test_a_shell_full_opened_closes_when_the_agent_moves_to_allowlist(state_dir: Path) -> None:
    """`security=full` let `sh` start unasked and take any input; once the agent's policy is an allowlist,
    keys typed into that shell are commands no entry allows: refused as a new allowlist run's input would
    be. A `cat` started the same way reads its input as data and stays open; the operator may type."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir)
        try:
            shell = (await agent.request("exec", {"command": "sh", "background": True}))["details"][
                "sessionId"
            ]
            cat = (await agent.request("exec", {"command": "cat", "background": True}))["details"][
                "sessionId"
            ]

            async def shows(sid: str, text: str) -> bool:
                got = await agent.request("process", {"action": "log", "sessionId": sid})
                return text in got["text"]

            await agent.request("process", {"action": "write", "sessionId": shell, "data": "echo f-u-l-l\n"})
            await wait_until(lambda: shows(shell, "f-u-l-l"))
            lock = {"sessionKey": "agent:main", "directive": "/exec security=allowlist"}
            await operator.request("policy.override", lock)
            with pytest.raises(RemoteError, match=r"started under security=full .* now security=allowlist"):
                await agent.request("process", {"action": "write", "sessionId": shell, "data": "echo no\n"})
            await agent.request("process", {"action": "write", "sessionId": cat, "data": "data-ok\n"})
            await wait_until(lambda: shows(cat, "data-ok"))
            await operator.request("process", {"action": "write", "sessionId": shell, "data": "echo o-p\n"})
            await wait_until(lambda: shows(shell, "o-p"))
            await operator.request(
                "policy.override", {"sessionKey": "agent:main", "directive": "/exec reset"}
            )
            await agent.request(
                "process", {"action": "write", "sessionId": shell, "data": "echo a-g-a-i-n\n"}
            )
            await wait_until(lambda: shows(shell, "a-g-a-i-n"))
            for sid in (shell, cat):
                await agent.request("process", {"action": "kill", "sessionId": sid})
        finally:
            await agent.close()
            await operator.close()
