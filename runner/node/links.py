"""The node's one link to a gateway at a time: answers only to the link that asked, events until acked."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
from typing import Any

from engine.nodes.wire import Hello, NodeEvent, Request, Response, WireError, encode
from engine.sessions import SessionManager
from runner.node import gateways
from runner.node.outbox import Outbox

log = logging.getLogger("exechost.node")


class Output:
    """One link's byte sink: a pipe transport under sshd, a Unix socket under `node run`, plain blocking
    writes for a file."""

    def __init__(self, writer: asyncio.StreamWriter | None) -> None:
        self._writer = writer
        self.gateway = ""  # the namespace of the gateway key this link proved (runner.node.gateways)
        self.nonce: str | None = None  # this link's challenge, until a key answers it
        # What waited for a gateway goes out once this link says whose it is: after its key's proof, or
        # before its first other request (a link that proves no key). Until then no event goes out on it,
        # so the gateway gets every event of its own once, in number order.
        self.resend_pending = True

    async def write(self, data: bytes) -> None:
        if self._writer is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        self._writer.write(data)
        await self._writer.drain()

    def close(self) -> None:
        """End this link (its reader sees EOF): a newer link took over."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()


class Links:
    """The current link, one writer at a time on it, the node's own requests in flight on it (a dropped link
    fails only its own), and the events kept (numbered, bounded) until the gateway acknowledges them."""

    def __init__(self, sessions: SessionManager) -> None:
        self.sessions = sessions  # whose sessions an event names: for_link keeps another gateway's apart
        self.current: Output | None = None
        self.outbox = Outbox()  # events kept until the gateway acknowledges them, sent again on a new link
        self._write_lock = asyncio.Lock()
        self._ids = itertools.count(1)
        # Relayed asks in flight, with the link they went out on (a dropped link fails only its own).
        self._pending: dict[str, tuple[Output, asyncio.Future[Response]]] = {}

    async def send(self, frame: Any, link: Output | None = None) -> None:
        """To the current link (or only to `link`, if it is still the current one); ConnectionError when
        there is none: an answer never goes to a link other than the one that asked."""
        async with self._write_lock:
            current = self.current
            if current is None or (link is not None and link is not current):
                raise ConnectionError("no link to the gateway")
            if isinstance(frame, NodeEvent):
                if current.resend_pending:  # kept (if queued) for the resend that names its gateway
                    raise ConnectionError("the link has not said whose it is yet")
                frame = gateways.for_link(frame, current.gateway, self.sessions)
                if frame is None:  # another gateway's: never on this link
                    raise ConnectionError("the linked gateway is not this event's")
            await current.write(encode(frame))

    async def emit(self, event: NodeEvent, *, queue: bool = True) -> None:
        """An event for the gateway: sent now if a link is up, and with `queue` kept (numbered, bounded,
        oldest dropped) until the gateway acknowledges it, so the next link carries it if this one did not."""
        try:
            encode(event)
        except WireError as exc:  # a bug: an event JSON cannot carry (NaN); said once, never a dead task
            log.error("event %s could not be sent: %s", event.event, exc)
            return
        if queue:
            event = self.outbox.number(event)
        with contextlib.suppress(ConnectionError, OSError):
            await self.send(event)

    async def request(self, method: str, params: dict[str, Any]) -> Response:
        """A request of the node's own on the current link, and the answer that link gives (LINK_LOST when
        it drops first)."""
        rid = f"n{next(self._ids)}"
        link = self.current
        if link is None:
            raise ConnectionError("no link to the gateway")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (link, future)
        try:
            await self.send(Request(rid, method, params), link)
            return await future
        finally:
            self._pending.pop(rid, None)

    def answered(self, frame: Response, link: Output) -> None:
        """The gateway's answer to one of the node's requests, taken only from the link it went out on."""
        pending = self._pending.get(frame.id)
        if pending is not None and pending[0] is link and not pending[1].done():
            pending[1].set_result(frame)

    def acked(self, up_to: int, link: Output) -> None:
        """The link's gateway has every event of its own up to `up_to`: the outbox forgets them."""
        self.outbox.acked(up_to, lambda e: gateways.for_link(e, link.gateway, self.sessions) is not None)

    async def attach(self, link: Output, hello: Hello) -> None:
        """Hello, then whatever waited for a link, in order, before anything new can go out."""
        async with self._write_lock:
            previous, self.current = self.current, None
            if previous is not None:
                previous.close()  # the newest link wins: the old one is a gateway that already gave up
            await link.write(encode(hello))
            if self.outbox.dropped:
                log.warning("%d events were dropped while no gateway took them", self.outbox.dropped)
                self.outbox.dropped = 0
            self.current = link

    async def resend_to(self, link: Output, first: Response | None = None) -> None:
        """While `link` is still the current one: `first` (the answer that named its gateway), then what its
        gateway has not acknowledged, before any new event of its can go out."""
        async with self._write_lock:
            if self.current is link:
                if first is not None:
                    await link.write(encode(first))
                await self._resend(link)

    async def _resend(self, link: Output) -> None:
        """What this link's gateway has not acknowledged, oldest first (called with the write lock held)."""
        link.resend_pending = False
        for event in self.outbox.unacked():
            mine = gateways.for_link(event, link.gateway, self.sessions)
            if mine is not None:  # another gateway's events never go to this one (runner.node.gateways)
                await link.write(encode(mine))

    def detach(self, link: Output) -> bool:
        """The link is gone: its requests in flight fail. True when it was the current one."""
        was = self.current is link
        if was:
            self.current = None
        for rid, (owner, future) in list(self._pending.items()):
            if owner is link and not future.done():
                future.set_result(Response(rid, False, error={"code": "LINK_LOST", "message": "link lost"}))
        return was
