"""The policy vocabulary (hosts, security and ask modes, elevated levels) and how two modes combine."""

from __future__ import annotations

from typing import Any, Literal

HOSTS = ("auto", "sandbox", "gateway", "node")
SECURITIES = ("deny", "allowlist", "full")
ASKS = ("off", "on-miss", "always")
ELEVATED_LEVELS = ("off", "on", "ask", "full")

Security = Literal["deny", "allowlist", "full"]
Ask = Literal["off", "on-miss", "always"]

_SECURITY_ORDER = {"deny": 0, "allowlist": 1, "full": 2}
_ASK_ORDER = {"off": 0, "on-miss": 1, "always": 2}


def _normalize(value: Any, choices: tuple[str, ...]) -> str | None:
    if not isinstance(value, str):
        return None
    return value if value in choices else None  # exact lowercase only: "FULL" is not "full"


def normalize_host(value: Any) -> str | None:
    return _normalize(value, HOSTS)


def normalize_security(value: Any) -> str | None:
    return _normalize(value, SECURITIES)


def normalize_ask(value: Any) -> str | None:
    return _normalize(value, ASKS)


def normalize_elevated(value: Any) -> str | None:
    return _normalize(value, ELEVATED_LEVELS)


def min_security(a: str, b: str) -> str:
    """The stricter of two security modes (deny < allowlist < full)."""
    return a if _SECURITY_ORDER[a] <= _SECURITY_ORDER[b] else b


def max_ask(a: str, b: str) -> str:
    """The more asking of two ask modes (off < on-miss < always)."""
    return a if _ASK_ORDER[a] >= _ASK_ORDER[b] else b
