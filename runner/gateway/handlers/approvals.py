"""`approvals.pending|attach|detach|allowlist.add|allowlist.remove`: pending asks, approvers, allowlist."""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Any

from engine import fairpool
from engine.approvals.request import ApprovalRecord
from engine.approvals.store import ApprovalsFileError
from engine.commands.allowlist import COMMAND_HASH_PREFIX, bare_name_path
from engine.commands.boundfiles import agent_view
from engine.commands.filetrust import writable_pattern_warning
from engine.errors import InvalidInput
from engine.protocol.requests import (
    AllowlistAdd,
    AllowlistRemove,
    ApprovalsAttach,
    ApprovalsDetach,
    ApprovalsHistory,
    ApprovalsPending,
    ApprovalsStatus,
)
from engine.tools.texts import FOLLOWUP_OUTPUT_CHARS, compact
from runner.gateway.handlers.common import agent_id, require_operator, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


# A page's views stay well under the 1 MiB frame cap whatever the agents sent (commands are capped at
# 64 KiB, and a view holds the command about three times: text, segments, decision).
PAGE_BYTES = 512 * 1024
LIVE_RUN = ("starting", "running")  # a run's statuses that say nothing of how it ended


def _page(services: Services, cursor: str | None) -> dict[str, Any]:
    """Pending approvals, oldest first, from `cursor` on, as many as fit in PAGE_BYTES (at least one);
    `next` is the cursor of the following page, null on the last one."""
    page = _fit(services.approvals.pending(after=cursor))
    page["total"] = len(services.approvals.pending())
    return page


def _fit(rows: list[ApprovalRecord]) -> dict[str, Any]:
    views: list[dict[str, Any]] = []
    size = 0
    for record in rows:
        view = record.view()
        size += len(json.dumps(view, ensure_ascii=False, separators=(",", ":")).encode())
        if views and size > PAGE_BYTES:
            break
        views.append(view)
    more = len(views) < len(rows)
    return {"approvals": views, "next": rows[len(views) - 1].cursor if more else None}


async def pending(services: Services, conn: Connection, req: ApprovalsPending) -> dict[str, Any]:
    # Every agent's commands, cwds and env are in there: an agent asks `approvals.status` about its own.
    require_operator(conn, "approvals.pending")
    return _page(services, req.cursor)


async def attach(services: Services, conn: Connection, req: ApprovalsAttach) -> dict[str, Any]:
    require_operator(conn, "approvals.attach")  # an approver is asked, and may answer, for every agent
    conn.approver = True
    conn.topics.add("approvals")
    return {"attached": True, **_page(services, None)}


async def detach(services: Services, conn: Connection, req: ApprovalsDetach) -> dict[str, Any]:
    conn.approver = False
    return {"attached": False}


async def allowlist_add(services: Services, conn: Connection, req: AllowlistAdd) -> dict[str, Any]:
    """Add an entry to the approvals file (the operator's edit, e.g. from the console's Policy pane)."""
    require_operator(conn, "approvals.allowlist.add")
    agent = agent_id(conn, req.agent_id)
    pattern = req.pattern.strip()
    if pattern.startswith(COMMAND_HASH_PREFIX):
        raise InvalidInput(f"{COMMAND_HASH_PREFIX} entries are written only by an allow-always approval")
    resolved = await fairpool.to_thread(bare_name_path, pattern)
    try:
        record = await fairpool.to_thread(
            services.store.add_allowlist, agent, resolved or pattern, req.arg_pattern, "console"
        )
    except (ApprovalsFileError, ValueError) as exc:
        raise InvalidInput(str(exc)) from None
    warning = await fairpool.to_thread(writable_pattern_warning, record.pattern)
    return {
        "agentId": agent,
        "pattern": record.pattern,
        "argPattern": record.arg_pattern,
        "id": record.id,
        "warnings": [warning] if warning else [],
    }


async def allowlist_remove(services: Services, conn: Connection, req: AllowlistRemove) -> dict[str, Any]:
    require_operator(conn, "approvals.allowlist.remove")
    agent = agent_id(conn, req.agent_id)
    pattern = req.pattern
    try:
        removed = await fairpool.to_thread(services.store.remove_allowlist, agent, pattern)
    except (ApprovalsFileError, ValueError) as exc:
        raise InvalidInput(str(exc)) from None
    return {"agentId": agent, "removed": removed}


async def status(services: Services, conn: Connection, req: ApprovalsStatus) -> dict[str, Any]:
    """What became of one approval: pending, decided (who, the reason) or expired, and the run it started
    (`sessionKey`: that session's run, when several sessions share the ask). An agent sees only its own
    agent's approvals; the operator sees any."""
    wanted = req.approval_id
    caller = agent_id(conn, req.agent_id)  # an agent's own; a request naming another agent is refused
    # What it reports is on disk first: a run line still queued (engine.approvals.groupwrite) is written.
    await services.journal.history_writer.barrier()
    # An agent's prefix is resolved among its own agent's approvals only (another's id never answers).
    mine = None if conn.operator else caller
    record = services.approvals.lookup(wanted, mine)
    if record is not None and not conn.operator and record.request.agent_id == caller:
        # The agent follows its ask (engine.protocol.resume): it is still waiting, whatever the restore
        # assumed, and the inbox must not tell the operator it stopped.
        services.approvals.requester_back(record.id)
    view: dict[str, Any] | None = record.view() if record is not None else None
    # The session as the caller's requests file it (an agent's key is inside its own namespace).
    key = session_key(conn, req.session_key) if req.session_key is not None else None
    slot = record.slot(key) if record is not None and key is not None else None
    if view is not None and slot is not None:  # a session that joined a shared ask: its own run
        view = {**view, "run": slot.get("run")}
    if view is None:  # decided before this gateway started: the decision log still knows it
        entry = await fairpool.history.run(
            _principal(conn), partial(services.journal.history.find, wanted, mine), conn.fair_key
        )
        view = entry.view() if entry is not None else None
    if view is not None and not conn.operator:
        # its own run only, and no digest of what the gateway read to bind its command (agent_view)
        view = {**agent_view(view), "run": _own_run(record, view, caller, key)}
    theirs = view is not None and view.get("agentId") == caller and view.get("operator") is not True
    if view is None or (not conn.operator and not theirs):
        raise InvalidInput(f"unknown or expired approval id {wanted!r}")
    view = current_run(services, view)
    run = dict(view.get("run") or {})
    state = view["status"]
    text = f"Approval {view.get('slug') or str(view['id'])[:8]}: {state}"
    if view.get("resolvedBy") and state != "pending":
        text += f" by {view['resolvedBy']}"
    if view.get("reason"):
        text += f"\nReason: {view['reason']}"
    if run.get("sessionId"):
        text += f"\nRan as session {run['sessionId']}: {run.get('status')}"
        if run.get("exitCode") is not None:
            text += f" (code {run['exitCode']})"
    details = {"status": "approval-" + str(state), "approval": view, "run": run or None}
    return {"text": text, "details": details}


async def history(services: Services, conn: Connection, req: ApprovalsHistory) -> dict[str, Any]:
    """Decided approvals, newest first, one page at a time (`cursor` = how many to skip), read from the
    on-disk decision log; a run's session status is looked up now, not as it was when it started."""
    require_operator(conn, "approvals.history")
    await services.journal.history_writer.barrier()  # lines still queued (what a run led to) are read too
    entries = await fairpool.history.run(
        _principal(conn), partial(services.journal.history.entries, req.agent_id), conn.fair_key
    )
    rows = [current_run(services, entry.view()) for entry in entries]
    skip = req.cursor
    start = int(skip) if skip is not None and skip.isascii() and skip.isdigit() else 0
    page = _fit_views(rows[start:])
    page["next"] = str(start + len(page["approvals"])) if page["next"] else None
    page["total"] = len(rows)
    if services.journal.history.problem:
        page["error"] = services.journal.history.problem
    return page


def _principal(conn: Connection) -> str:
    """Whose turn a history read takes in the fair pool: the operator's own queue, else the agent's."""
    return fairpool.queue_of(conn.operator, conn.agent)


def _own_run(
    record: ApprovalRecord | None, view: dict[str, Any], caller: str, key: str | None
) -> dict[str, Any] | None:
    """The run an agent's own call led to, never another requester's: one ask may be shared by several
    principals (the operator's own call and an agent's identical one, fresh round 17 b), and each
    requester's run is its own, with its own output. None when the caller's call has not run."""
    if record is None:  # from the decision log: its run is its first requester's
        first = (view.get("requesters") or [{}])[0]
        return view.get("run") if str(first.get("principal") or caller) == caller else None
    asker, first_key, _ = record.request.who()
    if asker in ("", caller) and (key is None or key == first_key):
        return record.run
    for entry in record.joined:
        if str(entry.get("principal") or "") == caller and (key is None or entry.get("sessionKey") == key):
            run = entry.get("run")
            return dict(run) if isinstance(run, dict) else None
    return None


def current_run(services: Services, view: dict[str, Any]) -> dict[str, Any]:
    """The view with its run's status as it is now: live when the session that holds its id is that run
    (its instance and scope, `Session.is_run`), else as it was last written down, else `unknown` for a run
    that never reported an end (a session lost with its gateway). An id names no owner and is reused once
    its session is gone: the session under it now may be another agent's (fresh round 15 a)."""
    run = dict(view.get("run") or {})
    sid = str(run.get("sessionId") or "")
    if sid:
        live = run.get("status") in LIVE_RUN  # an outcome written down is final: never looked up again
        session = services.sessions.get(sid) if live else None
        if session is not None and session.is_run(run):
            # status and output from one moment: a run that ended is read before its outcome is noted
            # (the detached run notes it after the end), and its tail must be that end's, not the start's
            # (what memory holds: a session settled to disk has had its outcome noted by then)
            run.update(status=session.status, exitCode=session.exit_code)
            if not session.output.settled:
                run["tail"] = compact(session.output.aggregated(), FOLLOWUP_OUTPUT_CHARS)
        elif live and not (session is None and run.get("status") == "starting"):
            # (`starting` with no session yet: the spawn is under way and registers it next)
            run["status"] = "unknown"
        view = {**view, "run": run}
    return view


def _fit_views(views: list[dict[str, Any]]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    size = 0
    for view in views:
        size += len(json.dumps(view, ensure_ascii=False, separators=(",", ":")).encode())
        if out and size > PAGE_BYTES:
            break
        out.append(view)
    return {"approvals": out, "next": "more" if len(out) < len(views) else None}
