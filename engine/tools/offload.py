"""One worker-thread hop for all the policy checks queued at one moment.

A decision reads files (config stamp, approvals file, PATH lookups): it runs off the event loop. One
`to_thread` per exec made 1,000 concurrent asks cost ~1 ms of CPU each, mostly threads passing the GIL
back and forth; batching what is queued at one moment onto one hop halved that (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class Offload:
    """Runs blocking calls (evaluate stats files) in a worker thread, one thread hop per burst: with
    hundreds of asks in flight a hop per call cost more than the calls, in GIL hand-offs between
    pool threads. Calls run in arrival order; each caller gets its own result or exception."""

    def __init__(self) -> None:
        self._queue: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._drainer: asyncio.Task[None] | None = None

    async def run(self, call: Callable[[], Any]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((call, future))
        if self._drainer is None:
            self._drainer = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        batch: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                outcomes = await asyncio.to_thread(_call_each, [call for call, _ in batch])
                for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                    if future.done():
                        continue  # the caller was cancelled
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        finally:
            self._drainer = None
            for _, future in batch + self._queue:  # cancelled with the loop: nobody may wait forever
                future.cancel()
            self._queue = []


def _call_each(calls: list[Callable[[], Any]]) -> list[tuple[bool, Any]]:
    outcomes: list[tuple[bool, Any]] = []
    for call in calls:
        try:
            outcomes.append((True, call()))
        except Exception as exc:
            outcomes.append((False, exc))
    return outcomes
