"""The node's events a gateway must get (a run's end, a session's notice): numbered, and kept until the
gateway acknowledges them. A write that succeeded proves nothing: a link can drop with an event in a pipe
or a socket buffer on its way, so whatever was not acknowledged is sent again on the next link (the
gateway handles each number once).

Each gateway (the namespace of the key its link proved, runner.node.gateways; "" for links that proved
none) keeps its events in a share of its own: at most MAX_UNACKED events, its oldest dropped past that, and
all shares together at most MAX_KEPT_BYTES, past which the share holding the most bytes loses its oldest.
So a link that never acknowledges (any login of the node's account can open one) only ever pushes out its
own events: a gateway holding no more than an equal part of the bytes never loses one to another's."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging

from engine.nodes.wire import NodeEvent

log = logging.getLogger("exechost.node")

MAX_UNACKED = 1000  # events kept for one gateway that is away; past it its oldest go (counted, and said)
MAX_KEPT_BYTES = 32 << 20  # encoded events kept for all gateways together (each at most ~MAX_LINE)
MAX_SHARES = 1024  # gateways with nothing kept but a count of drops, remembered to say it; past it, forgotten


@dataclasses.dataclass
class _Share:
    events: collections.deque[tuple[NodeEvent, int]] = dataclasses.field(default_factory=collections.deque)
    size: int = 0  # encoded bytes of `events`
    dropped: int = 0  # pushed out unacknowledged since this was last said


class Outbox:
    def __init__(
        self, most: int = MAX_UNACKED, most_bytes: int = MAX_KEPT_BYTES, most_shares: int = MAX_SHARES
    ) -> None:
        # One count for every gateway: a gateway's numbers only grow, even when its share was emptied and
        # made again (the gateway skips a number it has handled: a fresh count would look handled).
        self._seqs = itertools.count(1)
        self._most = most
        self._most_bytes = most_bytes
        self._most_shares = most_shares
        self._shares: dict[str, _Share] = {}
        self._size = 0

    def number(self, namespace: str, event: NodeEvent, size: int) -> NodeEvent:
        """`event` (`size` bytes encoded) with its number, kept for the gateway of `namespace` until it
        acknowledges it."""
        numbered = NodeEvent(event.event, event.payload, seq=next(self._seqs))
        share = self._shares.get(namespace)
        if share is None:
            self._forget_empty()
            share = self._shares[namespace] = _Share()
        if len(share.events) >= self._most:
            self._drop_oldest(share)
        share.events.append((numbered, size))
        share.size += size
        self._size += size
        while self._size > self._most_bytes:
            # The share holding the most loses (at a tie, the one that grew last: the one adding now).
            self._drop_oldest(max(self._shares.values(), key=lambda s: (s.size, _newest(s))))
        return numbered

    def _drop_oldest(self, share: _Share) -> None:
        _event, size = share.events.popleft()
        share.size -= size
        self._size -= size
        share.dropped += 1

    def _forget_empty(self) -> None:
        """Room for another share: past MAX_SHARES, those that hold nothing are forgotten (said first)."""
        if len(self._shares) < self._most_shares:
            return
        lost = 0
        for namespace, share in list(self._shares.items()):
            if not share.events:
                lost += share.dropped
                del self._shares[namespace]
        if lost:
            log.warning("%d events were dropped for gateways that were away (not said to them)", lost)

    def acked(self, namespace: str, up_to: int) -> None:
        """The gateway of `namespace` has handled its events up to `up_to`: they go (only its own: a node
        other gateways share keeps theirs for them)."""
        share = self._shares.get(namespace)
        if share is None:
            return
        while share.events and (share.events[0][0].seq or 0) <= up_to:
            _event, size = share.events.popleft()
            share.size -= size
            self._size -= size
        if not share.events and not share.dropped:
            del self._shares[namespace]

    def unacked(self, namespace: str) -> list[NodeEvent]:
        """What that gateway's next link must carry first, oldest first (a copy: new events may come)."""
        share = self._shares.get(namespace)
        return [event for event, _size in share.events] if share is not None else []

    def dropped(self, namespace: str) -> int:
        share = self._shares.get(namespace)
        return share.dropped if share is not None else 0

    def take_dropped(self, namespace: str) -> int:
        """How many of that gateway's events were pushed out unacknowledged since it was last asked."""
        share = self._shares.get(namespace)
        if share is None:
            return 0
        dropped, share.dropped = share.dropped, 0
        if not share.events:
            del self._shares[namespace]
        return dropped

    @property
    def size(self) -> int:
        """Encoded bytes kept for all gateways."""
        return self._size


def _newest(share: _Share) -> int:
    return (share.events[-1][0].seq or 0) if share.events else 0
