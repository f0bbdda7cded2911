"""A loopback listener's connections that have not shown their token yet: a few slots, shed oldest first,
each closed after a short head timeout, so a peer that knows nothing cannot hold the listener's descriptors.

Any local account can open TCP connections to 127.0.0.1, and a token in the request head is checked only
once the head is in: until then a connection costs a descriptor (and a task) and proves nothing. The web
console and the browser door admitted every one, the door for 10 s each; 1,100 idle ones made the
console's accept() fail with EMFILE. Here such a connection waits in one of `slots`; a new arrival when
all are taken closes the oldest (a peer that stalls loses its slot to the next, so the operator's own
connection, whose head follows at once, gets in), and one that is not admitted within `timeout` seconds
is closed. What has shown its token is admitted and no longer counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

SLOTS = 64  # unauthenticated connections held at once, per listener
HEAD_TIMEOUT_S = 5.0  # from accept to a head that shows the token


class PreAuth:
    """The unauthenticated connections of one listener, oldest first, each with its closer and timer."""

    def __init__(self, slots: int = SLOTS, timeout: float = HEAD_TIMEOUT_S) -> None:
        self.slots = slots
        self.timeout = timeout
        self.shed_count = 0  # connections closed unauthenticated (for the operator's logs and tests)
        self._waiting: dict[Hashable, tuple[Callable[[], None], asyncio.TimerHandle]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def arrived(self, key: Hashable, close: Callable[[], None]) -> None:
        """A connection was accepted: it takes a slot (the oldest waiting one is closed when none is free),
        and `close` ends it unless it is admitted within the timeout. `close` must not raise."""
        while len(self._waiting) >= self.slots:
            self.shed(next(iter(self._waiting)))
        timer = asyncio.get_running_loop().call_later(self.timeout, self.shed, key)
        self._waiting[key] = (close, timer)

    def admitted(self, key: Hashable) -> None:
        """It showed its token: no longer counted or timed."""
        entry = self._waiting.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def gone(self, key: Hashable) -> None:
        """It ended before showing a token: its slot is free."""
        self.admitted(key)

    def shed(self, key: Hashable) -> None:
        """Close a connection that is still unauthenticated (no-op once admitted or gone)."""
        entry = self._waiting.pop(key, None)
        if entry is None:
            return
        close, timer = entry
        timer.cancel()
        self.shed_count += 1
        close()
