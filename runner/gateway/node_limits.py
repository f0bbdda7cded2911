"""What a node may send, sized: every field of a relayed ask or a node event is cut to a cap here, before
the gateway keeps or shows it, so a compromised node cannot grow the gateway's memory or an inbox row."""

from __future__ import annotations

import json
from typing import Any

from engine.approvals.decisions import DECISIONS

COMMAND_CHARS = 8192
PATH_CHARS = 4096
ENV_KEYS = 64
ENV_CHARS = 4096  # one key and its value
WARNINGS = 16
WARNING_CHARS = 500
DECISION_BYTES = 16 * 1024  # the node's decision record (shown in the ask's detail), as JSON
DECISION_DEPTH = 8  # its nesting (our own record nests four deep: segments, each one's argv)
REASON_CHARS = 1000
WORD_CHARS = 64  # security, ask, askFallback: one word each
EVENT_COMMAND_CHARS = 400
EVENT_REASON_CHARS = 200
EVENT_TEXT_CHARS = 2000  # a node's system.event text (the store caps every event again)
# A node's undelivered notices in one queue (of its 100 places): past this its oldest there goes, so a node
# telling a run's agent about its sessions can never push that agent's own events out of the queue.
MAX_NODE_EVENTS_PER_KEY = 16
MAX_ASKS_PER_RUN = 8  # a run asks once, again after a stale or one-use miss; never dozens of times


def cut(value: Any, limit: int) -> str:
    """A string field as text of at most `limit` characters (anything else: empty)."""
    if not isinstance(value, str):
        return ""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def optional(value: Any, limit: int) -> str | None:
    return cut(value, limit) if isinstance(value, str) else None


def env_pairs(raw: Any) -> tuple[tuple[str, str], ...]:
    """The ask's env as sorted pairs: string keys and values only, at most ENV_KEYS of them."""
    if not isinstance(raw, dict):
        return ()
    pairs = [(k, v) for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)]
    kept = [(k, v) for k, v in pairs if len(k) + len(v) <= ENV_CHARS]
    return tuple(sorted(kept)[:ENV_KEYS])


def warnings(raw: Any) -> list[str]:
    items = raw if isinstance(raw, list) else []
    return [cut(w, WARNING_CHARS) for w in items[:WARNINGS] if isinstance(w, str)]


def decision_json(raw: Any) -> dict[str, Any]:
    """The node's decision record when it is small and shallow (it is only shown); else a note that it was
    dropped. Shallow: the gateway nests it deeper than the node's frame did (a pending page puts it five
    levels down), so one as deep as the node wire admits made every frame listing it one its own
    clients refuse (engine.jsontext.MAX_DEPTH)."""
    if not isinstance(raw, dict):
        return {}
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError, RecursionError):
        return {}
    if len(text) > DECISION_BYTES:
        return {"dropped": f"the node's decision record was {len(text)} bytes (cap {DECISION_BYTES})"}
    if _depth(raw) > DECISION_DEPTH:
        return {"dropped": f"the node's decision record nests deeper than {DECISION_DEPTH} levels"}
    typed = _typed(raw, DECISION_SHAPE)
    return typed if isinstance(typed, dict) else {}


# The shape of a decision record (engine.policy.decision.Decision.to_json) as the gateway shows it: a node's
# record keeps only these fields, each of this type (a list keeps only its items of the item's shape), so
# a console reading `segments[i].get(...)` never meets a string a hostile node put there.
_OPT_STR = (str, type(None))
_STEP = {"layer": str, "key": str, "value": str}
_SEGMENT = {
    "argv": [str],
    "resolvedPath": _OPT_STR,
    "satisfiedBy": _OPT_STR,
    "matchedPattern": _OPT_STR,
    "entryId": _OPT_STR,
    "reason": _OPT_STR,
}
_DIGEST = {"role": str, "path": str, "sha256": str, "size": int, "agentWritable": bool}
DECISION_SHAPE: dict[str, Any] = {
    "command": str,
    "agentId": str,
    "host": str,
    "security": str,
    "ask": str,
    "askFallback": str,
    "node": _OPT_STR,
    "elevated": str,
    "sandboxed": bool,
    "analysisOk": bool,
    "analysisReason": _OPT_STR,
    "allowlistSatisfied": bool,
    "durable": bool,
    "requiresApproval": bool,
    "decision": str,
    "reason": str,
    "decidedBy": _STEP,
    "segments": [_SEGMENT],
    "enforcedCommand": _OPT_STR,
    "pinnedCommand": _OPT_STR,
    "contentDigests": [_DIGEST],
    "allowedDecisions": [str],
    "allowAlwaysPatterns": [str],
    "warnings": [str],
    "grantIds": [str],
    "trail": [_STEP],
    "dropped": str,
}
_MISSING = object()


def _typed(value: Any, shape: Any) -> Any:
    """`value` kept to `shape` (a type or tuple of types, [item shape], {key: shape}); _MISSING when it
    does not fit. bool is never an int here, as on every wire of ours."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return _MISSING
        kept = {k: _typed(value[k], sub) for k, sub in shape.items() if k in value}
        return {k: v for k, v in kept.items() if v is not _MISSING}
    if isinstance(shape, list):
        if not isinstance(value, list):
            return _MISSING
        items = [_typed(v, shape[0]) for v in value]
        return [v for v in items if v is not _MISSING]
    types = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(value, bool) and bool not in types:
        return _MISSING
    return value if isinstance(value, types) else _MISSING


def _depth(value: Any) -> int:
    """How deep `value` nests (a scalar is 0, `{}` is 1), without recursing on the node's choice."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def allowed_decisions(raw: Any) -> tuple[str, ...]:
    """What the node offers, each once and in the usual order; deny is always among them."""
    offered = raw if isinstance(raw, list) else []
    picked = tuple(d for d in DECISIONS if d in offered or d == "deny")
    return picked if len(picked) > 1 else ("allow-once", "deny")


def field_text(payload: dict[str, Any], key: str, limit: int) -> str:
    return cut(payload.get(key), limit)


ROW_TEXT_CHARS = 4000  # a session row's command, cwd, tail…
# A session row's fields as this gateway's own rows have them (engine.sessions.registry.Session.to_dict),
# each with its type: consoles and `process list` sort and format them as such (a node's `startedAt:
# "soon"` made the console's sort raise and the console die, and every agent's `process list` fail).
ROW_FIELDS: dict[str, type] = {
    "sessionId": str,
    "status": str,
    "cwd": str,
    "command": str,
    "name": str,
    "tail": str,
    "scopeKey": str,
    "host": str,
    "exitSignal": str,
    "pid": int,
    "startedAt": int,
    "endedAt": int,
    "runtimeMs": int,
    "exitCode": int,
    "totalChars": int,
    "truncated": bool,
    "pty": bool,
    "backgrounded": bool,
}


def session_row(raw: dict[str, Any]) -> dict[str, Any]:
    """A node's session row as the consoles and agents get it: the fields a row of ours has, each of the
    type ours has (a bool is no int), strings cut to ROW_TEXT_CHARS; anything else is dropped."""
    out: dict[str, Any] = {}
    for key, kind in ROW_FIELDS.items():
        value = raw.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            continue
        out[key] = cut(value, ROW_TEXT_CHARS) if isinstance(value, str) else value
    return out
