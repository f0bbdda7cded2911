"""Node session output into the gateway's fan-out (runner/gateway/output.py): which node sessions a node is
asked to push (`sessions.watch|unwatch`), their pushed bytes as `session.output`, and every node session's
byte total (`session.offsets`) for the unread counts; all filed under the link's own name."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.nodes.link import NodeError, NodeLink
from engine.protocol.methods import EventName

if TYPE_CHECKING:
    from runner.gateway.hubs import HubServices

log = logging.getLogger("exechost.gateway.nodes")

MAX_OUTPUT_CHARS = 128 * 1024  # one node output frame passed on (the node sends ≤ 64 KiB of bytes)
MAX_NODE_SESSIONS = 1000  # byte totals kept per node (a hostile node cannot grow the gateway's memory)


class NodeOutputFeed:
    """The fan-out's `RemoteOutput` for node sessions (`node:<name>:<id>`)."""

    def __init__(self, services: HubServices, links: Callable[[], dict[str, NodeLink]]) -> None:
        self.services = services
        self._links = links
        # Node sessions' raw byte totals (gateway ids), from each node's session.offsets: unread counts.
        self._offsets: dict[str, int] = {}
        # Node sessions a node was asked to push, with the link's connect time then (a new link re-asks).
        self._watching: dict[str, int | None] = {}
        # The same ids by node, oldest watched first: each node's share is bounded (MAX_NODE_SESSIONS).
        self._by_node: dict[str, dict[str, None]] = {}
        self._calls: set[asyncio.Task[Any]] = set()

    def session_event(self, event: str, session_id: str) -> None:
        """A node session started (a connection taking every session's output wants it pushed) or ended."""
        if event == EventName.SESSION_STARTED and self.services.output.output_wanted(session_id):
            self.watch(session_id)
        elif event == EventName.SESSION_EXITED:
            self._forget(session_id)

    def _split(self, session_id: str) -> tuple[NodeLink, str] | None:
        parts = session_id.split(":", 2)
        if len(parts) != 3 or parts[0] != "node" or not parts[2]:
            return None
        link = self._links().get(parts[1])
        return (link, parts[2]) if link is not None else None

    def knows(self, session_id: str) -> bool:
        """A node session this gateway can have pushed: its node is connected and can watch."""
        found = self._split(session_id)
        if found is None:
            return False
        link = found[0]
        return link.state == "connected" and link.hello is not None and "sessions.watch" in link.hello.caps

    def offsets(self) -> dict[str, int]:
        return self._offsets

    def watch(self, session_id: str) -> None:
        found = self._split(session_id)
        if found is None:
            return
        link, raw = found
        self._forget(session_id)  # re-added last: each node's ids are kept oldest watched first
        mine = self._by_node.setdefault(link.name, {})
        # Bounded per node like its byte totals: a node announcing fresh ids makes the gateway forget
        # its own oldest watched session (never another node's), not grow.
        while len(mine) >= MAX_NODE_SESSIONS:
            self._forget(next(iter(mine)))
        mine[session_id] = None
        self._watching[session_id] = link.connected_at_ms
        self._call(link, "sessions.watch", {"sessionId": raw})

    def _forget(self, session_id: str) -> None:
        self._watching.pop(session_id, None)
        node = session_id.split(":", 2)[1] if session_id.count(":") >= 2 else ""
        mine = self._by_node.get(node)
        if mine is not None:
            mine.pop(session_id, None)
            if not mine:
                del self._by_node[node]

    def _unwatch(self, session_id: str) -> None:
        found = self._split(session_id)
        self._forget(session_id)
        if found is not None:
            self._call(found[0], "sessions.unwatch", {"sessionId": found[1]})

    def _call(self, link: NodeLink, method: str, params: dict[str, Any]) -> None:
        async def go() -> None:
            try:
                res = await link.call(method, params, timeout=10)
            except NodeError as exc:
                log.warning("%s on node %s failed: %s", method, link.name, exc)
                return
            if not res.ok:
                log.info("%s on node %s: %s", method, link.name, (res.error or {}).get("message"))

        task = asyncio.ensure_future(go())
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    def on_output(self, link: NodeLink, p: dict[str, Any]) -> None:
        """A watched node session's output, as the gateway's own `session.output` (ids prefixed by the
        link's name, never by the frame); nobody wanting it any more stops the node pushing it."""
        raw, offset = p.get("sessionId"), p.get("offset")
        if not isinstance(raw, str) or not 0 < len(raw) <= 128 or ":" in raw:
            return
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            return
        sid = f"node:{link.name}:{raw}"
        data: dict[str, Any] = {"sessionId": sid, "offset": offset}
        text, stream = p.get("data"), p.get("stream")
        if p.get("dropped") is True or not isinstance(text, str) or len(text) > MAX_OUTPUT_CHARS:
            data["dropped"] = True  # a gap (or a frame too big to pass on): the pane re-reads the log
        else:
            data.update(stream=stream if stream in ("stdout", "stderr", "pty") else "stdout", data=text)
            end = p.get("nextOffset")  # the raw byte range of the text (a node older than it sends none)
            if type(end) is int and offset <= end <= offset + 4 * len(text):  # ≤ 4 bytes a character
                data["nextOffset"] = end
        if not self.services.output.remote_output(sid, data) and sid in self._watching:
            self._unwatch(sid)

    def on_offsets(self, link: NodeLink, p: dict[str, Any]) -> None:
        totals = p.get("sessions")
        if not isinstance(totals, dict):
            return
        prefix = f"node:{link.name}:"
        for sid in [s for s in self._offsets if s.startswith(prefix)]:
            del self._offsets[sid]
        for raw, total in list(totals.items())[:MAX_NODE_SESSIONS]:
            good_id = isinstance(raw, str) and 0 < len(raw) <= 128 and ":" not in raw
            if good_id and isinstance(total, int) and not isinstance(total, bool) and total >= 0:
                self._offsets[prefix + raw] = total
        # A new link (the node service kept its sessions): what consoles still follow is asked for again.
        for sid, since in list(self._watching.items()):
            if sid.startswith(prefix) and since != link.connected_at_ms:
                if sid in self._offsets and self.services.output.output_wanted(sid):
                    self.watch(sid)
                else:
                    self._forget(sid)
