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
import contextvars
import functools
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# The operator's own queue: its calls (its own exec, even one naming an agent for policy; its history reads
# and checks) never wait in an agent's turn (fresh round 17 b: main's slow decisions held the operator's).
OPERATOR_QUEUE = "\x00operator"


def queue_of(operator: bool, principal: str) -> str:
    """Whose turn a call takes: the operator's own queue for the operator's calls, else the principal's."""
    return OPERATOR_QUEUE if operator else principal


_Job = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


class FairPool:
    """`await pool.run(principal, call, caller)`: call() in a worker thread, its result or exception to the
    caller. Calls of one principal run one at a time; principals with work take turns, and within one its
    callers take turns (each caller's calls in arrival order)."""

    def __init__(self, name: str, workers: int = 2, per_principal: int = 1, lane: str | None = None) -> None:
        self.name = name
        self.workers = workers
        self.per_principal = per_principal  # calls of one principal on workers at once
        # A queue with a worker of its own (the operator's): the other queues together hold at most
        # `workers` workers, and one more thread is kept for it, so however many agents each hold their
        # share with a long call (a large file hashed), its call starts at once (fresh round 18 b).
        self.lane = lane
        self._threads_max = workers + (1 if lane is not None else 0)
        self._shared = 0  # calls of queues other than `lane` on workers now
        self._cond = threading.Condition()
        # Principals with calls waiting, then their callers; dict order is whose turn is next.
        self._queues: dict[str, dict[str, deque[_Job]]] = {}
        self._running: dict[str, int] = {}  # principals with calls on workers now, and how many
        self._threads = 0
        self._idle = 0

    async def run(self, principal: str, call: Callable[[], T], caller: str = "") -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        # In the caller's context, as asyncio.to_thread runs it: what the call acts under (the request's
        # credential stamp, engine.approvals.generations) reaches its points of use in the worker too.
        call = functools.partial(contextvars.copy_context().run, call)
        with self._cond:
            self._queues.setdefault(principal, {}).setdefault(caller, deque()).append((call, future, loop))
            if not self._wake() and self._threads < self._threads_max:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()
        return await future

    def _wake(self) -> bool:
        """Wake one idle worker, counted as busy from now: calls arriving before it runs wake another, or
        start one (under the lock)."""
        if not self._idle:
            return False
        self._idle -= 1
        self._cond.notify()
        return True

    def waiting(self, principal: str) -> int:
        """Calls of `principal` not yet started (tests, status)."""
        with self._cond:
            return sum(len(queue) for queue in self._queues.get(principal, {}).values())

    def _take(self) -> tuple[str, _Job] | None:
        """The next call: the first principal in turn that has none running, its first caller in turn; both
        go to the back."""
        for principal in self._queues:
            shared = principal != self.lane
            if shared and self._shared >= self.workers:
                continue  # the lane's worker is never taken by the other queues
            if self._running.get(principal, 0) < self.per_principal:
                callers = self._queues.pop(principal)
                caller = next(iter(callers))
                queue = callers.pop(caller)
                job = queue.popleft()
                if queue:
                    callers[caller] = queue
                if callers:
                    self._queues[principal] = callers
                self._running[principal] = self._running.get(principal, 0) + 1
                self._shared += shared
                return principal, job
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                picked = self._take()
                while picked is None:
                    self._idle += 1  # taken off again by whoever wakes it (_wake)
                    self._cond.wait()
                    picked = self._take()
            principal, (call, future, loop) = picked
            outcome: tuple[bool, Any] = (True, None)
            if not future.cancelled():  # read from another thread: at worst a cancelled call still runs
                try:
                    outcome = (True, call())
                except Exception as exc:
                    outcome = (False, exc)
            with self._cond:
                left = self._running.pop(principal, 1) - 1
                if left:
                    self._running[principal] = left
                if principal != self.lane:
                    self._shared -= 1
                if principal in self._queues:
                    self._wake()  # its next call may go to an idle worker
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


# Whose request this task serves, (principal, caller): set by the gateway per agent request, so engine code
# several calls deep (a session's log read, a sandbox's Docker call) queues the work as that agent's.
# None: the operator's or the engine's own work, which keeps asyncio's default pool (no agent's runs there).
acting: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "fairpool_acting", default=None
)


def act_as(principal: str, caller: str = "") -> None:
    """This request task (and what it awaits) works for agent `principal`."""
    acting.set((principal, caller))


async def offload(pool: FairPool, call: Callable[[], T]) -> T:
    """call() off the event loop: in `pool` as the acting agent's, or on the default pool (the operator)."""
    who = acting.get()
    if who is None:
        return await asyncio.to_thread(call)
    return await pool.run(who[0], call, who[1])


async def to_thread(call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`asyncio.to_thread`, for work an agent's request causes: in `blocking`, as that agent's."""
    return await offload(blocking, functools.partial(call, *args, **kwargs))


# Every principal's policy decisions (exec, policy.check, approvals.relay).
decisions = FairPool("exechost-decide", workers=2, lane=OPERATOR_QUEUE)
# Reads of the decision history (`approvals.status` of an older ask, `approvals.history`): one agent's burst
# of lookups waits in its own queue, never in front of the operator's or another agent's.
history = FairPool("exechost-history", workers=2, lane=OPERATOR_QUEUE)
# Agent credential lookups at the handshake: never queued behind anyone's decisions.
credentials = FairPool("exechost-credentials", workers=1)
# Reads of a session's output from disk (`process log`, `process poll`, `sessions.output` of a settled one):
# a 64 MiB log read is the reader's own work, queued as theirs.
reads = FairPool("exechost-reads", workers=2)
# The Docker engine and the spawn path's blocking steps (sandbox.list/explain/recreate, a host exec's view,
# its content check, a grant's use): an agent may keep as many calls going as asyncio's default pool had
# threads, never more than half the workers, so another agent's exec always finds one.
_DEFAULT_THREADS = min(32, (os.cpu_count() or 1) + 4)
blocking = FairPool("exechost-blocking", workers=2 * _DEFAULT_THREADS, per_principal=_DEFAULT_THREADS)
