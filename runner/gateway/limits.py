"""How many connections the gateway admits, per principal, and how many bytes may wait for each one: one
agent (or many together) never takes what the operator or the other agents need."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Protocol

from engine.protocol.frames import MAX_FRAME_BYTES, ProtocolError

MAX_CONNECTIONS = 288  # authenticated, all principals together
OPERATOR_SLOTS = 16  # of those, the last ones: only the operator's connections may take them
MAX_PER_AGENT = 64  # one agent (a credential, a Unix account, or the bare gateway token's "main")
# A newcomers' share, as pending asks keep one (engine.approvals.room): the NEWCOMER_SLOTS before the
# operator's are only for an agent holding fewer than NEWCOMER_FLOOR connections. Agents past the floor
# share the first MAX_CONNECTIONS - OPERATOR_SLOTS - NEWCOMER_SLOTS (240) together, so four agents holding
# 60 each no longer leave a fifth none (fresh round 18 b): shutting an agent out takes eight more agents
# holding NEWCOMER_FLOOR each, on top of those filling the 240.
NEWCOMER_SLOTS = 32
NEWCOMER_FLOOR = 4
MAX_HANDSHAKING_PER_UID = 16  # connections of one peer account that have not said who they are yet
READ_PAUSE_BYTES = 4 << 20  # past this much waiting for a client, its next request is not read
MAX_BACKLOG_BYTES = 16 << 20  # past this, the client is cut off: responses count, not only events
# The cut-off is decided only as a frame is queued (Connection.send), by bytes; no timer cuts a client off.
# So a client that stops reading ends one of two ways, both bounded: cut off, when the answers it is owed
# for requests already read pass MAX_BACKLOG_BYTES; or paused, holding under it and read again only once
# it drains. Which one depends on how many of its requests were read before the pause, i.e. on how its
# writes arrived (one write: all read at once, server._serve starts them all before any answer queues).
# The same over all of one agent's connections (it may hold MAX_PER_AGENT of them): the connection whose
# next frame would take the agent past it is cut off.
MAX_BACKLOG_BYTES_PER_AGENT = 2 * MAX_BACKLOG_BYTES
MAX_OVERRIDES_PER_AGENT = 256  # session overrides one agent keeps (it may set tightening ones alone)
OVERRIDES_PAGE_BYTES = 256 * 1024  # one `policy.overrides` answer; `next` pages on
# Requests count on the way in too: a request keeps its frame's params for as long as it runs (a poll
# waits up to 120 s, an exec for its approval), so 512 in flight of 1 MiB each pinned 512 MiB per
# connection. Past these budgets the next request is not read until one finishes (one is always admitted
# when the connection, or the agent, has none running: a single frame is never refused for its size).
MAX_REQUEST_BYTES_IN_FLIGHT = 4 << 20  # one connection's requests being handled
MAX_REQUEST_BYTES_PER_AGENT = 16 << 20  # one agent's, over all its connections (the operator: none)
# A request also holds what its frame does not show: its task, coroutine frames and decoded params, ~6.0 KB
# for a waiting poll of 110 bytes (tracemalloc over 4,000 of them). Each request in flight is charged this on
# top of what its params hold, so the budgets above bound memory, not only bytes: 32,256 polls of 110 bytes
# fitted the frame budget and pinned 184 MB; one agent's 16 MiB now holds ~2,670 of them (16.5 MB traced),
# a connection's 4 MiB ~670 (more than MAX_IN_FLIGHT). Nothing is refused: past the budget the next
# request waits to be read, as a large frame's does.
# What its params hold is measured, not assumed from the frame (fresh round 17 b): `[{},{},…]` is 3 bytes
# of JSON and 72 of Python a `{}`, so 15 waiting polls of 1 MiB frames pinned ~370 MB of one agent's
# "16 MiB". A request is charged its frame's bytes or what its typed request holds (Message.held_bytes: the
# fields its method reads; every other field is dropped at decode), whichever is more. One request that
# holds more than a whole budget is still admitted alone (when its connection and its agent run none), so
# one agent holds at most its budget plus one request (a frame decodes to ~24x its bytes at most).
REQUEST_OVERHEAD_BYTES = 6 << 10
# A frame still arriving is held too: it is assembled by FrameReader, its bytes charged to the same budgets
# as they arrive (the stream below holds at most 2 x READ_CHUNK more before the kernel holds the rest),
# and once begun it must end within FRAME_DEADLINE_S.
READ_CHUNK = 64 << 10
FRAME_DEADLINE_S = 30.0


def refusal(operator: bool, agent: str, admitted: list[tuple[bool, str]]) -> str | None:
    """Why a connection that proved it is `agent` (or the operator) may not join those `admitted`
    ((operator?, agent) each), or None. The operator may use every slot; an agent neither more than its
    own share nor the operator's last slots, whatever the other agents hold, nor the newcomers' slots
    before those once it holds NEWCOMER_FLOOR connections."""
    total = len(admitted)
    if operator:
        return None if total < MAX_CONNECTIONS else f"too many connections (all {MAX_CONNECTIONS} in use)"
    mine = sum(1 for op, who in admitted if not op and who == agent)
    if mine >= MAX_PER_AGENT:
        return f"too many connections for agent {agent} ({MAX_PER_AGENT} per agent); close some of them"
    if total >= MAX_CONNECTIONS - OPERATOR_SLOTS:
        return (
            f"too many connections ({total} of {MAX_CONNECTIONS}; the last {OPERATOR_SLOTS} are kept for "
            "the operator)"
        )
    if mine >= NEWCOMER_FLOOR and total >= MAX_CONNECTIONS - OPERATOR_SLOTS - NEWCOMER_SLOTS:
        return (
            f"too many connections ({total} of {MAX_CONNECTIONS}; the {NEWCOMER_SLOTS} before the "
            f"operator's last {OPERATOR_SLOTS} are kept for agents holding fewer than {NEWCOMER_FLOOR}, and "
            f"agent {agent} holds {mine}); close some of them"
        )
    return None


class Peer(Protocol):
    operator: bool
    agent: str
    closed: bool
    intake_bytes: int
    intake_requests: int
    intake_full: bool


class Intake:
    """Bytes of requests being handled, per connection and per agent; a reader waits here for room."""

    def __init__(self) -> None:
        self.by_agent: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()  # requests being handled, per agent
        self._freed = asyncio.Event()

    def _fits(self, conn: Peer, size: int, held: int, request: bool) -> bool:
        """Room for `size` more bytes, `held` of which are counted already (its frame's, exchanged for
        them). A request fits alone when its connection (its agent) runs none: a frame still arriving on
        the connection is no request, and a request of more than the budget must not wait for it forever."""
        mine = conn.intake_bytes - held
        alone = not conn.intake_requests if request else not mine
        if not alone and mine + size > MAX_REQUEST_BYTES_IN_FLIGHT:
            return False
        if conn.operator:
            return True
        theirs = self.by_agent[conn.agent] - held
        alone = not self.requests[conn.agent] if request else not theirs
        return alone or theirs + size <= MAX_REQUEST_BYTES_PER_AGENT

    def fits_now(self, conn: Peer, size: int, *, held: int = 0) -> bool:
        """Whether a request of `size` bytes (`held` of them counted already) would be charged at once."""
        return self._fits(conn, size + REQUEST_OVERHEAD_BYTES, held, True)

    async def take(self, conn: Peer, size: int, *, request: bool = True, held: int = 0) -> bool:
        """Wait until `size` more bytes of `conn`'s requests fit, then count them; False if it closed. A
        `request` (one about to run, not a frame still arriving) costs REQUEST_OVERHEAD_BYTES more; `held`
        of its bytes (its frame's) are counted already, and stay counted while it waits."""
        size += REQUEST_OVERHEAD_BYTES * request
        while not self._fits(conn, size, held, request):
            if conn.closed:
                return False
            conn.intake_full = True
            freed = self._freed
            await freed.wait()
        conn.intake_full = False
        if conn.closed:
            return False
        conn.intake_bytes += size - held
        conn.intake_requests += request
        if not conn.operator:
            self.by_agent[conn.agent] += size - held
            self.requests[conn.agent] += request
        return True

    def give_back(self, conn: Peer, size: int, *, request: bool = True) -> None:
        size += REQUEST_OVERHEAD_BYTES * request
        conn.intake_bytes -= size
        conn.intake_requests -= request
        if not conn.operator:
            self.by_agent[conn.agent] -= size
            if self.by_agent[conn.agent] <= 0:
                del self.by_agent[conn.agent]
            self.requests[conn.agent] -= request
            if self.requests[conn.agent] <= 0:
                del self.requests[conn.agent]
        self.wake()

    def wake(self) -> None:
        """Something finished or closed: every waiting reader looks again."""
        self._freed.set()
        self._freed = asyncio.Event()


class FrameReader:
    """One client's JSON lines (at most MAX_FRAME_BYTES each), assembled here from chunks so that a frame
    still arriving is held where it is counted: `charge` (the intake) is told each chunk's bytes before the
    next is read, and waits while the agent has no room. A frame once begun must end within
    FRAME_DEADLINE_S: 63 connections each parking 1 MiB less a little, unfinished, held 63 MiB uncounted."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.partial = bytearray()  # bytes read and not yet returned as a line
        self.held = 0  # bytes charged and not yet given back (the server gives back each line's)

    async def line(self, charge: Callable[[int], Awaitable[bool]] | None = None) -> bytes:
        """The next line; ProtocolError (too long, too slow), asyncio.IncompleteReadError at EOF,
        ConnectionError when `charge` says the connection closed while it waited."""
        deadline: float | None = None
        while True:
            end = self.partial.find(b"\n")
            if end >= 0:
                line = bytes(self.partial[: end + 1])
                del self.partial[: end + 1]
                if len(line) > MAX_FRAME_BYTES:
                    raise ProtocolError(f"frame exceeds the {MAX_FRAME_BYTES}-byte cap")
                return line
            if len(self.partial) >= MAX_FRAME_BYTES:
                raise ProtocolError(f"frame exceeds the {MAX_FRAME_BYTES}-byte cap")
            if not self.partial:
                chunk = await self.reader.read(READ_CHUNK)
            else:
                if deadline is None:
                    deadline = asyncio.get_running_loop().time() + FRAME_DEADLINE_S
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await self.reader.read(READ_CHUNK)
                except TimeoutError:
                    raise ProtocolError(f"a frame was not finished within {FRAME_DEADLINE_S:g} s") from None
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(self.partial), None)
            self.partial += chunk
            if charge is not None:
                if not await charge(len(chunk)):
                    raise ConnectionError("closed while its frame waited for room")
                self.held += len(chunk)
