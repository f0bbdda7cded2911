"""Class 3 (limits per principal): one agent's burst of sandbox verbs against a slow Docker engine takes
nothing another agent's exec needs.

After attacker o (round 8, tests/attacks/test_fresh_round8_o.py,
`test_class3_one_agents_sandbox_list_burst_stalls_another_agents_exec`): `sandbox.list|explain|recreate`
ran on asyncio's default thread pool, which every host exec also needs (its view, its content check), first
come first served; one agent's calls held every thread. A Docker engine that answers late is stood in for
by a `list_runtimes` that waits on an Event the test sets at the end (no sleeps)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from engine import fairpool, principals
from tests.helpers.gateway import connect, gateway, wait_until, write_config


async def test_one_agents_sandbox_list_burst_leaves_another_agents_exec_and_list_alone(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.sandbox import admin

    slow = threading.Event()
    entered: list[str] = []

    def list_runtimes(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        entered.append(threading.current_thread().name)
        slow.wait(60)  # the engine answering late
        return []

    monkeypatch.setattr(admin, "list_runtimes", list_runtimes)
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    token = principals.mint(state_dir, "ops")
    work = state_dir.parent / "w"
    work.mkdir()
    burst_size = 40  # more than asyncio's default pool has threads (min(32, cpus + 4))
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        ops = await connect(state_dir, operator=False, credential=token)
        burst = [asyncio.ensure_future(main.request("sandbox.list", {})) for _ in range(burst_size)]
        mine: list[asyncio.Future[Any]] = []
        try:
            # main's calls wait in main's own queue: one of them at a time is with the engine.
            await wait_until(lambda: fairpool.sandbox.waiting("main") == burst_size - 1, timeout=30)
            assert len(entered) == 1 and entered[0].startswith("exechost-sandbox"), entered
            res = await asyncio.wait_for(
                ops.request("exec", {"command": "echo ops-ran", "workdir": str(work)}), timeout=30
            )
            assert "ops-ran" in res["text"], res
            # ops's own sandbox.list is not queued behind main's either: it reaches the engine too.
            mine.append(asyncio.ensure_future(ops.request("sandbox.list", {})))
            await wait_until(lambda: len(entered) == 2, timeout=30)
        finally:
            slow.set()
            answers = await asyncio.gather(*burst, *mine, return_exceptions=True)
            await main.close()
            await ops.close()
    assert len(answers) == burst_size + 1  # every call answered once the engine did, ops's too
    assert all(isinstance(a, dict) and a.get("containers") == [] for a in answers), answers[:2]
