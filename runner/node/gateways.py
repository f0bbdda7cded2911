"""Which gateway a node's work belongs to: a node shared by several gateways files each one's sessions under
the fingerprint of the key that gateway proved on its link (engine.nodes.gateway_key), `<fp>/<scope>`, so
one gateway's agent `main` never lists, reads or kills another's. A link that proved no key is anonymous
(scopes without a `/`); it sees only the anonymous scopes. What leaves for a link is only its own."""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

from engine.nodes.wire import NodeEvent
from engine.principals import key_owner
from engine.sessions import SessionManager

SEP = "/"  # never in a scope a gateway names (the node refuses it there): only the node writes it
# The namespace of the link a request came in on ("" anonymous, else "<fingerprint>/"), set per request.
CURRENT_GATEWAY: contextvars.ContextVar[str] = contextvars.ContextVar("exechost_node_gateway", default="")


class ForeignScope(ValueError):
    """A scope from the wire that tries to name a namespace itself."""


def scoped(key: str, ns: str | None = None) -> str:
    """A gateway's own key as this node files it."""
    if SEP in key:
        raise ForeignScope(f"INVALID_REQUEST: a scope may not contain {SEP!r}")
    return (CURRENT_GATEWAY.get() if ns is None else ns) + key


def split(key: str) -> tuple[str, str]:
    """(namespace, the gateway's own key) of a key this node filed."""
    head, sep, rest = key.partition(SEP)
    return (head + SEP, rest) if sep else ("", key)


def principal(key: str) -> str:
    """Whose a key this node filed is: its gateway's namespace and the agent the gateway's own key names
    (`<ns><agent>`), or the namespace alone for an ownerless key (that gateway's own work: still nobody
    else's). Each node limit that is per principal counts by this."""
    ns, own = split(key)
    return ns + (key_owner(own) or "")


def owns(ns: str, key: str) -> bool:
    return split(key)[0] == ns


def namespace_of(event: NodeEvent) -> str | None:
    """The namespace of the gateway an event kept for its gateway is for (by the key it is filed under),
    or None when it names none."""
    key = event.payload.get("sessionKey")
    return split(key)[0] if isinstance(key, str) else None


def rows_for(ns: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Session rows of one gateway, each scope in that gateway's own terms."""
    out = []
    for row in rows:
        scope = row.get("scopeKey")
        if isinstance(scope, str) and owns(ns, scope):
            out.append({**row, "scopeKey": split(scope)[1]})
    return out


def session_of(sessions: SessionManager, ns: str, session_id: str) -> bool:
    session = sessions.get(session_id)
    return session is not None and owns(ns, session.scope_key)


def for_link(event: NodeEvent, ns: str, sessions: SessionManager) -> NodeEvent | None:
    """`event` as the link of namespace `ns` may see it, or None when it is another gateway's."""
    p = event.payload
    if event.event in ("system.event", "exec.finished", "exec.denied"):
        key = p.get("sessionKey")
        if not isinstance(key, str) or not owns(ns, key):
            return None
        return dataclasses.replace(event, payload={**p, "sessionKey": split(key)[1]})
    if event.event in ("session.started", "session.exited"):
        row = p.get("session")
        rows = rows_for(ns, [row]) if isinstance(row, dict) else []
        return dataclasses.replace(event, payload={**p, "session": rows[0]}) if rows else None
    if event.event == "session.output":
        sid = p.get("sessionId")
        return event if isinstance(sid, str) and session_of(sessions, ns, sid) else None
    if event.event == "session.offsets":
        totals = p.get("sessions")
        if not isinstance(totals, dict):
            return None
        mine = {sid: n for sid, n in totals.items() if isinstance(sid, str) and session_of(sessions, ns, sid)}
        return dataclasses.replace(event, payload={**p, "sessions": mine})
    return event
