"""Live session output for the console: pushed to the connections that want it, unread counts to the rest.

A connection either takes every session's output (protocol v1) or follows a few (`sessions.follow`) and is
told only how much the others printed (`session.activity`). One forwarder task per wanted session batches
output to ≤ ~30 frames/s or 64 KiB and announces gaps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import InvalidInput
from engine.protocol.frames import Event
from engine.protocol.methods import EventName
from engine.sessions import OutputSubscription, SessionManager
from engine.sessions.fanout import merge
from engine.sessions.outtext import TextDecoder, output_frame

if TYPE_CHECKING:
    from runner.gateway.connection import Connection

OUTPUT_FLUSH_SEC = 0.033
OUTPUT_BATCH_BYTES = 64 * 1024
ACTIVITY_INTERVAL_SEC = 0.25  # session.activity: at most 4 frames/s per following connection


class RemoteOutput(Protocol):
    """Sessions that live elsewhere (a node's) whose output is pushed into this fan-out by their owner."""

    def knows(self, session_id: str) -> bool: ...
    def offsets(self) -> dict[str, int]: ...
    def watch(self, session_id: str) -> None: ...


class OutputFanout:
    """Follow state per connection, forwarder tasks per session, the activity ticker."""

    def __init__(self, sessions: SessionManager, connections: Callable[[], list[Connection]]) -> None:
        self.sessions = sessions
        self.connections = connections
        # Node sessions (runner/gateway/nodes.py): followed, counted and pushed like local ones.
        self.remote: RemoteOutput | None = None
        self._forwarders: dict[str, asyncio.Task[None]] = {}  # sessionId -> task pushing its output
        self._activity: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._activity = asyncio.ensure_future(self._activity_loop())

    def close(self) -> None:
        if self._activity is not None:
            self._activity.cancel()
        for task in list(self._forwarders.values()):
            task.cancel()

    def session_event(self, event: str, data: dict[str, Any], broadcast: Callable[[], None]) -> None:
        """Broadcast a session lifecycle event in order with its output: an exit goes out after the last
        output the forwarder still holds; a start begins forwarding when someone wants it."""
        sid = str(data.get("sessionId"))
        forwarder = self._forwarders.get(sid)
        if event == EventName.SESSION_EXITED and forwarder is not None:
            forwarder.add_done_callback(lambda _t: broadcast())
            return
        broadcast()
        if event == EventName.SESSION_STARTED and self._output_wanted(sid):
            self._forward(sid)

    def _output_wanted(self, session_id: str) -> bool:
        scope = self._scope(session_id)
        return any(c.wants_output(session_id, scope) for c in self.connections())

    def forward_wanted_sessions(self) -> None:
        """Start pushing output of every running session some connection now wants."""
        for session in list(self.sessions.registry):
            if not session.exited and self._output_wanted(session.id):
                self._forward(session.id)

    def _scope(self, session_id: str) -> str:
        session = self.sessions.get(session_id)
        return session.scope_key if session is not None else "\x00unknown"  # a scope nobody owns

    def _offset(self, session_id: str) -> int:
        session = self.sessions.get(session_id)
        if session is None and self.remote is not None:
            return self.remote.offsets().get(session_id, 0)
        return session.output.offset if session is not None else 0

    def _known(self, session_id: str) -> bool:
        local = self.sessions.get(session_id) is not None
        return local or (self.remote is not None and self.remote.knows(session_id))

    def _offsets(self) -> dict[str, int]:
        offsets = {s.id: s.output.offset for s in self.sessions.registry}
        if self.remote is not None:
            offsets.update(self.remote.offsets())
        return offsets

    def remote_output(self, session_id: str, data: dict[str, Any]) -> bool:
        """A node session's output frame, to the connections that want it; False when none does (its
        owner then stops pushing it)."""
        if not self._output_wanted(session_id):
            return False
        self._send_output(session_id, data)
        return True

    def output_wanted(self, session_id: str) -> bool:
        return self._output_wanted(session_id)

    def _visible(self, conn: Connection, session_id: str) -> bool:
        """A local session in a scope the connection sees, or (operators only) a connected node's."""
        session = self.sessions.get(session_id)
        if session is not None:
            return conn.sees_scope(session.scope_key)
        return self.remote is not None and self.remote.knows(session_id) and conn.sees_scope(None)

    def follow(self, conn: Connection, session_id: str, *, only: bool = False) -> list[str]:
        """`sessions.follow`: push this session's output to `conn` (and, with `only`, no other's)."""
        if not self._visible(conn, session_id):  # another agent's: the same answer as none at all
            raise InvalidInput(f"No session found for {session_id}")
        self._enter_follow_mode(conn)
        assert conn.follow is not None
        if only:
            for other in conn.follow - {session_id}:
                self.unfollow(conn, other)
        conn.follow.add(session_id)
        conn.activity_sent.pop(session_id, None)
        if "sessions" in conn.topics:
            if self.sessions.get(session_id) is not None:
                self._forward(session_id)
            elif self.remote is not None:
                self.remote.watch(session_id)  # the node pushes it from now on
        return sorted(conn.follow)

    def unfollow(self, conn: Connection, session_id: str | None) -> list[str]:
        """`sessions.unfollow`: stop pushing that session's output (None: every session's) to `conn`;
        what it printed until now counts as seen."""
        self._enter_follow_mode(conn)
        assert conn.follow is not None
        for sid in [session_id] if session_id is not None else list(conn.follow):
            if sid in conn.follow:
                conn.follow.discard(sid)
                conn.read_marks[sid] = self._offset(sid)
        return sorted(conn.follow)

    def set_follow(self, conn: Connection, session_ids: list[str]) -> None:
        """`subscribe {follow: [...]}`: follow mode with exactly these sessions (unknown ids are skipped)."""
        self._enter_follow_mode(conn)
        self.unfollow(conn, None)
        for sid in session_ids:
            if self._visible(conn, sid):
                self.follow(conn, sid)

    def _enter_follow_mode(self, conn: Connection) -> None:
        """Output that existed before the connection started following is not unread."""
        if conn.follow is not None:
            return
        conn.follow = set()
        conn.read_marks = self._offsets()

    async def _activity_loop(self) -> None:
        """`session.activity`: unread byte counts (no bytes) of sessions a following connection hides."""
        while True:
            await asyncio.sleep(ACTIVITY_INTERVAL_SEC)
            conns = [c for c in self.connections() if c.follow is not None and "sessions" in c.topics]
            if not conns:
                continue
            sessions = list(self.sessions.registry)
            remote = self.remote.offsets() if self.remote is not None else {}
            for conn in conns:  # an agent hears only of its own sessions, not even their ids
                offsets = {s.id: s.output.offset for s in sessions if conn.sees_scope(s.scope_key)}
                if conn.sees_scope(None):  # node sessions have no scope here: the operator's view
                    offsets.update(remote)
                self._send_activity(conn, offsets)

    def _send_activity(self, conn: Connection, offsets: dict[str, int]) -> None:
        assert conn.follow is not None
        changed: list[dict[str, Any]] = []
        for sid, total in offsets.items():
            if sid in conn.follow:
                continue
            unread = max(0, total - conn.read_marks.get(sid, 0))
            if conn.activity_sent.get(sid) != unread:
                conn.activity_sent[sid] = unread
                changed.append({"sessionId": sid, "unreadBytes": unread, "outputBytes": total})
        for sid in [s for s in conn.activity_sent if s not in offsets]:
            del conn.activity_sent[sid]
            conn.read_marks.pop(sid, None)
        if not changed:
            return
        shed = conn.dropped_events
        conn.send(Event(event=EventName.SESSION_ACTIVITY, data={"sessions": changed}))
        if conn.dropped_events != shed:  # shed under backlog: resend these counts next tick
            for row in changed:
                conn.activity_sent.pop(row["sessionId"], None)

    def _send_output(self, session_id: str, data: dict[str, Any]) -> None:
        frame = Event(event=EventName.SESSION_OUTPUT, data=data)
        scope = self._scope(session_id)
        for conn in self.connections():
            if conn.wants_output(session_id, scope):
                conn.send(frame)

    def _forward(self, session_id: str) -> None:
        if session_id in self._forwarders:
            return
        try:
            viewer = self.sessions.subscribe(session_id, replay=False)
        except KeyError:
            return
        # The offset is taken now, with the subscription: output may arrive before the task first runs.
        task = asyncio.ensure_future(self._push_output(session_id, viewer, self._offset(session_id)))
        self._forwarders[session_id] = task
        task.add_done_callback(lambda _t: self._forwarders.pop(session_id, None))

    async def _push_output(self, session_id: str, viewer: OutputSubscription, offset: int) -> None:
        """Push `session.output`, coalesced to ≤ ~30 frames/s or 64 KiB per session; gaps are announced.
        Stops once no connection wants this session's output (a later follow starts a new one)."""
        decoders: dict[str, TextDecoder] = {}
        try:
            while (chunk := await viewer.get()) is not None:
                batch = [chunk]
                size = len(chunk.data)
                deadline = asyncio.get_running_loop().time() + OUTPUT_FLUSH_SEC
                while size < OUTPUT_BATCH_BYTES and asyncio.get_running_loop().time() < deadline:
                    more = viewer.get_nowait()
                    if more is None:
                        await asyncio.sleep(0.005)
                        if viewer.closed:
                            break
                        continue
                    batch.append(more)
                    size += len(more.data)
                if not self._output_wanted(session_id):
                    return
                for stream, data, dropped in merge(batch):
                    if dropped:
                        offset += dropped
                        self._send_output(
                            session_id, {"sessionId": session_id, "dropped": True, "offset": offset}
                        )
                        continue
                    decoder = decoders.setdefault(stream, TextDecoder())
                    # ≤ 64 KiB per frame: even fully escaped JSON stays under the 1 MiB frame cap.
                    for at in range(0, len(data), OUTPUT_BATCH_BYTES):
                        piece = data[at : at + OUTPUT_BATCH_BYTES]
                        self._send_output(
                            session_id, output_frame(session_id, stream, decoder, piece, offset)
                        )
                        offset += len(piece)
        finally:
            viewer.close()
