"""The node's links to gateways, one per gateway at a time: answers only to the link that asked, events only
to their own gateway's link and kept until it acks them. Several gateways may share a node (runner.node.
gateways): a link replaces only an older link of its own gateway, never another gateway's."""

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

# Links that have not said whose they are yet, at once: past this the oldest of them is let go (a gateway
# that connects and never speaks holds no slot another needs).
MAX_UNNAMED = 8


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
        self.lock = asyncio.Lock()  # one writer at a time on this link (a slow one stalls no other)

    async def write(self, data: bytes) -> None:
        if self._writer is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        self._writer.write(data)
        await self._writer.drain()

    def close(self) -> None:
        """End this link (its reader sees EOF): a newer link of its gateway took over."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()


class Links:
    """The links up (each gateway's newest), the node's own requests in flight on each (a dropped link fails
    only its own), and the events kept (numbered, bounded) until their gateway acknowledges them."""

    def __init__(self, sessions: SessionManager) -> None:
        self.sessions = sessions  # whose sessions an event names: for_link keeps another gateway's apart
        self.up: list[Output] = []  # attached, oldest first
        # Events kept until their gateway acknowledges them, sent again on its next link: each gateway's in
        # a share of its own (runner.node.outbox).
        self.outbox = Outbox()
        self._ids = itertools.count(1)
        # Relayed asks in flight, with the link they went out on (a dropped link fails only its own).
        self._pending: dict[str, tuple[Output, asyncio.Future[Response]]] = {}

    @property
    def current(self) -> Output | None:
        """The newest link that said whose it is (None when none did)."""
        named = [link for link in self.up if not link.resend_pending]
        return named[-1] if named else None

    def of(self, namespace: str) -> Output | None:
        """The link of that gateway (runner.node.gateways namespace), if it is up and said so."""
        for link in reversed(self.up):
            if not link.resend_pending and link.gateway == namespace:
                return link
        return None

    async def send(self, frame: Any, link: Output | None = None) -> None:
        """An answer or request only to `link`, while it is up (ConnectionError otherwise: an answer never
        goes to a link other than the one that asked); an event to every link whose gateway it is (None
        when it is no up link's)."""
        if link is not None:
            if link not in self.up:
                raise ConnectionError("no link to the gateway")
            if isinstance(frame, NodeEvent):
                frame = self._for(link, frame)
                if frame is None:
                    raise ConnectionError("the linked gateway is not this event's")
            async with link.lock:
                await link.write(encode(frame))
            return
        if not isinstance(frame, NodeEvent):
            raise ConnectionError("a request or answer names its link")
        targets = [(up, mine) for up in self.up if (mine := self._for(up, frame)) is not None]
        if not targets:
            raise ConnectionError("no link of this event's gateway")
        for up, event in targets:  # (an event names one gateway: one link, in practice)
            with contextlib.suppress(ConnectionError, OSError):
                async with up.lock:
                    await up.write(encode(event))

    def _for(self, link: Output, event: NodeEvent) -> NodeEvent | None:
        if link.resend_pending:  # kept (if queued) for the resend that names its gateway
            return None
        return gateways.for_link(event, link.gateway, self.sessions)

    async def emit(self, event: NodeEvent, *, queue: bool = True) -> None:
        """An event for its gateway: sent now if its link is up, and with `queue` kept (numbered, bounded,
        oldest dropped) until the gateway acknowledges it, so its next link carries it if this one did not."""
        try:
            size = len(encode(event))
        except WireError as exc:  # a bug: an event JSON cannot carry (NaN); said once, never a dead task
            log.error("event %s could not be sent: %s", event.event, exc)
            return
        namespace = gateways.namespace_of(event) if queue else None
        if namespace is not None:
            event = self.outbox.number(namespace, event, size)
        elif queue:  # a bug: a kept event names its gateway (its sessionKey)
            log.error("event %s names no gateway: not kept", event.event)
        with contextlib.suppress(ConnectionError, OSError):
            await self.send(event)

    async def request(self, method: str, params: dict[str, Any]) -> Response:
        """A request of the node's own, on the link of the gateway whose request caused it (its namespace is
        this task's), and the answer that link gives (LINK_LOST when it drops first). With no gateway in
        context (the egress proxy's asks), the newest link that said whose it is."""
        rid = f"n{next(self._ids)}"
        namespace = gateways.CURRENT_GATEWAY.get(None)
        link = self.current if namespace is None else self.of(namespace)
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
        self.outbox.acked(link.gateway, up_to)

    async def attach(self, link: Output, hello: Hello) -> None:
        """Hello first; nothing else goes out on the link until it says whose it is (resend_to)."""
        unnamed = [up for up in self.up if up.resend_pending]
        if len(unnamed) >= MAX_UNNAMED:
            unnamed[0].close()  # its reader ends; its serve loop detaches it
            self.up.remove(unnamed[0])
        async with link.lock:
            await link.write(encode(hello))
        self.up.append(link)

    async def resend_to(self, link: Output, first: Response | None = None) -> None:
        """The link said whose it is: an older link of the same gateway is let go (the newest link wins: the
        old one is a gateway that already gave up), then `first` (the answer that named its gateway) and
        what its gateway has not acknowledged go out, before any new event of its can."""
        if link not in self.up:
            return
        for old in [up for up in self.up if up is not link and not up.resend_pending]:
            if old.gateway == link.gateway:
                old.close()
                self.detach(old)
        async with link.lock:
            if first is not None:
                await link.write(encode(first))
            link.resend_pending = False
            dropped = self.outbox.take_dropped(link.gateway)
            if dropped:
                who = (
                    f"gateway {link.gateway.rstrip(gateways.SEP)}"
                    if link.gateway
                    else "links that proved no key"
                )
                log.warning("%d events were dropped while %s took none of them", dropped, who)
            for event in self.outbox.unacked(link.gateway):
                mine = gateways.for_link(event, link.gateway, self.sessions)
                if mine is not None:  # another gateway's events never go to this one (runner.node.gateways)
                    await link.write(encode(mine))

    def detach(self, link: Output) -> bool:
        """The link is gone: its requests in flight fail. True when it was up."""
        was = link in self.up
        if was:
            self.up.remove(link)
        for rid, (owner, future) in list(self._pending.items()):
            if owner is link and not future.done():
                future.set_result(Response(rid, False, error={"code": "LINK_LOST", "message": "link lost"}))
        return was
