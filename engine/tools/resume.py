"""Asks restored after a gateway crash or restart: wait for the decision, then run exactly what was approved.

The caller that asked is gone with the old gateway, so a restored ask always runs detached and reports
through its session key's system events (a caller that reconnects reads `approvals.status`). Nothing
from the old process is trusted blindly: the call is prepared again under today's policy, and it runs only
when that gives the command, cwd and file identities the human approved — else `approval-stale`.
"""

from __future__ import annotations

import logging
from typing import Any

from engine import principals
from engine.approvals import generations
from engine.approvals.durable import StoredAsk
from engine.approvals.generations import Stamp
from engine.approvals.grants import GrantLimits
from engine.approvals.request import ApprovalRecord, env_hash
from engine.commands.allowlist import identity_problem
from engine.errors import InvalidInput
from engine.protocol.requests import ExecRequest
from engine.results import ToolError
from engine.statefs import state_dir
from engine.tools.exec import ExecContext, ExecTool
from engine.tools.exec_asks import ask_content_key, policy_now_denies
from engine.tools.exec_request import RUN_IDENTITY

log = logging.getLogger("exechost.exec")


def restore_asks(tool: ExecTool, asks: list[StoredAsk]) -> list[ApprovalRecord]:
    """Register each stored ask again and start its waiter; returns the restored records."""
    restored = []
    held = {r.id for r in tool.approvals.records()}
    for ask in asks:
        if ask.resume is None or ask.id in held:
            continue
        held.add(ask.id)
        record = tool.approvals.restore(
            ask.id,
            ask.request,
            created_at_ms=ask.created_at_ms,
            expires_at_ms=ask.expires_at_ms,
            count=ask.count,
            # Whoever waited went with the old gateway: the result goes to the agent's events.
            requester_gone=True,
            decision=ask.decision,
            resolved_by=ask.resolved_by,
            resolved_at_ms=ask.resolved_at_ms,
            reason=ask.reason,
            resume=ask.resume,
            requesters=ask.requesters,
            grant=GrantLimits.from_json(ask.grant),
            grant_id=ask.grant_id,
            run=ask.run,
            joined=ask.joined,
        )
        made = [record.resume, *(s.get("resume") for s in record.joined)]
        revoked = [r for r in made if not _holds(r)]
        # A uid mapping or the anonymous rule that made its caller the agent: kept with the ask again, so
        # a later config change settles it as a live one (ApprovalManager.end_proofs), and decided now.
        gens = tool.approvals.generations
        for proof in {str(r.get("proof") or "") for r in made if r} - {""}:
            record.proofs[proof] = gens.proof(proof, record.request.agent_id)
        if revoked or tool.approvals.stale(record):
            # Its credential was revoked (or re-minted) while no gateway ran (`exechost agents revoke`
            # offline only removes the file): what it asked is not run after, as a live revoke ensures.
            log.warning("restored ask %s: what made its caller the agent no longer holds; denied", record.id)
            tool.approvals.revoke_record(record)
        tool._spawn(resume_ask(tool, record))
        for slot in record.joined:  # every requester coalesced into it was promised its own run
            tool._spawn(resume_ask(tool, record, slot))
        restored.append(record)
    return restored


def _holds(resume: dict[str, Any] | None) -> bool:
    """Whether the credential a stored call was made with is still its agent's (no credential: nothing to
    check here; a Unix account or the gateway token is decided again when the agent reconnects)."""
    credential = str((resume or {}).get("credential") or "")
    if not credential:
        return True
    agent = str((resume or {}).get("agentId") or "")
    return principals.valid_name(agent) and principals.still_holds(state_dir(), agent, credential)


def stale_reason(
    tool: ExecTool, record: ApprovalRecord, prepared: Any, resume: dict[str, Any] | None = None
) -> str | None:
    """Why the call prepared now is not what was approved (`resume`: the requester's, by default the
    first's), else None."""
    resume = (record.resume if resume is None else resume) or {}
    request = record.request
    # What the operator was shown (the request) must be what this call prepares: a file edited while
    # no gateway ran cannot show one command and run another.
    env = (resume.get("params") or {}).get("env")
    if prepared.command != request.command or env_hash(env) != request.env_hash:
        return "the stored call does not match what was approved"
    denied = policy_now_denies(prepared.decision)
    if denied is not None:
        return denied
    if prepared.host != resume.get("host"):
        return f"it would now run on {prepared.host}, not {resume.get('host')}"
    if prepared.cwd != resume.get("cwd"):
        return f"the working directory is now {prepared.cwd}"
    if prepared.command_to_run(approved=True) != resume.get("approved"):
        return "the command would now run as something other than what was approved"
    approved_identity = tuple(tuple(item) for item in resume.get("identity") or [])
    if prepared.host != "sandbox":
        problem = identity_problem(approved_identity)
        if problem is not None:
            return problem
        if tuple(tuple(item) for item in prepared.decision.identity) != approved_identity:
            return "the files it runs are not the ones approved"
        # The bytes the human was shown (the files it runs, the tree the vet read): an in-place rewrite
        # keeps every identity above, and the call decided now would bind the new bytes instead.
        if ask_content_key(prepared.decision) != request.content_key:
            return "the files it runs or reads changed since they were approved"
    return None


async def resume_ask(tool: ExecTool, record: ApprovalRecord, slot: dict[str, Any] | None = None) -> None:
    """One requester's run of a restored ask: the first requester's, or a joined one's (`slot`)."""
    resume = (record.resume if slot is None else slot.get("resume")) or {}
    stored = dict(resume.get("params") or {})
    ctx = ExecContext(
        agent_id=str(resume.get("agentId") or "main"),
        session_key=str(resume.get("sessionKey") or ""),
        caller_alive=lambda: False,
        operator=resume.get("operator") is True,
        operators_own=resume.get("operatorsOwn") is True,
    )
    # Its run acts under a stamp rebuilt from what the journal says made its caller the agent (taken
    # before the wait: a revoke meanwhile ends it), as the live call's would: a later cut of that proof
    # (`anonymous = "none"`, a replaced gateway token) refuses and cuts what it sets going, its host runs'
    # egress too. The operator's own asks run as the operator's, unstamped.
    stamp = None if ctx.operator else _stamp(tool, record, ctx.agent_id, str(resume.get("proof") or ""))
    decision = await tool.approvals.wait(record)
    authorized = generations.authorize(stamp)
    try:
        await _resume(tool, record, slot, resume, stored, ctx, decision)
    finally:
        generations.reset(authorized)


def _stamp(tool: ExecTool, record: ApprovalRecord, agent: str, proof: str) -> Stamp:
    gens = tool.approvals.generations
    at = record.proofs.get(proof, gens.current(proof)) if proof else 0
    return Stamp(agent, gens.current(agent), gens, proof, at)


async def _resume(
    tool: ExecTool,
    record: ApprovalRecord,
    slot: dict[str, Any] | None,
    resume: dict[str, Any],
    stored: dict[str, Any],
    ctx: ExecContext,
    decision: str | None,
) -> None:
    command = str(stored.get("command") or record.request.command)
    run = record.run if slot is None else slot.get("run")
    if run is not None:
        # A run noted on disk, `starting` included, is never started again (fresh round 17 c): once its
        # note is on disk the command may have run, and whether it did is not something the files can
        # be trusted to tell (its session's files are removed with it, its end may find no room on a
        # full disk). A live session is adopted; anything else is reported, and the agent asks again.
        if run.get("status") == "starting":
            await _starting_again(tool, record, ctx, command, run, slot)
        return  # this requester's run is over (the ask stays on disk for another requester's)
    if decision == "deny":
        text = f"Exec denied (gateway id={record.id}, user-denied): {command}"
        tool._emit(ctx, text + (f"\nReason: {record.reason}" if record.reason else ""))
        tool.approvals.note_run(record, _denied("user-denied"), slot)
        return
    problem: str | None
    try:
        call = ExecRequest.decode(stored)  # written by resume_data from a decoded call
        prepared = await tool._prepare(call, ctx)
    except (ToolError, InvalidInput) as exc:
        prepared, problem = None, str(exc)
    else:
        problem = stale_reason(tool, record, prepared, resume)
    if problem is not None or prepared is None:
        tool._emit(ctx, f"Exec denied (gateway id={record.id}, approval-stale: {problem}): {command}")
        tool.approvals.note_run(record, _denied(f"approval-stale: {problem}"), slot)
        return
    await tool._detached(record, prepared, call, ctx)


async def _starting_again(
    tool: ExecTool,
    record: ApprovalRecord,
    ctx: ExecContext,
    command: str,
    run: dict[str, Any],
    slot: dict[str, Any] | None,
) -> None:
    """The run the last gateway was starting (its `starting` note the last word on disk): its session,
    when this gateway adopted it, is linked to this approval; otherwise it is reported failed. Never run
    again either way: `starting` on disk means "may have run", whatever else the disk holds or lacks."""
    sid = str(run.get("sessionId") or "")
    if sid:
        await tool.sessions.ready(sid)  # a kept session of this id is adopted first (or found gone)
    session = tool.sessions.get(sid) if sid else None
    if session is not None and session.is_run(run):
        linked = {
            "sessionId": sid,
            **{k: run[k] for k in RUN_IDENTITY if k in run},
            "status": session.status,
            "exitCode": None,
            "tail": "",
        }
        tool.approvals.note_run(record, linked, slot)  # its end reaches the history as a linked session's
        return
    # (another session under the id, another agent's perhaps, is not this run: reported the same way)
    reason = (
        "the gateway stopped after recording its start, and its end was not recorded: whether it ran, or "
        "how it ended, is unknown, so it is not run again (an approved command never runs twice); ask "
        "again to run it"
    )
    tool._emit(ctx, f"Exec failed (gateway id={record.id}): {reason}: {command}")
    tool.approvals.note_run(record, {**_denied(reason), "status": "failed", "sessionId": sid or None}, slot)


def _denied(reason: str) -> dict[str, Any]:
    return {"sessionId": None, "status": "denied", "exitCode": None, "tail": "", "reason": reason}
