"""Durable writes off the event loop, grouped: one fsync covers every history line queued meanwhile, and
the pending-asks snapshot is written once however many asks changed; a barrier waits until what was
queued before it is on disk, so a decision is acted upon only once it is recorded. A line nobody waits
for (what a decided ask led to) may ride with the next batch instead of costing an fsync of its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("exechost.durable")

# A lazy item is written with the next batch, or this long after it was queued when no batch comes: an
# fsync each (~0.2-0.9 ms on this disk, contending with the next ask's) for lines nobody waits on.
LAZY_WRITE_S = 0.02


class GroupWriter:
    """Items queued on the loop, written by a worker thread one batch at a time, in order.

    `write` gets every item queued since the last batch (a log appends them all with one fsync); with
    `latest_only` it gets only the newest (a snapshot file replaced whole). Items may be callables, encoded
    on the loop when their batch is taken, so a snapshot shows the state at that moment (records change
    only on the loop). `write` failing is logged and the batch counts as done: the gateway keeps serving,
    and the writer says why where the operator looks (`status`)."""

    def __init__(self, name: str, write: Callable[[list[bytes]], None], *, latest_only: bool = False) -> None:
        self.name = name
        self._write = write
        self._latest_only = latest_only
        self._items: list[bytes | Callable[[], bytes]] = []
        self._queued = 0  # items queued, ever
        self._written = 0  # of them, on disk (or failed and reported)
        self._wanted = 0  # written as soon as can be up to here (lazy items beyond it wait for a batch)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._lazy_timer: asyncio.TimerHandle | None = None

    def put(self, item: bytes | Callable[[], bytes], *, lazy: bool = False) -> None:
        """Queue `item`. `lazy`: nobody waits for it; it goes out with the next batch (one fsync for
        both), at the latest LAZY_WRITE_S later. A barrier waits for it like any other item."""
        if self._latest_only:
            self._items.clear()
        self._items.append(item)
        self._queued += 1
        if not lazy:
            self._want(self._queued)
            return
        if self._lazy_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._want(self._queued)  # no loop: written at once
                return
            self._lazy_timer = loop.call_later(LAZY_WRITE_S, self._lazy_due)

    def _lazy_due(self) -> None:
        self._lazy_timer = None
        self._want(self._queued)

    def _want(self, target: int) -> None:
        self._wanted = max(self._wanted, target)
        if self._written < self._wanted:
            self._kick()

    async def barrier(self) -> None:
        """Return once every item queued before this call is on disk (or failed, and said so)."""
        target = self._queued
        if self._written >= target:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        self._want(target)
        # Each caller has a future of its own: a cancelled caller cancels only that (no shield, which
        # would cost a loop iteration per wait).
        await future

    def flush_now(self) -> None:
        """Write what is queued in this thread (no loop to run the writer on)."""
        target, batch = self._take()
        self._write_batch(batch)
        self._done(target)

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # a sync caller with no loop: write at once
                self.flush_now()
                return
            self._task = loop.create_task(self._run())

    def _take(self) -> tuple[int, list[bytes]]:
        if self._lazy_timer is not None:  # every lazy item goes out with this batch
            self._lazy_timer.cancel()
            self._lazy_timer = None
        items, self._items = self._items, []
        # An item that encodes to b"" has nothing to write: a batch of only those costs no thread hop.
        batch = [item() if callable(item) else item for item in items]
        return self._queued, [data for data in batch if data]

    async def _run(self) -> None:
        while self._written < self._wanted:
            target, batch = self._take()
            if batch:
                await asyncio.to_thread(self._write_batch, batch)
            self._done(target)

    def _write_batch(self, batch: list[bytes]) -> None:
        if not batch:
            return
        try:
            self._write(batch)
        except Exception as exc:
            log.error("%s not written: %s", self.name, exc)

    def _done(self, target: int) -> None:
        self._written = max(self._written, target)
        keep = []
        for want, future in self._waiters:
            if want <= self._written:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((want, future))
        self._waiters = keep
