"""Allowlist use stamps leave the event loop and come in batches (engine/tools/uses.py), against a real
approvals file: the first use is on disk at once, a burst is one rewrite, `close()` keeps the last ones."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from engine.approvals.store import ApprovalsStore, Use
from engine.tools.uses import UseStamps


def test_first_use_at_once_then_a_burst_in_one_write(tmp_path: Path) -> None:
    store = ApprovalsStore(tmp_path / "exec-approvals.json")
    a = store.add_allowlist("main", "/usr/bin/true")
    b = store.add_allowlist("main", "/usr/bin/env")
    writes: list[tuple[list[Use], str]] = []

    def write(uses: Sequence[Use]) -> None:
        writes.append((list(uses), threading.current_thread().name))
        store.record_uses(uses)

    async def go() -> None:
        stamps = UseStamps(write, min_interval=0.2)
        stamps.add(Use("main", a.id, "true 0", "/usr/bin/true", 1000))
        await asyncio.sleep(0.05)
        assert len(writes) == 1  # the first use is written at once
        for i in range(1, 50):
            stamps.add(Use("main", a.id, f"true {i}", "/usr/bin/true", 1000 + i))
        stamps.add(Use("main", b.id, "env", "/usr/bin/env", 2000))
        await asyncio.sleep(0.05)
        assert len(writes) == 1  # within the interval: held
        await asyncio.sleep(0.3)
        assert len(writes) == 2 and len(writes[1][0]) == 2  # one write, the latest use per entry
        stamps.add(Use("main", b.id, "env -i", "/usr/bin/env", 3000))
        await stamps.close()  # queued, not yet due: written by close
        assert len(writes) == 3

    asyncio.run(go())
    assert all(name != threading.main_thread().name for _, name in writes)  # never on the loop's thread
    entries = {e.id: e for e in store.load().agents["main"].allowlist}
    assert (entries[a.id].last_used_at, entries[a.id].last_used_command) == (1049, "true 49")
    assert (entries[b.id].last_used_at, entries[b.id].last_used_command) == (3000, "env -i")


def test_a_failed_write_is_logged_not_raised(tmp_path: Path) -> None:
    def write(uses: Sequence[Use]) -> None:
        raise OSError("disk full")

    async def go() -> None:
        stamps = UseStamps(write, min_interval=0)
        stamps.add(Use("main", "x", "true", None, 1))
        await asyncio.sleep(0.05)
        stamps.add(Use("main", "x", "true", None, 2))
        await stamps.close()

    asyncio.run(go())
