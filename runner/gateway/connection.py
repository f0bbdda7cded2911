"""One authenticated control-socket client: what it subscribed to, follows and approves, and its outgoing
queue, which never blocks the gateway (a client that cannot keep up loses events, then the connection)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from engine.display import visible
from engine.principals import owns_key
from engine.protocol.frames import Event, Frame, Hello, ProtocolError, Response, encode_frame
from engine.protocol.methods import EventName
from runner.gateway.limits import MAX_BACKLOG_BYTES, MAX_BACKLOG_BYTES_PER_AGENT, READ_PAUSE_BYTES

log = logging.getLogger("exechost.gateway")

# The outgoing queue is capped in bytes only (MAX_BACKLOG_BYTES, then cut off; READ_PAUSE_BYTES, then its
# requests wait): a count of frames let a flood of small events cut off a client far under the byte caps.
TRANSPORT_BUFFER_BYTES = 256 * 1024  # written ahead to a client's socket before the sender waits for it
FLUSH_TIMEOUT_S = 2.0  # how long a closing connection's last frames may take to leave
EVENT_DROP_BYTES = 4 << 20  # output frames are shed once this much waits for a client that is not reading
# Other events (approvals' aside) are shed past this, so responses keep their room under MAX_BACKLOG_BYTES.
EVENT_SHED_BYTES = MAX_BACKLOG_BYTES * 3 // 4


class Connection:
    """One authenticated client: a reader loop, a bounded outgoing queue and a sender task."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        hello: Hello,
        peer_pid: int,
        on_close: Callable[[Connection], None],
    ) -> None:
        self.writer = writer
        self._on_close = on_close
        self.client = hello.client
        # The client's own label, shown in logs and as who resolved an ask: escaped once here, so a name
        # holding escapes or newlines can neither drive a terminal tailing gateway.log nor forge a line.
        self.name = visible(hello.name or hello.client)
        self.operator = bool(hello.operator)  # verified in the handshake
        # The principal, set by the handshake from the peer's account or the tokens it proved (never from a
        # request): every verb a non-operator sends is scoped to this agent (handlers/common.py).
        self.agent = "main"
        self.credential = ""  # the agent whose minted credential authenticated this connection, if any
        self.presented = ""  # that credential, to drop the connection once it is revoked or re-minted
        # The gateway and operator tokens it proved: it is dropped once its files hold others (tokenfiles).
        self.proved_token = hello.token
        self.proved_operator = hello.operator or ""
        self.tokens_generation = 0  # the GatewayTokens.generation its tokens were last checked under
        self.peer_uid = -1
        self.config_generation = 0  # the LiveConfig.generation its principal was last decided under
        self.other_account = False  # came from another Unix account (agents' socket): its uid is who it is
        self.peer_pid = peer_pid
        # Its own turn among its agent's clients in the decision pool (engine.fairpool).
        self.fair_key = f"conn-{id(self):x}"
        # Its agent's live connections (this one included), set by the server for an agent's connection:
        # what waits for all of them together is capped too (MAX_BACKLOG_BYTES_PER_AGENT).
        self.peers: set[Connection] | None = None
        self.topics: set[str] = set()
        # None: every session's output (protocol v1 default); a set: only these (sessions.follow), the
        # others reported as `session.activity` counts against read_marks (raw offset seen up to).
        self.follow: set[str] | None = None
        self.read_marks: dict[str, int] = {}
        self.activity_sent: dict[str, int] = {}
        self.approver = False
        self.waiting_approvals: set[str] = set()  # asks this client's exec calls are waiting on
        self.dropped_events = 0
        self.shed_output: dict[str, Any] = {}
        self._queued_bytes = 0
        self._room = asyncio.Event()  # set while what waits for this client is under READ_PAUSE_BYTES
        self._room.set()
        # A queued item is the frame's bytes, or a one-slot list for an `approval.updated` a later one for
        # the same ask replaces while it still waits (`_updates`): the latest state, once.
        self._queue: asyncio.Queue[bytes | list[bytes] | None] = asyncio.Queue()
        self._updates: dict[str, list[bytes]] = {}
        self._finishing = False
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())
        self.closed = False
        self.revoked = False  # its credential was revoked: nothing more it sends is read or acted upon
        self.tasks: set[asyncio.Task[None]] = set()
        self.intake_bytes = 0  # bytes of this client's requests being handled (limits.Intake)
        self.intake_requests = 0  # of them, requests (the rest: a frame still arriving)
        self.intake_full = False  # its next request waits for some of them to finish

    def stop_reading(self) -> None:
        """Revoked: read nothing more from this client (what is buffered is dropped unread), at once."""
        self.revoked = True
        transport = self.writer.transport
        if isinstance(transport, asyncio.ReadTransport) and transport.is_reading():
            transport.pause_reading()

    def sees_scope(self, scope_key: str | None) -> bool:
        """The one visibility rule: may this connection see what happens in this session scope. The
        operator sees every one, an agent only its own (engine.principals.owns_key); what has no scope
        (approvals, sandboxes, a node's sessions, gateway-wide events) is the operator's."""
        return self.operator or (scope_key is not None and owns_key(self.agent, scope_key))

    def wants_output(self, session_id: str, scope_key: str | None) -> bool:
        """`session.output` of this session: visible to it, and asked for (the topic, and followed)."""
        if not self.sees_scope(scope_key):
            return False
        return "sessions" in self.topics and (self.follow is None or session_id in self.follow)

    def send(self, frame: Frame, *, keep: bool = False) -> None:
        """Queue a frame, never waiting: a client that cannot keep up loses events, then the connection.
        `keep`: never shed (a gap marker: without it the client would take what it got for everything)."""
        if self.closed:
            return
        if isinstance(frame, Event):
            sid = frame.data.get("sessionId") if frame.event.startswith("session.") else None
            # Approval events are never shed (an approver that missed one would have to poll); the updates
            # of one ask are merged instead, below. A client whose backlog passes MAX_BACKLOG_BYTES is cut
            # off and resyncs on reconnect.
            sheddable = not frame.event.startswith("approval.")
            output = frame.event == EventName.SESSION_OUTPUT
            shed_at = EVENT_DROP_BYTES if output else EVENT_SHED_BYTES
            if sheddable and not keep and self._queued_bytes >= shed_at:
                self.dropped_events += 1
                if frame.event == EventName.SESSION_OUTPUT and sid is not None:
                    # Remember where the gap starts; the console re-reads it with sessions.output.
                    self.shed_output.setdefault(sid, frame.data.get("offset"))
                return
            if sid is not None and sid in self.shed_output:
                # The gap goes out before whatever follows it (more output, or the exit), never shed
                # itself: a client reading to `session.exited` must know it missed bytes.
                gap = {"sessionId": sid, "dropped": True, "offset": self.shed_output.pop(sid)}
                self.send(Event(event=EventName.SESSION_OUTPUT, data=gap), keep=True)
        try:
            data = encode_frame(frame)
        except ProtocolError as exc:
            if not isinstance(frame, Response):
                self.dropped_events += 1
                log.error("event %s to %s could not be sent: %s", frame.type, self.name, exc)
                return
            code = "too_large" if "exceeds" in str(exc) else "internal"
            if code == "internal":
                log.error("response %r to %s could not be encoded: %s", frame.id, self.name, exc)
            data = encode_frame(Response(id=frame.id, ok=False, error={"code": code, "message": str(exc)}))
        if self._queue.empty() and not self._finishing and self._transport_room():
            # Nothing waits ahead of this frame: hand it to the transport now (it sends at once or buffers)
            # rather than waking the sender task for it, a loop iteration per frame on every request.
            self.writer.write(data)
            return
        # Counted in bytes, responses too: the transport holds at most TRANSPORT_BUFFER_BYTES and one
        # frame (the sender waits past that), so the queue is where a client that does not read piles up.
        merge = isinstance(frame, Event) and frame.event == EventName.APPROVAL_UPDATED
        slot = self._updates.get(str(frame.data.get("id"))) if merge and isinstance(frame, Event) else None
        if slot is not None:  # an update of this ask still waits: the latest state replaces it
            self._queued_bytes += len(data) - len(slot[0])
            slot[0] = data
            return
        backlog = self.backlog() + len(data)
        if backlog > MAX_BACKLOG_BYTES or self._agent_over(len(data)):
            log.warning(
                "client %s (pid %s) is not reading (%d bytes wait for it); closing its connection",
                self.name,
                self.peer_pid,
                backlog,
            )
            self.abort(hard=True)
            return
        if merge and isinstance(frame, Event):
            slot = self._updates[str(frame.data.get("id"))] = [data]
            self._queue.put_nowait(slot)
        else:
            self._queue.put_nowait(data)
        self._queued_bytes += len(data)
        if backlog > READ_PAUSE_BYTES:
            # The server reads and starts no request of this client's until it drains (what it sends
            # meanwhile waits in the stream's bounded buffer, then in the kernel).
            self._room.clear()

    async def _send_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    break
                if isinstance(item, list):  # a merged approval.updated: sent as it is now, then no more
                    data = item[0]
                    for key, slot in list(self._updates.items()):
                        if slot is item:
                            del self._updates[key]
                            break
                else:
                    data = item
                self._queued_bytes -= len(data)
                if self.closed:  # cut off while it waited: nothing more is written to a closed transport
                    break
                self.writer.write(data)
                if not self._transport_room():
                    # Waits as long as the client does not read, with no timeout of its own: the cut-off
                    # is decided in send(), by bytes, whether or not this task ever gets on.
                    await self.writer.drain()
                if not self._room.is_set() and self.backlog() <= READ_PAUSE_BYTES:
                    self._room.set()
            await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.abort()

    def _agent_over(self, more: int) -> bool:
        """`more` bytes queued here would take what waits for this agent's connections past its cap."""
        if self.peers is None:
            return False
        held = sum(c.backlog() for c in self.peers if not c.closed)
        return held + more > MAX_BACKLOG_BYTES_PER_AGENT

    def backlog(self) -> int:
        """Bytes waiting for this client: queued here and in the socket's transport buffer."""
        return self._queued_bytes + self.writer.transport.get_write_buffer_size()

    def _transport_room(self) -> bool:
        """The socket's own buffer is not backed up (past this the sender waits for the client)."""
        return self.writer.transport.get_write_buffer_size() <= TRANSPORT_BUFFER_BYTES

    @property
    def reading_paused(self) -> bool:
        """Too much waits for this client: its requests are not read until it drains some."""
        return not self._room.is_set()

    async def wait_room(self) -> None:
        await self._room.wait()

    def abort(self, *, hard: bool = False) -> None:
        """Close now; `hard` drops what waits for the client (one that does not read never takes it)."""
        if self.closed:
            return
        self.closed = True
        self._room.set()  # a reader waiting for room sees the connection closed
        if hard:  # what was queued for it is dropped now, not carried until the sender gets to it
            self._drop_queue()
        self.writer.transport.abort() if hard else self.writer.close()
        self._on_close(self)

    def _drop_queue(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
        self._updates.clear()
        self._queued_bytes = 0
        self._queue.put_nowait(None)  # the sender ends

    async def finish(self) -> None:
        """Flush what is queued, then close."""
        self._finishing = True
        if not self.closed:
            self._queue.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self._sender), FLUSH_TIMEOUT_S)
            if self.writer.transport.get_write_buffer_size():  # it did not read in time: no more waiting
                self.writer.transport.abort()
        self.abort()
        self._sender.cancel()
