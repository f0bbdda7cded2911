"""Which tools a sandboxed session may call (seed 004 §4.2): `tools.sandbox.tools.allow` / `deny`.

Names are trimmed and lowercased, `*` is a wildcard, deny is checked first, and an empty allow list allows
every tool. A refusal names the rule that refused, so the agent and the operator see why.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence


def _norm(value: str) -> str:
    return value.strip().lower()


def _hit(tool: str, patterns: Sequence[str]) -> str | None:
    for pattern in patterns:
        p = _norm(pattern)
        if p and fnmatch.fnmatchcase(tool, p):
            return pattern
    return None


def tool_refusal(tool: str, allow: Sequence[str], deny: Sequence[str]) -> str | None:
    """None when `tool` may run in a sandboxed session, else why not (the rule, in the config's words)."""
    name = _norm(tool)
    denied = _hit(name, deny)
    if denied is not None:
        return f"tool {tool!r} is denied in sandboxed sessions by tools.sandbox.tools.deny rule {denied!r}"
    if [a for a in allow if _norm(a)] and _hit(name, allow) is None:
        listed = ", ".join(repr(a) for a in allow)
        return f"tool {tool!r} is not in tools.sandbox.tools.allow ({listed}) for sandboxed sessions"
    return None
