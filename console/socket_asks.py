"""An ask from exec-approvals.sock as the console passes it on: relayed to the gateway (`approvals.relay`)
while the link is up, else a row of this console's own inbox. The two shapes, built once here."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from engine.approvals.decisions import DECISIONS, allowed_decisions
from engine.approvals.socket.server import PromptRequest
from engine.policy.decision import Decision
from engine.protocol.requests import ApprovalsRelay

SOCKET_PROMPT_MS = 300_000  # the socket server's own prompt timeout


def offered(request: PromptRequest) -> list[str]:
    """Only what the asker accepts is offered (issue 9 item 9); ask=always never offers "always"."""
    return [d for d in request.allowed_decisions if not (request.ask == "always" and d == "allow-always")]


def relay_params(request: PromptRequest) -> ApprovalsRelay:
    """The `approvals.relay` request: one more pending approval on the gateway, answerable from anywhere."""
    return ApprovalsRelay(
        id=request.id,
        command=request.command,
        cwd=request.cwd or "",
        agent_id=request.agent_id or "main",
        session_key=request.session_key or "",
        security=request.security,
        ask=request.ask,
        resolved_path=request.resolved_path,
        allowed_decisions=list(offered(request)),
        timeout_ms=SOCKET_PROMPT_MS,
        env=dict(request.env) or None,
        warnings=list(request.warnings) or None,
        socket_token=request.token_id or None,
        runs=request.source == "socket-exec" or None,  # its yes is saved by the gateway alone (relay.py)
    )


def as_policy_decides(request: PromptRequest, decision: Decision | None) -> PromptRequest | None:
    """A `request` frame's ask as this console's own policy decides it for the socket's principal (the
    gateway's relay.py rule, offline): its security and ask, the decisions that policy offers narrowed by
    what the asker accepts; the frame's own labels and offers are never shown. None: the policy refuses the
    principal (security=deny, a host not allowed, a deny, nothing to offer), so it is denied unasked."""
    if decision is None or decision.verdict == "deny" or decision.security in (None, "deny"):
        return None
    policy = (
        decision.allowed_decisions if decision.verdict == "ask" else allowed_decisions(decision.ask or "")
    )
    allowed = tuple(d for d in DECISIONS if d in policy and d in request.allowed_decisions)
    if not allowed:
        return None
    return dataclasses.replace(
        request, security=decision.security, ask=decision.ask or "on-miss", allowed_decisions=allowed
    )


def answered(request: PromptRequest, said: str) -> str:
    """The operator's answer held to what the ask offered (the server holds it only to the frame's)."""
    if said in request.allowed_decisions:
        return said
    return "allow-once" if said == "allow-always" and "allow-once" in request.allowed_decisions else "deny"


def inbox_view(request: PromptRequest) -> dict[str, Any]:
    """The inbox row of an ask this console answers itself (no gateway)."""
    return {
        "id": request.id,
        "slug": request.id[:8],
        "command": request.command,
        "cwd": request.cwd,
        "host": request.host,
        "security": request.security,
        "ask": request.ask,
        "agentId": request.agent_id,
        "resolvedPath": request.resolved_path,
        "sessionKey": request.session_key,
        "warnings": list(request.warnings),
        "env": dict(request.env),
        "createdAtMs": int(time.time() * 1000),
        "allowedDecisions": offered(request),
    }
