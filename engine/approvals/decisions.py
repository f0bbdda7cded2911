"""The three approval decisions, their /approve aliases and the `/approve` argument rule, declared once."""

from __future__ import annotations

DECISIONS = ("allow-once", "allow-always", "deny")

_ALIASES = {
    "allow": "allow-once",
    "once": "allow-once",
    "allow-once": "allow-once",
    "allowonce": "allow-once",
    "always": "allow-always",
    "allow-always": "allow-always",
    "allowalways": "allow-always",
    "deny": "deny",
    "reject": "deny",
    "block": "deny",
}

USAGE = "Usage: /approve <id> <decision> (see the pending approval message for available decisions)"


def valid_decisions_text() -> str:
    """The decisions and their aliases, for an error that names a wrong one."""
    aliases = ", ".join(sorted(a for a in _ALIASES if a not in DECISIONS and a.isalpha()))
    return f"valid decisions: {'|'.join(DECISIONS)} (aliases: {aliases})"


def normalize_decision(text: str) -> str | None:
    """The /approve aliases of reference §3.12, case-insensitive; None when not a decision."""
    return _ALIASES.get(text.strip().lower()) if isinstance(text, str) else None


def allowed_decisions(ask: str) -> tuple[str, ...]:
    """ask=always offers only allow-once|deny: allow-always would be pointless (it asks anyway)."""
    return ("allow-once", "deny") if ask == "always" else DECISIONS


def parse_approve_args(first: str, second: str) -> tuple[str, str] | None:
    """(approval id, decision) from `/approve <id> <decision>` or the reverse order; None = usage error."""
    decision = normalize_decision(second)
    if decision is not None:
        return first, decision
    decision = normalize_decision(first)
    return (second, decision) if decision is not None else None
