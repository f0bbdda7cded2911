"""System events: short notices (e.g. "Exec completed …") queued per agent session key until drained."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.sessions.spool import EventSpool

log = logging.getLogger(__name__)

MAX_EVENTS_PER_KEY = 100

EventListener = Callable[[str, str], None]


class SystemEvents:
    """Per-session-key queues of event texts, bounded (oldest dropped), with push listeners."""

    def __init__(self, max_per_key: int = MAX_EVENTS_PER_KEY, spool: EventSpool | None = None) -> None:
        self._queues: dict[str, deque[str]] = {}
        self._max = max_per_key
        self._listeners: list[EventListener] = []
        # Undelivered events on disk (the gateway's): what the last gateway left is queued again.
        self._spool = spool
        if spool is not None:
            for key, texts in spool.load().items():
                self._queues[key] = deque(texts, maxlen=self._max)

    def _persist(self) -> None:
        if self._spool is not None:
            self._spool.save({key: list(queue) for key, queue in self._queues.items()})

    def enqueue(self, session_key: str, text: str) -> None:
        key = session_key.strip()
        if not key:
            return
        queue = self._queues.setdefault(key, deque(maxlen=self._max))
        queue.append(text)
        self._persist()  # before anyone is told: an event announced is an event kept
        for listener in list(self._listeners):
            try:
                listener(key, text)
            except Exception:  # a broken listener must not stop delivery to the queue or to the others
                log.exception("system-event listener failed")

    def drain(self, session_key: str) -> list[str]:
        queue = self._queues.pop(session_key.strip(), None)
        if queue:
            self._persist()
        return list(queue) if queue else []

    def peek(self, session_key: str) -> list[str]:
        return list(self._queues.get(session_key.strip(), ()))

    def keys(self) -> list[str]:
        return [key for key, queue in self._queues.items() if queue]

    def subscribe(self, listener: EventListener) -> Callable[[], None]:
        """Call `listener(session_key, text)` on every enqueue; returns the unsubscribe function."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe
