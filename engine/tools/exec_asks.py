"""What an exec ask is made of and how its outcome reads: the request a human sees, what a next gateway
resumes it from, and the pending, denied and finished texts (pure: no state of the tool)."""

from __future__ import annotations

from typing import Any

from engine.approvals import generations
from engine.approvals.request import OPERATOR_ASKER, ApprovalRecord, ApprovalRequest, env_hash
from engine.approvals.schema import OPERATOR_PRINCIPAL
from engine.policy.decision import Decision
from engine.protocol.requests import ExecRequest
from engine.results import ToolResult
from engine.tools.exec_request import RESUME_PARAMS, ExecContext, Prepared, agent_reason
from engine.tools.texts import FOLLOWUP_OUTPUT_CHARS, approval_pending_text, compact


def policy_now_denies(today: Decision | None) -> str | None:
    """Why an ask may no longer run under today's policy (the operator set `security=deny` since, in config
    or by `/exec`), else None. The one owner of this check: the live approved run and an ask restored after
    a restart both re-decide the call and refuse here. `today` None: the call can no longer be decided."""
    if today is None:
        return "the policy can no longer decide it"
    if today.verdict == "deny":
        return f"the policy now denies it ({today.reason})"
    return None


def ask_content_key(d: Decision) -> str:
    """The bytes an ask was decided on, for its identity: the files it runs (content.key()) and every
    file the tree vet read (a repository's config): asks in two repositories never share one approval."""
    key = d.content.key() if d.content is not None else ""
    inputs = d.tree.inputs if d.tree is not None else ""
    return f"{key}:{inputs}" if inputs else key


def ask_request(prepared: Prepared, ctx: ExecContext, call: ExecRequest) -> ApprovalRequest:
    d = prepared.decision
    env_param = call.env or {}
    first = d.segments[0].get("resolvedPath") if d.segments else None
    return ApprovalRequest(
        command=prepared.command,
        cwd=prepared.shown_cwd or prepared.cwd,
        host=prepared.host,
        agent_id=ctx.agent_id,
        session_key=ctx.session_key,
        security=d.security or "allowlist",
        ask=d.ask or "on-miss",
        ask_fallback=d.ask_fallback or "deny",
        allowed_decisions=tuple(d.allowed_decisions) or ("allow-once", "deny"),
        resolved_path=first,
        node_id=d.node,
        env_hash=env_hash(env_param),
        env=tuple(sorted((str(k), str(v)) for k, v in env_param.items())),
        content_key=ask_content_key(d),
        decision_json=d.to_json(),
        warnings=tuple(prepared.warnings),
        agent_reason=agent_reason(call.reason),
        owner=ctx.owner if ctx.namespace else "",
        asker=asker(ctx),
    )


def asker(ctx: ExecContext) -> str:
    """The principal that asks (ApprovalRequest.asker): the operator for its calls, whatever agent they
    name for policy; else the agent (its owner). Not the proof that made the caller the agent: two proofs
    of one agent are one principal, whose repeat of its own ask is a repeat (a cut proof's caller is
    dropped, and its proof never lands on the other proof's ask: ApprovalRecord.proofs)."""
    return OPERATOR_ASKER if ctx.operator else ctx.owner


def saved_under(ctx: ExecContext) -> str:
    """The key an allow-always (its allowlist entry or its grant) of this call's ask is filed under: the
    operator's own (OPERATOR_PRINCIPAL) for the operator's call naming no agent, whose agent is its policy
    only, so no agent's decision ever reads what the operator allowed itself; else the call's owner (the
    agent, or the operator acting for the agent it named)."""
    return OPERATOR_PRINCIPAL if ctx.operators_own else ctx.owner


def resume_data(prepared: Prepared, call: ExecRequest, ctx: ExecContext) -> dict[str, Any]:
    """What the next gateway needs to run this ask as approved after a crash (engine.tools.resume)."""
    return {
        "params": {k: v for k, v in call.params().items() if k in RESUME_PARAMS},
        "agentId": ctx.agent_id,
        "sessionKey": ctx.session_key,
        "host": prepared.host,
        "cwd": prepared.cwd,
        "approved": prepared.command_to_run(approved=True),
        "identity": [list(item) for item in prepared.decision.identity],
        "credential": ctx.credential,
        # what else made the caller its agent (a uid mapping, the gateway token alone): the next gateway
        # settles the ask when its config no longer gives it (engine.tools.resume)
        **({"proof": proof} if (proof := _proof(ctx)) else {}),
        # the operator's own ask runs, resumed, as the operator's (its pids group); absent: not the operator's
        **({"operator": True} if ctx.operator else {}),
        **({"operatorsOwn": True} if ctx.operators_own else {}),  # (its own places, resumed too)
    }


def _proof(ctx: ExecContext) -> str:
    """The proof the call's stamp names (engine.approvals.generations), "" for a credential's or none."""
    stamp = generations.stamped()
    return stamp.proof if stamp is not None and stamp.agent == ctx.agent_id else ""


def waiting_data(record: ApprovalRecord) -> dict[str, Any]:
    """What `exec.waiting` says (the CLI's `waiting for approval` line, MCP progress)."""
    return {
        "approvalId": record.id,
        "approvalSlug": record.slug,
        "expiresAtMs": record.expires_at_ms,
        "allowedDecisions": list(record.request.allowed_decisions),
        "command": record.request.command,
    }


def pending_details(record: ApprovalRecord, warnings: list[str]) -> dict[str, Any]:
    """An approval-pending result's details (a node run adds where it runs)."""
    req = record.request
    return {
        "status": "approval-pending",
        **waiting_data(record),
        "host": req.host,
        "cwd": req.cwd,
        "nodeId": req.node_id,
        "warningText": "\n".join(warnings),
    }


def pending_result(record: ApprovalRecord, prepared: Prepared) -> ToolResult:
    details = pending_details(record, prepared.warnings)
    return ToolResult(approval_pending_text(record, prepared.warnings), details)


def denied_result(record: ApprovalRecord, prepared: Prepared, reason: str) -> ToolResult:
    text = f"Exec denied (gateway id={record.id}, {reason}): {prepared.command}"
    if record.reason:
        text += f"\nReason: {record.reason}"
    details = {
        "status": "denied",
        "reason": reason,
        "approvalId": record.id,
        "host": prepared.host,
        "command": prepared.command,
        "cwd": prepared.cwd,
    }
    return ToolResult(text, details)


def finished_text(record: ApprovalRecord, session_id: str, result: ToolResult) -> str:
    details = result.details
    code = "timeout" if details.get("timedOut") else f"code {details.get('exitCode')}"
    if details.get("exitCode") is None and not details.get("timedOut") and details.get("exitSignal"):
        code = f"signal {details.get('exitSignal')}"
    output = str(details.get("aggregated") or details.get("tail") or "")
    head = f"Exec finished (gateway id={record.id}, session={session_id}, {code})"
    tail = compact(output, FOLLOWUP_OUTPUT_CHARS)
    return f"{head}\n{tail}" if tail else head
