"""Parameter helpers shared by the handlers: typed reads that fail with a clear message."""

from __future__ import annotations

from typing import Any

from engine.errors import InvalidInput


def opt_str(params: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = params.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string")
    return value


def req_str(params: dict[str, Any], key: str) -> str:
    value = opt_str(params, key)
    if value is None or not value.strip():
        raise InvalidInput(f"{key} is required")
    return value


def session_key(params: dict[str, Any]) -> str:
    return (opt_str(params, "sessionKey") or "").strip()[:256]


def agent_id(params: dict[str, Any]) -> str:
    return (opt_str(params, "agentId") or "main").strip()[:128] or "main"
