"""The console's one link to the gateway: connect (auto-start), attach, subscribe, reconnect, route events."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from textual.app import App

from console.messages import GatewayConnected, GatewayEvent, GatewayLost
from engine.protocol.client import ControlClient
from engine.protocol.frames import Event, GatewayUnavailable, RemoteError
from engine.protocol.methods import TOPICS, EventName
from engine.protocol.requests import ApprovalsAttach, Message, SessionsFollow, SessionsUnfollow, Subscribe

PENDING_CAP = 1 << 20  # chars buffered for the visible pane between two flushes


class OutputRouter:
    """Session output lands here from the socket reader, without a Message per chunk.

    Only the visible session keeps its text (drained by the app's ~30 Hz flush). The gateway pushes only
    the followed (visible) session's output and reports the others as `session.activity` unread counts;
    a hidden session that still sends output just counts unread chars. Chunks carry the raw byte range
    of their text, so what a log replay already showed is never shown twice. The router owns its cursor
    (how far the visible pane has shown, in raw bytes): the pane tells it (`replayed`, `advance`); it
    never reads or writes it directly.
    """

    def __init__(self) -> None:
        self.visible: str | None = None
        # (raw byte offset, raw byte offset after, text): the range the text stands for, by the gateway
        self.pending: list[tuple[int | None, int | None, str]] = []
        self.pending_chars = 0
        self.overflowed = False
        self._since: dict[str, int] = {}  # raw byte offset the pane has shown up to, per session
        self.unread: defaultdict[str, int] = defaultdict(int)
        self.pushed = False  # has the gateway ever pushed output? if not, the app polls the log
        self.polled: set[str] = set()  # node sessions the gateway cannot push: read by offset

    def feed(self, session_id: str, data: str, offset: int | None = None, end: int | None = None) -> None:
        self.pushed = True
        if session_id != self.visible:
            self.unread[session_id] += len(data)
            return
        self.pending.append((offset, end, data))
        self.pending_chars += len(data)
        if self.pending_chars > PENDING_CAP:
            # Faster than anyone can read: drop what is queued; the pane re-reads the log tail instead.
            self.pending = []
            self.pending_chars = 0
            self.overflowed = True

    def activity(self, rows: Any) -> None:
        """`session.activity {sessions:[{sessionId, unreadBytes}]}`: the hidden sessions' unread counts."""
        if not isinstance(rows, list):
            return
        for row in rows:
            sid = row.get("sessionId") if isinstance(row, dict) else None
            unread = row.get("unreadBytes") if isinstance(row, dict) else None
            if isinstance(sid, str) and isinstance(unread, int) and sid != self.visible:
                self.unread[sid] = unread

    def gap(self, session_id: str) -> None:
        """The gateway dropped output for a slow viewer: the visible pane must re-read the log."""
        if session_id == self.visible:
            self.overflowed = True

    def show(self, session_id: str | None) -> None:
        self.visible = session_id
        self.pending = []
        self.pending_chars = 0
        self.overflowed = False
        if session_id is not None:
            self.unread.pop(session_id, None)
            self._since.pop(session_id, None)

    def cursor(self, session_id: str) -> int | None:
        """The raw byte offset the pane has shown `session_id` up to (None: not known by offset)."""
        return self._since.get(session_id)

    def replayed(self, session_id: str, next_offset: int | None) -> None:
        """A replay filled the pane up to raw byte `next_offset`; None: it had no offsets, start clean."""
        if next_offset is None:
            self.show(session_id)
        else:
            self._since[session_id] = next_offset

    def advance(self, session_id: str, since: int, next_offset: int) -> bool:
        """A read from `since` showed up to `next_offset`; False (nothing moved) when the cursor is not at
        `since` any more (a replay moved it meanwhile): that read is stale."""
        if self._since.get(session_id) != since:
            return False
        self._since[session_id] = next_offset
        return True

    def drain(self) -> tuple[str, bool]:
        """The visible session's text since the cursor, and whether the pane must re-read instead."""
        since = self._since.get(self.visible or "")
        parts: list[str] = []
        overflowed = self.overflowed
        for offset, end, data in self.pending:
            if since is not None and offset is not None:
                if end is not None and end <= since:
                    continue  # the replay already showed it
                if offset < since:
                    cut = None if end is None else _cut(data, since - offset, end - offset)
                    if cut is None:
                        # The text cannot be cut at that byte (replacement characters, or a peer that
                        # sent no range): re-read from where the replay ended instead of guessing.
                        overflowed = True
                        break
                    data = cut
            parts.append(data)
        self.pending = []
        self.pending_chars = 0
        self.overflowed = False
        return "".join(parts), overflowed


def _cut(text: str, skip: int, size: int) -> str | None:
    """`text`, which stands for `size` raw bytes, without its first `skip` bytes; None when its characters
    do not stand for their own UTF-8 (a replacement character for 1 or 2 bytes) or `skip` falls inside one."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) != size:
        return None
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError:
        return None


_WRAPPERS = re.compile(r"^(?:gateway exited with code -?\d+: )?(?:exechost: )?(?:gateway failed to start: )?")


def lost_text(reason: str) -> str:
    """The header while no gateway answers: the whole cause, its wrappers folded into one plain phrase (a
    daemon that could not start says why: a broken config.toml, an unusable state dir)."""
    cause = _WRAPPERS.sub("", reason.strip(), count=1)
    started = cause != reason.strip() and reason.startswith("gateway exited")
    return f"gateway {'cannot start' if started else 'unreachable'} (retrying): {cause or 'no reason given'}"


class GatewayLink:
    """Owns the ControlClient; the gateway owns all state, so a reconnect is just attach + resync."""

    def __init__(self, app: App[Any], state: Path | None = None, *, autostart: bool = True) -> None:
        self.app = app
        self.state = state
        self.autostart = autostart
        self.client: ControlClient | None = None
        self.output = OutputRouter()
        self.connected = asyncio.Event()
        self.use_follow = True  # False: ask for every session's output (protocol v1; the bench compares)
        self.follows = False  # the gateway supports sessions.follow (pushes only the visible session)
        # Events that arrive while the snapshot is fetched wait here and follow it: posted before it, an
        # ask raised between the pending and sessions requests would be wiped by the older snapshot.
        self._held: list[Event] | None = None

    async def run(self) -> None:
        """Connect, serve events until the connection drops, retry with backoff; runs for the app's life."""
        delay = 0.2
        while True:
            try:
                client = await ControlClient.connect(
                    self.state, client="console", name="console", autostart=self.autostart, operator=True
                )
            except (GatewayUnavailable, RemoteError, OSError) as exc:
                self.app.post_message(GatewayLost(str(exc)))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            delay = 0.2
            self.client = client
            self._held = []
            client.add_listener(self._on_event)
            try:
                visible = self.output.visible
                follow = ([visible] if visible else []) if self.use_follow else None
                subscribed = await client.request(Subscribe(topics=list(TOPICS), follow=follow))
                self.follows = "follow" in subscribed
                self.output.pushed = self.output.pushed or self.follows
                await client.request(ApprovalsAttach())
                pending = await client.pending_approvals()
                sessions = await client.list_sessions()
                self.connected.set()
                self.app.post_message(GatewayConnected(client.server_pid, list(pending), list(sessions)))
                self._release_held()
                async for _ in client.events():
                    pass  # the listener already routed it
            except (ConnectionError, RemoteError, OSError) as exc:
                self.app.post_message(GatewayLost(str(exc)))
            finally:
                self._held = None
                self.connected.clear()
                self.client = None
                with contextlib.suppress(Exception):
                    await client.close()
            self.app.post_message(GatewayLost(client.close_reason or "connection closed"))
            await asyncio.sleep(delay)

    def _on_event(self, ev: Event) -> None:
        if ev.event == EventName.SESSION_ACTIVITY:
            self.output.activity(ev.data.get("sessions"))
            return
        if ev.event == EventName.SESSION_OUTPUT:
            data, sid, offset = ev.data.get("data"), ev.data.get("sessionId"), ev.data.get("offset")
            if not isinstance(sid, str):
                return
            if ev.data.get("dropped"):
                self.output.gap(sid)
            elif isinstance(data, str):
                end = ev.data.get("nextOffset")
                start = offset if isinstance(offset, int) else None
                self.output.feed(sid, data, start, end if isinstance(end, int) else None)
            return
        if self._held is not None:
            self._held.append(ev)
            return
        self._post(ev)

    def _release_held(self) -> None:
        held, self._held = self._held or [], None
        for ev in held:  # replaying what the snapshot already holds is harmless: rows are keyed by id
            self._post(ev)

    def _post(self, ev: Event) -> None:
        message = GatewayEvent.of(ev.event, ev.data)
        if message is not None:
            self.app.post_message(message)

    async def follow(self, session_id: str | None) -> None:
        """Have the gateway push this session's output only (None: none); before a replay, so the replay
        and the pushed frames meet at an offset with nothing lost between them."""
        if not self.follows:
            return
        self.output.polled.discard(session_id or "")
        with contextlib.suppress(RemoteError, ConnectionError):  # gone meanwhile: nothing to follow
            if session_id is None:
                await self.request(SessionsUnfollow())
                return
            try:
                await self.request(SessionsFollow(session_id=session_id, only=True))
            except RemoteError:
                if not session_id.startswith("node:"):
                    raise
                # A node that cannot push (an older exechost there): its pane reads by offset instead.
                self.output.polled.add(session_id)
                await self.request(SessionsUnfollow())

    async def list_sessions(self) -> list[dict[str, Any]]:
        """Every session row, page by page (see ControlClient.list_sessions)."""
        client = self.client
        if client is None or client.closed:
            raise ConnectionError("not connected to the gateway")
        return await client.list_sessions()

    async def request(self, msg: Message | str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request (a typed message; or a method and its params, as ControlClient.request takes them);
        raises ConnectionError when the gateway is down (the caller shows it)."""
        client = self.client
        if client is None or client.closed:
            raise ConnectionError("not connected to the gateway")
        return await client.request(msg, params)
