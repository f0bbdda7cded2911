"""What nodes send of their own, in the gateway's terms: a run's exec.started|finished|denied as its agent's
system events (reference §5.5), a session's notices filed under the key the gateway gave, session list
changes for the operators' consoles, output for the fan-out; and every frame that names nothing of its
node's, dropped, counted and logged."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.display import visible
from engine.nodes.link import NodeLink
from engine.nodes.wire import NodeEvent
from engine.principals import key_owner
from engine.protocol.frames import Event
from engine.protocol.methods import EventName
from engine.sessions.outtext import sanitize
from runner.gateway import node_limits as limits
from runner.gateway.node_keys import NodeKeys
from runner.gateway.node_orphans import Orphans
from runner.gateway.node_output import NodeOutputFeed
from runner.gateway.node_runs import NodeRun, compact

if TYPE_CHECKING:
    from runner.gateway.hubs import HubServices

log = logging.getLogger("exechost.gateway.nodes")

EVENT_OUTPUT_CHARS = 180  # reference §5.5: the finished text's output, compacted


# (node, scope key) -> whether the gateway gave that node the key (node-keys.json), for an agent still
# allowed there when the key names one: the only scopes a node's session row is filed under.
Files = Callable[[str, str], bool]


def unknown_scope(node: str) -> str:
    """The scope a node's row is filed under when it names one the gateway never gave that node: ownerless
    (engine.principals.key_owner: no agent's), so the operator's only, and the node's own."""
    return f"node:{node}:unknown"


def session_row(link: NodeLink, row: dict[str, Any], files: Files) -> dict[str, Any] | None:
    """A node's session row in the gateway's terms: its id prefixed, its node named (by the link, never
    by the row), its scopeKey one the gateway gave that node or the node's unknown one (fresh round 18 c:
    a compromised node's row named an agent never allowed there, and a console's `/exec` on that session
    set that agent's policy; the row's scope is the node's word, as node_sessions judges it for counting)."""
    raw = row.get("sessionId")
    if not isinstance(raw, str) or not 0 < len(raw) <= 128 or ":" in raw:
        return None
    where = "sandbox" if row.get("host") == "sandbox" else "node"
    out = limits.session_row(row)
    scope = out.get("scopeKey")
    if "scopeKey" in out and not (isinstance(scope, str) and files(link.name, scope)):
        out["scopeKey"] = unknown_scope(link.name)
    return {
        **out,
        "sessionId": f"node:{link.name}:{raw}",
        "node": link.name,
        "host": f"{where}:{link.name}",
    }


class NodeEvents:
    """The hub's runs in flight and orphans are read here, never changed but for a run's end."""

    def __init__(
        self,
        services: HubServices,
        runs: dict[tuple[str, str], NodeRun],
        orphans: Orphans,
        keys: NodeKeys,
        feed: NodeOutputFeed,
    ) -> None:
        self.services = services
        self._runs = runs
        self.orphans = orphans
        self.keys = keys
        self.feed = feed
        self._last_drop_log: dict[str, float] = {}
        self.dropped = 0  # frames dropped for naming no run of their node (also logged, for the operator)

    def files(self, node: str, scope: str) -> bool:
        """Whether a node's row may be filed under `scope` (Files): a key given to it, of an agent (if any)
        still allowed there."""
        owner = key_owner(scope)
        if not self.keys.given(node, scope):
            return False
        return owner is None or self.services.config().may_use_node(owner, node)

    def on_event(self, link: NodeLink, ev: NodeEvent) -> None:
        """Reference §5.5: exec.started|finished|denied as the agent's system events."""
        p = ev.payload
        if ev.event == EventName.SESSION_OUTPUT:
            self.feed.on_output(link, p)
            return
        if ev.event == "session.offsets":
            self.feed.on_offsets(link, p)
            return
        # For the consoles' session lists:
        if ev.event in (EventName.SESSION_STARTED, EventName.SESSION_EXITED):
            row = session_row(link, p["session"], self.files) if isinstance(p.get("session"), dict) else None
            if row is not None:  # every scope on the node: the operators' consoles only
                frame = Event(event=ev.event, data=row)
                for conn in self.services.connections():
                    if conn.operator and "sessions" in conn.topics:
                        conn.send(frame)
                sid = row["sessionId"]
                self.feed.session_event(ev.event, sid)
            return
        raw_run = p.get("runId")
        run = self._runs.get((link.name, raw_run)) if isinstance(raw_run, str) else None
        orphaned = False
        if run is None and isinstance(raw_run, str) and ev.event in ("exec.finished", "exec.denied"):
            run = self.orphans.pop(link.name, raw_run)  # its end, after a link was lost
            orphaned = run is not None
        if ev.event == EventName.SYSTEM_EVENT:
            # A session's own notice (a background exit): for the run it names on this link, else for a
            # key the gateway gave this node; filed under the gateway's key, never a frame's other one.
            raw_key = p.get("sessionKey")
            key = run.session_key if run is not None else raw_key if isinstance(raw_key, str) else ""
            if run is None and not self.keys.given(link.name, key):
                self.drop_frame(link, ev.event, f"session key {key[:80]!r} was never given to it")
                return
            owner = key_owner(key)
            if owner is not None and not self.services.config().may_use_node(owner, link.name):
                self.drop_frame(link, ev.event, f"agent {owner} may no longer use this node")
                return
            mark = f"[node {link.name}] "
            text = limits.cut(
                sanitize(limits.field_text(p, "text", limits.EVENT_TEXT_CHARS)), limits.EVENT_TEXT_CHARS
            )
            # The node's notices keep a few of the queue's places (its newest): never the agent's own.
            self.services.events.enqueue(key, mark + text, share=(mark, limits.MAX_NODE_EVENTS_PER_KEY))
            return
        if ev.event not in ("exec.started", "exec.finished", "exec.denied"):
            self.drop_frame(link, ev.event, "not an event nodes send")
            return
        if run is None or run.ended:
            # A run this gateway never started on this node, or one whose end was already reported.
            self.drop_frame(link, ev.event, f"run {str(raw_run)[:80]!r} is not in flight on this node")
            return
        if ev.event == "exec.started":
            if run.start_seen:  # taken once, like its end: a repeated start would push out the agent's events
                self.drop_frame(link, ev.event, f"run {run.run_id[:80]!r} already started")
                return
            run.start_seen = True
        if ev.event in ("exec.finished", "exec.denied"):
            run.ended = True
        if run.detached and not orphaned and ev.event in ("exec.finished", "exec.denied"):
            return  # the follow-up in the gateway's words says it (once); an orphan's said it was unknown
        if p.get("suppressNotifyOnExit") is True or not self.services.config().exec.notify_on_exit:
            return
        key, run_id = run.session_key, run.run_id
        command = compact(run.command, limits.EVENT_COMMAND_CHARS)  # what the agent asked, as recorded here
        if ev.event == "exec.started":
            text = f"Exec started (node={link.name} id={run_id}): {command}"
        elif ev.event == "exec.finished":
            timed_out = p.get("timedOut") is True
            output = compact(limits.field_text(p, "output", 64 * 1024), EVENT_OUTPUT_CHARS)
            code = p.get("exitCode")
            code = code if isinstance(code, int) and not isinstance(code, bool) else None
            if not (timed_out or code != 0 or output or orphaned):  # an orphan's end is always told
                return
            ended = "timeout" if timed_out else f"code {code}"
            text = f"Exec finished (node={link.name} id={run_id}, {ended})"
            if output:
                text += f"\n{output}"
        else:
            reason = compact(limits.field_text(p, "reason", 4096) or "denied", limits.EVENT_REASON_CHARS)
            text = f"Exec denied (node={link.name} id={run_id}, {reason}): {command}"
        self.services.events.enqueue(key, text)

    def drop_frame(self, link: NodeLink, what: str, why: str) -> None:
        """A node frame that names nothing of its own: never acted on, counted, and logged for the operator
        (at most one line a second per node, so a flood cannot fill the log either)."""
        self.dropped += 1
        now = time.monotonic()
        last = self._last_drop_log.get(link.name, 0.0)
        if now - last >= 1.0:
            self._last_drop_log[link.name] = now
            log.warning(
                "node %s: dropped %s: %s (%d frames dropped from nodes so far)",
                link.name,
                visible(what),  # the node's own event name: never raw into the log
                visible(why),
                self.dropped,
            )
