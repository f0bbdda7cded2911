"""System events: short notices (e.g. "Exec completed …") queued per agent session key until drained."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine import ostext
from engine.principals import key_owner

if TYPE_CHECKING:
    from engine.sessions.spool import EventSpool

log = logging.getLogger(__name__)

MAX_EVENTS_PER_KEY = 100
# A node (or any sender) decides how long a text is and how many keys exist: both are capped here, where
# every event enters, so no queue can hold more than MAX_EVENTS_PER_KEY * MAX_EVENT_CHARS.
MAX_EVENT_CHARS = 4000
MAX_KEYS = 4096  # past this a queue of the owner holding the most is dropped (logged)
# Queues are counted per owner (the agent a key names; ownerless keys are the operator's): an agent that
# opens keys past its share drops its own oldest, and at the gateway-wide cap the owner holding the most
# loses its oldest. One agent's fresh keys never push out another agent's undelivered events.
MAX_KEYS_PER_OWNER = 1024
PAGE_BYTES = 256 * 1024  # one `events` answer: far below the control socket's 1 MiB frame cap

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

    def enqueue(self, session_key: str, text: str, *, share: tuple[str, int] | None = None) -> None:
        """Queue `text`. `share` = (prefix, n): texts starting with that prefix (one sender's) keep at most
        n places in the queue, their oldest going first, so that sender never pushes out anyone else's."""
        key = session_key.strip()[:256]
        if not key:
            return
        # A text naming a path the OS gave that is not UTF-8 (a stale run's cwd) in its one exact, showable
        # form (engine.ostext): the spool, every `events` page and every push of it stay UTF-8.
        text = ostext.shown(text)
        if len(text) > MAX_EVENT_CHARS:
            cut = len(text) - MAX_EVENT_CHARS + 40
            text = text[: MAX_EVENT_CHARS - 40] + f"… [{cut} characters cut]"
        queue = self._queues.pop(key, None)  # re-inserted last: dict order is least recently written first
        if queue is None:
            queue = deque(maxlen=self._max)
            self._make_room(key_owner(key))
        self._queues[key] = queue
        if share is not None:
            prefix, most = share
            theirs = [i for i, held in enumerate(queue) if held.startswith(prefix)]
            for i in reversed(theirs[: max(0, len(theirs) - most + 1)]):
                del queue[i]
        queue.append(text)
        self._persist()  # before anyone is told: an event announced is an event kept
        for listener in list(self._listeners):
            try:
                listener(key, text)
            except Exception:  # a broken listener must not stop delivery to the queue or to the others
                log.exception("system-event listener failed")

    def _make_room(self, owner: str | None) -> None:
        """Drop queues until `owner` may open one more: its own oldest past its share, else at the
        gateway-wide cap the oldest of whoever holds the most (so never the one of an owner holding less)."""
        while True:
            held = Counter(key_owner(k) for k in self._queues)
            if held[owner] >= MAX_KEYS_PER_OWNER:
                victim = owner
            elif len(self._queues) >= MAX_KEYS:
                victim = max(held, key=lambda who: held[who])
            else:
                return
            oldest = next(k for k in self._queues if key_owner(k) == victim)
            log.warning(
                "system events: %d queues (%d of %s); dropping %s's (its written to longest ago)",
                len(self._queues),
                held[victim],
                victim or "the operator",
                oldest,
            )
            del self._queues[oldest]

    def drain(self, session_key: str) -> list[str]:
        queue = self._queues.pop(session_key.strip(), None)
        if queue:
            self._persist()
        return list(queue) if queue else []

    def page(
        self, keys: list[str], start: int = 0, *, drain: bool = False, max_bytes: int = PAGE_BYTES
    ) -> tuple[list[tuple[str, str]], int | None]:
        """Events of `keys` in order from position `start` (of their concatenation), at most `max_bytes`
        of text (at least one event); (events, next start or None at the end). Draining removes exactly
        what is returned, and a drained read always starts at 0."""
        flat = [(k, t) for k in keys for t in self._queues.get(k, ())]
        start = 0 if drain else max(0, start)
        out: list[tuple[str, str]] = []
        size = 0
        for key, text in flat[start:]:
            size += len(text.encode("utf-8", "replace")) + len(key) + 32
            if out and size > max_bytes:
                break
            out.append((key, text))
        end = start + len(out)
        if drain and out:
            for key, _text in out:
                queue = self._queues.get(key)
                if queue:
                    queue.popleft()
                    if not queue:
                        del self._queues[key]
            self._persist()
        more = (len(flat) > len(out)) if drain else end < len(flat)
        return out, (0 if drain else end) if more else None

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
