"""runner.node.outbox: each gateway's unacknowledged events in a share of its own, so a link that never
acknowledges pushes out only its own events, and all shares together stay within a byte budget."""

from __future__ import annotations

from engine.nodes.wire import NodeEvent
from runner.node.outbox import Outbox


def _event(n: int) -> NodeEvent:
    return NodeEvent("system.event", {"sessionKey": "k", "text": f"e{n}"})


def _texts(outbox: Outbox, namespace: str) -> list[str]:
    return [str(e.payload["text"]) for e in outbox.unacked(namespace)]


def test_a_gateway_that_never_acks_drops_only_its_own_events() -> None:
    outbox = Outbox(most=10)
    outbox.number("a/", _event(0), 100)
    for n in range(1, 2001):
        outbox.number("", _event(n), 100)
    assert _texts(outbox, "a/") == ["e0"]
    assert _texts(outbox, "") == [f"e{n}" for n in range(1991, 2001)]  # its newest, oldest first
    assert (outbox.dropped(""), outbox.dropped("a/")) == (1990, 0)
    assert outbox.take_dropped("") == 1990 and outbox.dropped("") == 0


def test_past_the_byte_budget_the_largest_share_loses_its_oldest() -> None:
    outbox = Outbox(most=1000, most_bytes=1000)
    outbox.number("a/", _event(0), 300)
    for n in range(1, 100):
        outbox.number("b/", _event(n), 100)
    assert _texts(outbox, "a/") == ["e0"]  # 300 of 1000 bytes: under an equal part, never pushed out
    assert _texts(outbox, "b/") == [f"e{n}" for n in range(93, 100)]
    assert outbox.size == 1000
    # at a tie the share adding now loses, never the one that waits
    tie = Outbox(most=1000, most_bytes=300)
    tie.number("a/", _event(0), 200)
    tie.number("b/", _event(1), 200)
    assert _texts(tie, "a/") == ["e0"] and _texts(tie, "b/") == [] and tie.dropped("b/") == 1


def test_an_ack_takes_only_that_gateways_events_and_numbers_only_grow() -> None:
    outbox = Outbox()
    first = outbox.number("a/", _event(0), 10)
    other = outbox.number("b/", _event(1), 10)
    assert first.seq is not None and other.seq is not None
    outbox.acked("a/", other.seq)  # a number past its own: still only its own go
    assert outbox.unacked("a/") == [] and _texts(outbox, "b/") == ["e1"]
    again = outbox.number("a/", _event(2), 10)  # its share was emptied and made again
    assert again.seq is not None and again.seq > other.seq
    outbox.acked("b/", other.seq)
    assert outbox.size == 10


def test_shares_that_hold_nothing_are_forgotten_past_the_most() -> None:
    outbox = Outbox(most=1, most_shares=4)
    for n in range(4):
        outbox.number(f"g{n}/", _event(n), 10)
        outbox.number(f"g{n}/", _event(n), 10)  # one dropped: the share is kept to say so
        outbox.acked(f"g{n}/", 10**9)
    assert all(outbox.dropped(f"g{n}/") == 1 for n in range(4))
    outbox.number("new/", _event(9), 10)
    assert [outbox.dropped(f"g{n}/") for n in range(4)] == [0, 0, 0, 0]
    assert _texts(outbox, "new/") == ["e9"]
