"""engine.sessions.quota: what an agent holds is counted from its own index, which must follow the
registry (a removed session gives its room back), never count the operator, and survive adoption."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.results import ToolError
from engine.sessions import RunSpec, SessionManager
from engine.sessions.quota import Quota, key_owner


def test_key_owner() -> None:
    assert key_owner("agent:ops") == "ops"
    assert key_owner("agent:ops:main") == "ops"
    # An ownerless key (and the prefix in another case, which owns_key does not accept) is the
    # operator's: it counts against no agent's quota.
    assert key_owner("Agent:ops:x:y") is None
    assert key_owner("plain") is None
    assert key_owner("") is None


async def _start(manager: SessionManager, scope: str, operator: bool = False) -> str:
    res = await manager.run(RunSpec(command="sleep 30", background=True, scope_key=scope, operator=operator))
    assert res.details["status"] == "running", res.text
    return str(res.details["sessionId"])


async def test_a_removed_session_gives_its_room_back(state_dir: Path) -> None:
    manager = SessionManager(state_dir, kill_grace_sec=0.5, quota=Quota(sessions=2, output_bytes=1 << 40))
    try:
        first = await _start(manager, "agent:ops:main")
        await _start(manager, "agent:ops:other")
        with pytest.raises(ToolError, match="agent ops has 2 sessions"):
            await _start(manager, "agent:ops:main")
        await _start(manager, "agent:dev:main")  # another agent: its own count
        await _start(manager, "agent:ops:main", operator=True)  # the operator's: counted for no agent
        await _start(manager, "plain")  # an ownerless key is the operator's too, whatever the caller
        await _start(manager, "plain")
        dropped = manager.registry.drop(first)  # its row gone (process remove, cleanup)
        assert dropped is not None
        await _start(manager, "agent:ops:main")  # its room is back
    finally:
        await manager.close()


async def test_output_caps_add_up_to_the_budget(state_dir: Path) -> None:
    mib = 1 << 20
    manager = SessionManager(state_dir, log_cap_bytes=4 * mib, quota=Quota(output_bytes=10 * mib))
    try:
        caps = []
        for _ in range(3):
            sid = await _start(manager, "agent:ops:main")
            session = manager.get(sid)
            assert session is not None
            caps.append(session.output.log_cap)
        assert caps == [4 * mib, 4 * mib, 2 * mib]  # the last one gets what is left
        with pytest.raises(ToolError, match="its whole budget"):
            await _start(manager, "agent:ops:main")
    finally:
        await manager.close()
