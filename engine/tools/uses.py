"""Allowlist "last used" stamps, written off the event loop and in batches: stamping exec-approvals.json on
every allowlisted run (lock, rewrite, two fsyncs) blocked the loop for ~4 ms per exec on a node (issue 19).
The first use is written at once; uses that arrive while a write runs, or within a second of the last one,
go in the next write, so a burst of runs costs one rewrite a second. `close()` writes what is left."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from engine.approvals.store import Use

log = logging.getLogger(__name__)

MIN_INTERVAL_SEC = 1.0  # between two rewrites of the approvals file for stamps alone


class UseStamps:
    """Collects uses (the latest per entry wins) and writes them with `write(uses)` in a worker thread."""

    def __init__(
        self, write: Callable[[Sequence[Use]], None], min_interval: float = MIN_INTERVAL_SEC
    ) -> None:
        self._write = write
        self._min_interval = min_interval
        self._queued: dict[tuple[str, str], Use] = {}
        self._writer: asyncio.Task[None] | None = None
        self._last_write = 0.0

    def add(self, use: Use) -> None:
        self._queued[(use.agent_id, use.entry_id)] = use
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            while self._queued:
                wait = self._last_write + self._min_interval - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._flush()
        finally:
            self._writer = None

    async def _flush(self) -> None:
        batch, self._queued = list(self._queued.values()), {}
        self._last_write = time.monotonic()
        try:
            await asyncio.to_thread(self._write, batch)
        except Exception as exc:  # bookkeeping only: never fail a run on it
            log.warning("could not record allowlist use: %s", exc)

    async def close(self) -> None:
        """Write what is queued now (a stopping gateway or node keeps its last stamps)."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        if self._queued:
            await self._flush()
