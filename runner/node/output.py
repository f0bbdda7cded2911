"""A node's session output, pushed to the gateway as local output is to consoles: the raw bytes of the
sessions the gateway watches (`sessions.watch`), batched, and every session's byte total (for unread
counts) when it changes. Nothing is queued while no gateway is linked: the next replay reads the log."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from engine.nodes.wire import NodeEvent
from engine.sessions import OutputSubscription, SessionManager
from engine.sessions.fanout import merge
from engine.sessions.outtext import TextDecoder, output_frame
from runner.node import gateways

FLUSH_SEC = 0.033  # as the gateway's own fan-out: ≤ ~30 frames/s per session
BATCH_BYTES = 64 * 1024  # escaped JSON of this stays far below the wire's line cap
OFFSETS_SEC = 0.25  # session.offsets: at most 4 frames/s, only when a total changed
# Sessions pushed at once per principal (a gateway's agent: runner.node.gateways.principal): a console
# follows one, the rest are counted; one agent's sessions never use up another's.
MAX_WATCHED = 64

Emit = Callable[[NodeEvent], Awaitable[None]]


class WatchError(Exception):
    pass


class NodeOutput:
    """One forwarder per watched session, at most MAX_WATCHED of each principal's; one ticker for the byte
    totals while a link is up."""

    def __init__(self, sessions: SessionManager, emit: Emit) -> None:
        self.sessions = sessions
        self._emit = emit
        self._forwarders: dict[str, tuple[str, asyncio.Task[None]]] = {}  # session -> (its principal, task)
        self._watched: dict[str, set[str]] = {}  # principal -> its sessions pushed now
        self._ticker: asyncio.Task[None] | None = None
        self._sent: dict[str, int] = {}

    def watch(self, session_id: str) -> dict[str, Any]:
        """`sessions.watch`: push this session's output from now on (its offset says where that starts)."""
        session = self.sessions.get(session_id)
        if session is None:
            raise WatchError(f"No session found for {session_id}")
        if session_id not in self._forwarders and not session.exited:
            whose = gateways.principal(session.scope_key)
            theirs = self._watched.setdefault(whose, set())
            if len(theirs) >= MAX_WATCHED:
                raise WatchError(f"at most {MAX_WATCHED} sessions of one agent are watched at once")
            viewer = self.sessions.subscribe(session_id, replay=False)
            task = asyncio.ensure_future(self._push(session_id, viewer, session.output.offset))
            self._forwarders[session_id] = (whose, task)
            theirs.add(session_id)
            task.add_done_callback(lambda t: self._forget(session_id, t))
        return {"sessionId": session_id, "offset": session.output.offset, "watching": True}

    def _forget(self, session_id: str, task: asyncio.Task[None]) -> None:
        """That forwarder ends (its session did, or it is unwatched): its place is free at once."""
        held = self._forwarders.get(session_id)
        if held is None or held[1] is not task:
            return  # forgotten already (a newer forwarder of the session may hold the place now)
        whose = held[0]
        del self._forwarders[session_id]
        theirs = self._watched.get(whose)
        if theirs is not None:
            theirs.discard(session_id)
            if not theirs:
                del self._watched[whose]

    def unwatch(
        self, session_id: str | None, mine: Callable[[str], bool] = lambda _sid: True
    ) -> dict[str, Any]:
        """`sessions.unwatch`: that session, or all, of those `mine` says are the asking gateway's (another
        gateway's watches are neither ended nor named)."""
        for sid in [session_id] if session_id else list(self._forwarders):
            if not mine(sid):
                continue
            held = self._forwarders.get(sid)
            if held is not None:
                self._forget(sid, held[1])
                held[1].cancel()
        return {"watching": sorted(sid for sid in self._forwarders if mine(sid))}

    def watched(self, whose: str) -> int:
        """How many of that principal's sessions are pushed now."""
        return len(self._watched.get(whose, ()))

    def linked(self) -> None:
        """A gateway linked: totals go out again (all of them: it knows none yet)."""
        self._sent.clear()
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._offsets_loop())

    def unlinked(self, mine: Callable[[str], bool] = lambda _sid: True, *, last: bool = True) -> None:
        """A gateway's link went (`mine`: its sessions): nobody to push its sessions to (its next link
        watches again); with the `last` link gone, no totals either."""
        self.unwatch(None, mine)
        if last and self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None

    async def _offsets_loop(self) -> None:
        while True:
            await asyncio.sleep(OFFSETS_SEC)
            totals = {s.id: s.output.offset for s in self.sessions.registry}
            changed = {sid: n for sid, n in totals.items() if self._sent.get(sid) != n}
            gone = [sid for sid in self._sent if sid not in totals]
            for sid in gone:
                del self._sent[sid]
            if changed or gone:
                self._sent.update(changed)
                await self._emit(NodeEvent("session.offsets", {"sessions": totals}))

    async def _push(self, session_id: str, viewer: OutputSubscription, offset: int) -> None:
        decoders: dict[str, TextDecoder] = {}
        loop = asyncio.get_running_loop()
        try:
            while (chunk := await viewer.get()) is not None:
                batch = [chunk]
                size = len(chunk.data)
                deadline = loop.time() + FLUSH_SEC
                while size < BATCH_BYTES and loop.time() < deadline:
                    more = viewer.get_nowait()
                    if more is None:
                        await asyncio.sleep(0.005)
                        if viewer.closed:
                            break
                        continue
                    batch.append(more)
                    size += len(more.data)
                for stream, raw, dropped in merge(batch):
                    if dropped:
                        offset += dropped
                        gap = {"sessionId": session_id, "dropped": True, "offset": offset}
                        await self._emit(NodeEvent("session.output", gap))
                        continue
                    decoder = decoders.setdefault(stream, TextDecoder())
                    for at in range(0, len(raw), BATCH_BYTES):
                        piece = raw[at : at + BATCH_BYTES]
                        frame = output_frame(session_id, stream, decoder, piece, offset)
                        await self._emit(NodeEvent("session.output", frame))
                        offset += len(piece)
        finally:
            viewer.close()

    def close(self) -> None:
        self.unlinked()
        self._sent.clear()
