"""`policy.check|override|overrides|agents`: explain a decision; session overrides; per-agent policy."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from engine.policy.precedence import SessionOverrides, apply_directive
from engine.policy.report import agent_policies
from engine.tools.decide import decide
from engine.tools.exec import sandbox_available
from runner.gateway.handlers.common import (
    agent_id,
    opt_path,
    req_str,
    require_operator,
    session_key,
)

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def check(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """What `exec` with these params would decide: the same decide() (grants, env, cwd fallback, sandbox
    refusal), so the check and the run never disagree."""
    command = req_str(params, "command")
    agent, key = agent_id(params, conn), session_key(params, conn)
    decided = await asyncio.to_thread(
        decide,
        command,
        params,
        config=services.config(),
        agent_id=agent,
        session_key=key,
        overrides=services.overrides,
        store=services.store,
        grants=services.grants,
        workdir=opt_path(params, "cwd"),
    )
    return decided.decision.to_json()


def _view(ov: SessionOverrides) -> dict[str, Any]:
    return {"host": ov.host, "security": ov.security, "ask": ov.ask, "node": ov.node, "elevated": ov.elevated}


async def override(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    key = session_key(params, conn)
    if not key:
        raise InvalidInput("sessionKey is required")
    directive = req_str(params, "directive")
    agent = agent_id(params, conn)
    config = services.config()
    current = services.overrides.get(key, SessionOverrides())
    updated, reply = apply_directive(
        current,
        directive,
        elevated_enabled=config.elevated_enabled_for(agent),
        sandboxed=sandbox_available(config, agent, key),
        session_key=key,
    )
    if not conn.operator and not _only_tightens(current, updated):
        require_operator(conn, f"{directive.strip()!r} (it broadens the session's policy)")
    if any(v is not None for v in _view(updated).values()):
        services.overrides[key] = updated
    else:
        services.overrides.pop(key, None)
    return {"text": reply, "details": {"sessionKey": key, "overrides": _view(updated)}}


# What a connection without the operator role may still set: only the strictest value of each field.
_STRICTEST = {"security": "deny", "ask": "always", "elevated": "off"}


def _only_tightens(before: SessionOverrides, after: SessionOverrides) -> bool:
    """True when every changed field moved to its strictest value (clearing or host/node changes never)."""
    old, new = _view(before), _view(after)
    return all(new[k] == old[k] or new[k] == _STRICTEST.get(k, object()) for k in new)


async def overrides(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    # An agent sees its own session keys' overrides only; the operator sees every one.
    rows = {key: _view(ov) for key, ov in services.overrides.items() if conn.sees_scope(key)}
    return {"overrides": rows}


async def agents(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Every agent's effective policy as this gateway enforces it (the console's Policy pane)."""
    require_operator(conn, "policy.agents")  # the allowlist is a map of what runs unasked
    config = services.config()
    approvals = await asyncio.to_thread(services.store.load)
    return {"agents": agent_policies(config, approvals, dict(services.overrides))}
