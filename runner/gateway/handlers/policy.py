"""`policy.check|override|overrides|agents`: explain a decision; session overrides; per-agent policy."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from engine import fairpool
from engine.commands.boundfiles import agent_view
from engine.errors import ExecHostError, InvalidInput
from engine.policy.precedence import SessionOverrides, apply_directive
from engine.policy.report import agent_policies
from engine.principals import canonical_session, key_owner, owns_key
from engine.protocol.requests import PolicyAgents, PolicyCheck, PolicyOverride, PolicyOverrides
from engine.statefs import StateFileError
from engine.tools.decide import decide
from engine.tools.exec import sandbox_available
from runner.gateway import overrides_file
from runner.gateway.handlers.common import agent_id, require_operator, session_key
from runner.gateway.limits import MAX_OVERRIDES_PER_AGENT, OVERRIDES_PAGE_BYTES

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def check(services: Services, conn: Connection, req: PolicyCheck) -> dict[str, Any]:
    """What `exec` with these params would decide: the same decide() (grants, env, cwd fallback, sandbox
    refusal), so the check and the run never disagree."""
    agent, key = agent_id(conn, req.agent_id), session_key(conn, req.session_key)
    decided = await fairpool.decisions.run(
        fairpool.queue_of(conn.operator, agent),
        functools.partial(
            decide,
            req.command,
            req.policy_params(),
            req.env,
            config=services.config(),
            agent_id=agent,
            session_key=key,
            overrides=services.overrides,
            store=services.store,
            grants=services.grants,
            workdir=req.cwd,
            # the operator's own places when it names no agent, as its exec's (hostprivate.space)
            operator=conn.operator and not req.agent_id,
        ),
        conn.fair_key,
    )
    answer = decided.decision.to_json()
    # The binding was read with the gateway's rights: an agent sees which files, not their digests.
    return answer if conn.operator else agent_view(answer)


def _view(ov: SessionOverrides) -> dict[str, Any]:
    return {"host": ov.host, "security": ov.security, "ask": ov.ask, "node": ov.node, "elevated": ov.elevated}


async def override(services: Services, conn: Connection, req: PolicyOverride) -> dict[str, Any]:
    key = session_key(conn, req.session_key)
    if not key:
        raise InvalidInput("sessionKey is required")
    directive = req.directive
    agent = agent_id(conn, req.agent_id)
    key = canonical_session(agent, key)  # what every spelling of main looks up (precedence)
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
    before = services.overrides.get(key)
    if any(v is not None for v in _view(updated).values()):
        if key not in services.overrides and not conn.operator:
            _check_room(services.overrides, key)
        services.overrides[key] = updated
    else:
        services.overrides.pop(key, None)
    if services.overrides.get(key) != before:  # (an agent alone only tightens: a few writes per key it owns)
        problem = await _keep(services)
        if problem is not None:
            reply += f"\nWarning: {problem}"
    return {"text": reply, "details": {"sessionKey": key, "overrides": _view(updated)}}


async def _keep(services: Services) -> str | None:
    """On disk before the answer: a lock-down the operator was told is set survives a crash or restart.
    One write at a time, each of the table as it is then (a later change is never overwritten by an older
    copy). A write that fails (a full disk) leaves the change in force here and says it will not outlive
    this gateway: refusing it would refuse a lock-down just when an agent filled the disk."""
    async with services.overrides_lock:
        table = dict(services.overrides)
        try:
            await fairpool.to_thread(overrides_file.save, services.overrides_path, table)
        except (OSError, StateFileError) as exc:
            return f"not saved to {services.overrides_path} ({exc}): it holds only until the gateway restarts"
    return None


# What a connection without the operator role may still set: only the strictest value of each field.
_STRICTEST = {"security": "deny", "ask": "always", "elevated": "off"}


def _only_tightens(before: SessionOverrides, after: SessionOverrides) -> bool:
    """True when every changed field moved to its strictest value (clearing or host/node changes never)."""
    old, new = _view(before), _view(after)
    return all(new[k] == old[k] or new[k] == _STRICTEST.get(k, object()) for k in new)


def _check_room(table: dict[str, SessionOverrides], key: str) -> None:
    """An agent keeps at most MAX_OVERRIDES_PER_AGENT session overrides (each one it may set alone only
    tightens, but each is kept for good: issue 27, one agent's 6,000 pushed the operator's view past a
    frame). Counted over the key's owner, so the agent's connections and keys share one count."""
    owner = key_owner(key)
    if owner is None:
        return
    held = sum(1 for k in table if owns_key(owner, k))
    if held >= MAX_OVERRIDES_PER_AGENT:
        raise ExecHostError(
            f"agent {owner} has {held} session overrides, the most one agent may keep; clear one of "
            f"them before setting another"
        )


async def overrides(services: Services, conn: Connection, req: PolicyOverrides) -> dict[str, Any]:
    """A page of the overrides this connection may see, in key order, at most OVERRIDES_PAGE_BYTES;
    `next`: the `after` of the next page (None: that was the last). An agent sees its own session keys'
    overrides only; the operator sees every one."""
    rows: dict[str, Any] = {}
    size = 0
    for key in sorted(services.overrides):
        if (req.after is not None and key <= req.after) or not conn.sees_scope(key):
            continue
        view = _view(services.overrides[key])
        size += len(key.encode()) + len(json.dumps(view))
        if rows and size > OVERRIDES_PAGE_BYTES:
            return {"overrides": rows, "next": max(rows)}
        rows[key] = view
    return {"overrides": rows, "next": None}


async def agents(services: Services, conn: Connection, req: PolicyAgents) -> dict[str, Any]:
    """Every agent's effective policy as this gateway enforces it (the console's Policy pane)."""
    require_operator(conn, "policy.agents")  # the allowlist is a map of what runs unasked
    config = services.config()
    approvals = await fairpool.to_thread(services.store.load)
    return {"agents": agent_policies(config, approvals, dict(services.overrides))}
