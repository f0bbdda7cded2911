"""An agent's unread input, held by the session host (one process for every agent's sessions), against its
budget (engine.sessions.quota): a write that does not fit is refused whole and said so, never answered as
written; input a command reads gives its room back (the host tells what it no longer holds), and a
session reattached by a later gateway is charged what the host still holds for it."""

from __future__ import annotations

from pathlib import Path

from engine.sessions import LocalLauncher, RunSpec, SessionManager
from engine.sessions.actions import run_action
from engine.sessions.host import HOLDERS_DIR, HostLauncher, HostProcess
from engine.sessions.quota import Quota
from tests.helpers.gateway import wait_until

KIB = 1024
MIB = 1024 * KIB


async def _start(manager: SessionManager, command: str, scope: str) -> str:
    res = await manager.run(RunSpec(command=command, background=True, scope_key=scope))
    assert res.details["status"] == "running", res.text
    return str(res.details["sessionId"])


async def _write(manager: SessionManager, sid: str, data: str) -> tuple[str, str]:
    res = await run_action(manager, "write", {"sessionId": sid, "data": data}, None)
    return str(res.details["status"]), res.text


def _held(manager: SessionManager, sid: str) -> int:
    session = manager.get(sid)
    assert session is not None and isinstance(session.handle, HostProcess)
    return session.handle.input_held


async def test_unread_input_is_charged_to_its_agent_and_read_input_gives_room_back(state_dir: Path) -> None:
    launcher = HostLauncher(state_dir / HOLDERS_DIR, fallback=LocalLauncher())
    quota = Quota(input_bytes=2 * MIB)
    manager = SessionManager(state_dir, kill_grace_sec=0.5, launcher=launcher, quota=quota)
    assert await launcher.connect() is not None, launcher.problem
    try:
        # A command that never reads: the host holds what its stdin (a socket: < 1 MiB) does not take.
        deaf = await _start(manager, "sleep 600", "agent:ops:a")
        chunk = "x" * (512 * KIB)
        for _ in range(4):
            assert (await _write(manager, deaf, chunk))[0] == "running"
        await wait_until(lambda: _held(manager, deaf) < 2 * MIB)  # told by the host
        before = _held(manager, deaf)
        status, text = await _write(manager, deaf, chunk * 2)
        assert status == "failed" and "agent ops's sessions hold" in text and "none of it was written" in text
        assert "Wrote" not in text and _held(manager, deaf) <= before
        # Another of ops's sessions shares the budget; another agent's do not.
        other = await _start(manager, "sleep 600", "agent:ops:b")
        assert (await _write(manager, other, chunk * 3))[0] == "failed"
        dev = await _start(manager, "sleep 600", "agent:dev:a")
        assert (await _write(manager, dev, chunk * 3))[0] == "running"
        # Input a command reads, or that goes with its end, is given back (told by the host).
        reader = await _start(manager, f"head -c {3 * 512 * KIB} >/dev/null; sleep 600", "agent:ops:c")
        await run_action(manager, "kill", {"sessionId": deaf}, None)
        await wait_until(lambda: _held(manager, deaf) == 0)
        for _ in range(3):
            assert (await _write(manager, reader, chunk))[0] == "running"
        await wait_until(lambda: _held(manager, reader) == 0)
        assert (await _write(manager, other, chunk * 4))[0] == "running"
        # A later gateway that attaches is charged what the host still holds for the session.
        await wait_until(lambda: _held(manager, other) < 2 * MIB)
        for sid in (reader, dev):
            await run_action(manager, "kill", {"sessionId": sid}, None)
        second = HostLauncher(state_dir / HOLDERS_DIR, fallback=LocalLauncher())
        try:
            assert await second.connect() is not None  # (takes the host over from the first)
            handle = await second.attach(second.paths(other), pty=False, marker="")
            assert handle is not None and handle.input_held > MIB
        finally:
            await second.close()
    finally:
        await manager.close()
        await launcher.close()
