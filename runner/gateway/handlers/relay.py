"""`approvals.relay`: an ask that arrived on exec-approvals.sock (OpenClaw's clients), held by the gateway.

The console hosts the socket; it hands each ask here so that it is one more pending approval — listed by
`exechost approvals pending`, answerable by `exechost approve` or any console — and waits for the answer.
An allow-always saves what it saves for a gateway ask: the gateway's own allow-always patterns for that
command (or a grant, with limits). Whose ask it is, is the socket's principal under this gateway's config
(engine.approvals.socket.principal), never the agentId the console passes on: the socket's client proves
no agent, so a relay naming another one is refused (an older console, or a forged relay, cannot widen it).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from engine import fairpool
from engine.approvals import generations
from engine.approvals.decisions import DECISIONS, allowed_decisions
from engine.approvals.generations import Stamp
from engine.approvals.request import ApprovalError, ApprovalRequest
from engine.approvals.socket.principal import NotThisPrincipal, frame_agent, frame_key
from engine.errors import InvalidInput
from engine.policy.decision import evaluate
from engine.policy.precedence import overrides_for
from engine.protocol.requests import ApprovalsRelay
from engine.results import ToolError
from runner.gateway.handlers.common import require_operator
from runner.gateway.liveprincipal import socket_proof

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services

log = logging.getLogger("exechost.gateway")
MAX_RELAY_MS = 30 * 60 * 1000


async def relay(services: Services, conn: Connection, req: ApprovalsRelay) -> dict[str, Any]:
    require_operator(conn, "approvals.relay")  # only the console that hosts the socket relays its asks
    socket_id = req.id
    if req.withdraw:  # the socket client gave up: its row goes
        return {"withdrawn": services.approvals.withdraw(f"socket:{socket_id}")}
    command = req.command
    if command is None or not command.strip():
        raise InvalidInput("approvals.relay: command is required")
    try:
        agent = frame_agent(services.config(), req.agent_id, "request")
        session_key = frame_key(agent, req.session_key, "request") or ""
    except NotThisPrincipal as exc:
        raise InvalidInput(f"approvals.relay: {exc}") from None
    # What proves the socket's client: the socket token its frame proved (a shared token alone, as the
    # gateway token alone proves main), by its id: the ask is filed under it, and stamp.stale() below, where
    # an allow-always is saved, decides it again against exec-approvals.json now. Every ask the socket takes
    # proved a token; a relay naming none proves nobody and is refused (it is never the relaying operator's
    # own: filed under the gateway token, replacing the socket token would not settle it).
    if not req.socket_token:
        raise InvalidInput(
            "approvals.relay: socketToken is required (the id of the exec-approvals.sock token the ask's "
            "frame proved); a relay naming no token proves no principal"
        )
    proof = socket_proof(agent, req.socket_token)
    cwd = req.cwd or ""
    timeout = req.timeout_ms
    ttl = min(timeout, MAX_RELAY_MS) if timeout is not None and timeout > 0 else None
    decision = await fairpool.decisions.run(
        agent,
        functools.partial(
            evaluate,
            command,
            config=services.config(),
            agent_id=agent,
            params={"host": "gateway"},
            # The principal's session overrides, as its own exec is decided: the operator's lockdown
            # (`/exec security=deny` on agent:main) reaches the socket's asks too (fresh round 18 b).
            overrides=overrides_for(services.overrides, agent, session_key),
            store=services.store,
            cwd=cwd or None,
            session_key=session_key or None,
            # The env decides too: a key not inert asks, and allow-always is bound to it (issue 27 §3).
            env_overrides=req.env or None,
        ),
        conn.fair_key,
    )
    # What the operator is shown and offered is what this gateway decided for the socket's principal, never
    # what the frame says: its policy (security, ask), the decisions that policy offers, narrowed only by
    # what the asker accepts; a principal the policy refuses (security=deny, a host not allowed, a deny) is
    # refused here without an ask, as its own exec would be (fresh round 18 b).
    if decision.verdict == "deny" or decision.security in (None, "deny"):
        return {
            "decision": "deny",
            "resolvedBy": "policy",
            "reason": decision.reason,
            "id": None,
            "slug": None,
        }
    policy = (
        decision.allowed_decisions if decision.verdict == "ask" else allowed_decisions(decision.ask or "")
    )
    offered = req.allowed_decisions
    allowed = tuple(d for d in DECISIONS if d in policy and (offered is None or d in offered))
    if not allowed:
        raise InvalidInput("allowedDecisions offers nothing")
    request = ApprovalRequest(
        command=command,
        cwd=cwd,
        host="gateway",
        agent_id=agent,
        session_key=session_key,
        security=decision.security,
        ask=decision.ask or "on-miss",
        allowed_decisions=allowed,
        resolved_path=req.resolved_path,
        node_approval_id=f"socket:{socket_id}",  # who asked; each socket ask gets its own answer
        decision_json=decision.to_json(),
        env=tuple(sorted((req.env or {}).items())),
        warnings=(
            "asked on exec-approvals.sock (an OpenClaw client runs the command itself)",
            *(req.warnings or ()),
        ),
        asker=agent,  # the socket's principal asked, never the console that relays it (the operator)
    )
    # Filed as the socket's principal with its proof, not as the relaying operator's unstamped call: a
    # config that cuts the proof off (`anonymous = "none"`) or a revoke of the agent settles it
    # (ApprovalManager.end_proofs), as it settles the same agent's ask made over the gateway token.
    owner = services.approvals.generations
    stamp = Stamp(agent, owner.current(agent), owner, proof, owner.proof(proof, agent))
    authorized = generations.authorize(stamp)
    try:
        record, _ = services.approvals.register(request, ttl, generation=stamp.generation)
    except ApprovalError as exc:
        raise ToolError(str(exc)) from None
    finally:
        generations.reset(authorized)
    answer = await services.approvals.wait(record)
    patterns = decision.allow_always_patterns
    # Nothing is saved, nor allowed, for a principal cut off (or revoked, or its socket token replaced)
    # since the ask: decided here, once, after the wait (the one point every yes passes).
    if answer != "deny" and stamp.stale():
        answer = "deny"
    if answer == "allow-always" and patterns and not record.revoked:
        try:
            if record.grant is not None:
                if record.grant_id is not None:  # chosen with the decision: made once (GrantStore.ensure)
                    await fairpool.to_thread(
                        services.grants.ensure,
                        record.grant_id,
                        agent,
                        patterns,
                        command,
                        record.grant,
                        request.session_key,
                        record.resolved_by or "operator",
                    )
            else:
                await fairpool.to_thread(services.store.persist_allow_always, agent, patterns)
        except Exception as exc:
            log.warning("could not save allow-always for a socket ask %s: %s", patterns, exc)
    if req.runs and answer == "allow-always":
        # An `exec` frame's ask: the console runs it on this answer. What lasts of the yes is what was saved
        # above (a grant keeps its limits: one use, this session, 10 minutes), so the run is told its own
        # share only: a bare allow-always would be saved again there, for good (fresh round 18 b).
        answer = "allow-once"
    return {"decision": answer, "resolvedBy": record.resolved_by, "id": record.id, "slug": record.slug}
