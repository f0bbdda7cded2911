"""The node's events a gateway must get (a run's end, a session's notice): numbered, and kept until the
gateway acknowledges them. A write that succeeded proves nothing: a link can drop with an event in a pipe
or a socket buffer on its way, so whatever was not acknowledged is sent again on the next link (the
gateway handles each number once)."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable

from engine.nodes.wire import NodeEvent

MAX_UNACKED = 1000  # events kept for a gateway that is away; past it the oldest go (counted, and said)


class Outbox:
    def __init__(self, most: int = MAX_UNACKED) -> None:
        self._seqs = itertools.count(1)
        self._kept: collections.deque[NodeEvent] = collections.deque(maxlen=most)
        self.dropped = 0  # pushed out unacknowledged since this was last said

    def number(self, event: NodeEvent) -> NodeEvent:
        """`event` with its number, kept until acknowledged."""
        numbered = NodeEvent(event.event, event.payload, seq=next(self._seqs))
        if len(self._kept) == self._kept.maxlen:
            self.dropped += 1
        self._kept.append(numbered)
        return numbered

    def acked(self, up_to: int, seen: Callable[[NodeEvent], bool] = lambda _e: True) -> None:
        """The acknowledging gateway has handled its events up to `up_to`: only those it could `see` go (a
        node other gateways share keeps theirs for them)."""
        self._kept = collections.deque(
            (e for e in self._kept if (e.seq or 0) > up_to or not seen(e)), maxlen=self._kept.maxlen
        )

    def unacked(self) -> list[NodeEvent]:
        """What the next link must carry first, oldest first (a copy: new events may come meanwhile)."""
        return list(self._kept)
