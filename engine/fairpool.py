"""A few worker threads shared fairly: each principal's blocking calls wait in its own queue, in turn.

Decisions read and digest agent-writable files (a 64 MiB script takes a noticeable moment), so they run
off the event loop. On asyncio's default pool, first come first served, one agent's burst of checks put
every other agent's exec, and a connecting client's credential lookup, behind all of it (issue 27 §2).
Here a principal waits behind at most one call of each other principal with work, and runs on at most one
worker at a time; within a principal its callers (connections: every bare-token client is agent main)
take turns the same way. So a call that blocks (a FIFO, a slow disk) stalls only its own principal's
queue while the other workers serve everyone else. A worker runs calls back to back without a thread hop
per call (what engine/tools/offload.py's batching used to buy).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


class FairPool:
    """`await pool.run(principal, call, caller)`: call() in a worker thread, its result or exception to the
    caller. Calls of one principal run one at a time; principals with work take turns, and within one its
    callers take turns (each caller's calls in arrival order)."""

    def __init__(self, name: str, workers: int = 2) -> None:
        self.name = name
        self.workers = workers
        self._cond = threading.Condition()
        # Principals with calls waiting, then their callers; dict order is whose turn is next.
        self._queues: dict[str, dict[str, deque[_Job]]] = {}
        self._running: set[str] = set()  # principals with a call on a worker now
        self._threads = 0
        self._idle = 0

    async def run(self, principal: str, call: Callable[[], T], caller: str = "") -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._cond:
            self._queues.setdefault(principal, {}).setdefault(caller, deque()).append((call, future, loop))
            if self._idle == 0 and self._threads < self.workers:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()
            else:
                self._cond.notify()
        return await future

    def waiting(self, principal: str) -> int:
        """Calls of `principal` not yet started (tests, status)."""
        with self._cond:
            return sum(len(queue) for queue in self._queues.get(principal, {}).values())

    def _take(self) -> tuple[str, _Job] | None:
        """The next call: the first principal in turn that has none running, its first caller in turn; both
        go to the back."""
        for principal in self._queues:
            if principal not in self._running:
                callers = self._queues.pop(principal)
                caller = next(iter(callers))
                queue = callers.pop(caller)
                job = queue.popleft()
                if queue:
                    callers[caller] = queue
                if callers:
                    self._queues[principal] = callers
                self._running.add(principal)
                return principal, job
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                picked = self._take()
                while picked is None:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                    picked = self._take()
            principal, (call, future, loop) = picked
            outcome: tuple[bool, Any] = (True, None)
            if not future.cancelled():  # read from another thread: at worst a cancelled call still runs
                try:
                    outcome = (True, call())
                except Exception as exc:
                    outcome = (False, exc)
            with self._cond:
                self._running.discard(principal)
                if principal in self._queues:
                    self._cond.notify()  # its next call may go to an idle worker
            with contextlib.suppress(RuntimeError):  # the caller's loop closed meanwhile
                loop.call_soon_threadsafe(_settle, future, outcome)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return  # the caller was cancelled
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


# Every principal's policy decisions (exec, policy.check, approvals.relay).
decisions = FairPool("exechost-decide", workers=2)
# Reads of the decision history (`approvals.status` of an older ask, `approvals.history`): one agent's burst
# of lookups waits in its own queue, never in front of the operator's or another agent's.
history = FairPool("exechost-history", workers=2)
# Agent credential lookups at the handshake: never queued behind anyone's decisions.
credentials = FairPool("exechost-credentials", workers=1)
# The sandbox verbs an agent may call (`sandbox.list|explain|recreate`: Docker calls that take as long as the
# engine does): one agent's burst waits in its own queue, never on asyncio's default pool, which every
# host exec needs too (fresh round 8 o).
sandbox = FairPool("exechost-sandbox", workers=2)
