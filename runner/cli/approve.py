"""`exechost approve ID DECISION` and `exechost approvals pending`: answer the gateway's pending approvals."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import Any

from engine import statefs
from engine.approvals.decisions import parse_approve_args, valid_decisions_text
from engine.approvals.durable import PENDING_NAME, PendingFile
from engine.approvals.grants import GRANTS_NAME, GrantLimits, GrantStore, parse_duration
from engine.approvals.history import HISTORY_DIR, DecisionLog
from engine.display import visible, warnings
from engine.errors import InvalidInput
from engine.protocol.requests import ApprovalsHistory, ApprovalsPending, Approve, GrantsList, GrantsRevoke
from engine.protocol.syncclient import SyncClient
from runner.cli import UsageError
from runner.cli.common import Subparsers, add_json_arg, emit, table
from runner.cli.gateway import call, cli_failures, run_verb, running_client

# The CLI's own syntax (engine's USAGE is the chat command's, `/approve <id> <decision>`).
CLI_USAGE = "usage: exechost approve ID DECISION [--reason TEXT] [--for DURATION] [--uses N] [--session]"


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "approve",
        help="resolve a pending approval: allow-once|allow-always|deny",
        description="Resolve a pending approval by full id or any unique prefix (e.g. the 8-char slug). "
        "Aliases: allow/once, always, deny/reject/block. Either order works.",
    )
    p.add_argument("id", metavar="ID")
    p.add_argument("decision", metavar="DECISION")
    p.add_argument("--reason", metavar="TEXT", help="a note passed back to the agent with a denial")
    p.add_argument(
        "--for", dest="for_", metavar="DURATION", help="allow-always only this long (30m, 8h, 2d): a grant"
    )
    p.add_argument("--uses", type=int, metavar="N", help="allow-always for N more runs: a grant")
    p.add_argument(
        "--session",
        action="store_true",
        help="allow-always only in the asking session: a grant (refused for an ask from no session key)",
    )
    add_json_arg(p)
    p.set_defaults(func=run_verb(cmd_approve))


def register_pending(actions: Subparsers) -> None:
    """`approvals pending`, registered into the approvals group by runner/cli/approvals.py."""
    p = actions.add_parser("pending", help="list approvals waiting in the running gateway")
    add_json_arg(p)
    p.set_defaults(func=run_verb(cmd_pending))
    h = actions.add_parser("history", help="decided approvals: who, when, the command, what it led to")
    h.add_argument("--agent", metavar="ID", help="only this agent's")
    add_json_arg(h)
    h.set_defaults(func=run_verb(cmd_history))
    g = actions.add_parser("grants", help="allow-always grants with limits: time or uses left; revoke one")
    g.add_argument("--agent", metavar="ID", help="only this agent's")
    add_json_arg(g)
    g.set_defaults(func=run_verb(cmd_grants))
    gverbs = g.add_subparsers(dest="grants_action", metavar="ACTION")
    r = gverbs.add_parser("revoke", help="end a grant now (by id or unique prefix)")
    r.add_argument("grant_id", metavar="ID")
    add_json_arg(r)
    r.set_defaults(func=run_verb(cmd_grants_revoke))


def _offline(what: str, path: object) -> None:
    """Say where a read-only verb read from when no gateway answered (stdout stays the verb's own)."""
    print(f"exechost: no gateway is running; {what} read from {path}", file=sys.stderr)


def cmd_grants(args: argparse.Namespace) -> int:
    client = running_client(operator=True)
    if client is not None:
        with client, cli_failures():
            result = client.request(GrantsList(agent_id=args.agent or None))
    else:
        store = GrantStore(statefs.state_dir() / GRANTS_NAME)
        _offline("grants", store.path)
        result = {"grants": [{**g.to_json(), "left": g.left()} for g in store.active(args.agent)]}
    rows = result.get("grants") or []
    for problem in result.get("errors") or []:  # a node's grants that could not be read: say so
        print(f"Warning: {visible(str(problem.get('error')))}", file=sys.stderr)
    cells = [
        [
            g["id"],
            g.get("node") or "gateway",
            g.get("agentId"),
            g.get("left"),
            visible(", ".join(g.get("patterns") or []))[:60],
            visible(str(g.get("command", "")))[:60],
        ]
        for g in rows
    ]
    text = table(["ID", "NODE", "AGENT", "LEFT", "PATTERNS", "COMMAND"], cells) if rows else "No grants."
    emit(text, {"grants": rows}, args.json)
    return 0


def cmd_grants_revoke(args: argparse.Namespace) -> int:
    result = call(GrantsRevoke(id=args.grant_id), operator=True)
    revoked = result.get("revoked") or {}
    where = f" on node {revoked['node']}" if revoked.get("node") else ""
    emit(f"Revoked grant {visible(str(revoked.get('id')))}{where}.", result, args.json)
    return 0


def _pages(
    client: SyncClient, query: ApprovalsHistory | ApprovalsPending, key: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every row of a paged list (the gateway keeps frames under the cap), and each page's `error`."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    while True:
        page = client.request(query)
        rows += page.get(key) or []
        if page.get("error") and str(page["error"]) not in problems:
            problems.append(str(page["error"]))
        if not page.get("next"):
            return rows, problems
        query = replace(query, cursor=page["next"])


def cmd_history(args: argparse.Namespace) -> int:
    client = running_client(operator=True)
    problems: list[str] = []
    if client is not None:
        with client, cli_failures():
            rows, problems = _pages(client, ApprovalsHistory(agent_id=args.agent or None), "approvals")
    else:
        log = DecisionLog(statefs.state_dir() / HISTORY_DIR)
        _offline("decisions (runs as last recorded)", log.directory)
        rows = [entry.view() for entry in log.entries(args.agent)]
    for problem in problems:  # the log could not be written (a full disk): say so, loudly
        print(f"Warning: {problem}", file=sys.stderr)
    lines = []
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime((r.get("resolvedAtMs") or 0) / 1000))
        run = r.get("run") or {}
        outcome = ""
        if run.get("status"):
            code = f" (code {run['exitCode']})" if run.get("exitCode") is not None else ""
            outcome = f" -> {run['status']}{code}"
        reason = f"  reason: {r['reason']}" if r.get("reason") else ""
        command = visible(str(r.get("command", "")))[:100]
        lines.append(
            f"{when}  {r['slug']}  {r.get('agentId')}  {r['status']} by {r.get('resolvedBy')}{outcome}  "
            f"{command}{reason}"
        )
        asked = r.get("requesters") or []
        if len(asked) > 1:  # one decision answered several asks: each is recorded
            lines += [f"    asked by {visible(str(q.get('sessionKey') or '(no session)'))}" for q in asked]
    emit("\n".join(lines) or "No decided approvals yet.", {"approvals": rows}, args.json)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    parsed = parse_approve_args(args.id, args.decision)  # either order, as /approve accepts
    if parsed is None:
        raise UsageError(f"{CLI_USAGE}\n{args.decision!r} is not a decision; {valid_decisions_text()}")
    approval_id, decision = parsed
    grant: dict[str, Any] | None = None
    if args.for_ is not None or args.uses is not None or args.session:
        if decision != "allow-always":
            raise UsageError("--for, --uses and --session limit allow-always (a grant)")
        try:
            limits = GrantLimits(
                parse_duration(args.for_) if args.for_ is not None else None, args.uses, args.session
            )
        except InvalidInput as exc:
            raise UsageError(str(exc)) from None
        grant = limits.to_json()
    msg = Approve(id=approval_id, decision=decision, reason=args.reason or None, grant=grant)
    result = call(msg, operator=True)
    emit(str(result.get("text", "")), result.get("details") or {}, args.json)
    return 0


def _left(expires_ms: int) -> str:
    secs = max(0, int(expires_ms / 1000 - time.time()))
    return f"{secs // 60}m{secs % 60:02d}s"


def _stored_pending() -> list[dict[str, Any]]:
    """The asks the last gateway left waiting on disk, as `approvals pending` shows them (the next
    gateway asks them again, same id and expiry; deciding one needs that gateway)."""
    stored = PendingFile(statefs.state_dir() / PENDING_NAME)
    _offline("asks waiting for the next gateway", stored.path)
    views = []
    for ask in stored.load():
        if ask.decision is None and ask.resolved_at_ms is None:
            views.append(
                {
                    "id": ask.id,
                    "slug": ask.id[:8],
                    "createdAtMs": ask.created_at_ms,
                    "expiresAtMs": ask.expires_at_ms,
                    "status": "pending",
                    "count": ask.count,
                    "requesters": list(ask.requesters),
                    **ask.request.to_json(),
                }
            )
    return views


EGRESS_WIDTH = 320  # an egress ask's text shown whole: `connect`, a name (<= 253), its port and kind


def _cut_middle(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2) :]


def cmd_pending(args: argparse.Namespace) -> int:
    client = running_client(operator=True)
    if client is not None:
        with client, cli_failures():
            approvals, _ = _pages(client, ApprovalsPending(), "approvals")
    else:
        approvals = _stored_pending()
    if not approvals:
        text = "No pending approvals."
    else:
        lines = []
        for a in approvals:
            command = str(a.get("command", ""))
            command = ("⚠ " if warnings(command) else "") + visible(command)
            if a.get("egress"):
                # A name's right end says who owns it, and the port and kind follow it: an egress ask is cut
                # (past any name's 253 characters) in the middle, never from the right.
                command = _cut_middle(command, EGRESS_WIDTH)
            elif len(command) > 100:
                command = command[:99] + "…"
            asked = a.get("requesters") or []
            sessions = ", ".join(visible(str(r.get("sessionKey"))) for r in asked)
            who = f"  x{len(asked)}: {sessions}" if len(asked) > 1 else ""
            lines.append(
                f"{a['slug']}  {a.get('host')}  {a.get('agentId')}  expires in {_left(a['expiresAtMs'])}  "
                f"[{'|'.join(a.get('allowedDecisions', []))}]  {command}{who}"
            )
            env = a.get("env") or {}
            for key in sorted(env):  # what the command runs with beyond the sanitised base (issue 27 §3)
                lines.append(f"    env {visible(str(key))}={visible(str(env[key]))}")
            for d in a.get("contentDigests") or []:  # the bytes the approval runs (content binding)
                sha = d.get("sha256")
                mark = "  agent-writable: runs a sealed copy" if d.get("agentWritable") and sha else ""
                digest = f"sha256 {sha[:12]}" if sha else "unreadable"
                if sha is None:
                    digest = "absent: must stay so"
                lines.append(f"    {d.get('role')} {visible(str(d.get('path')))}  {digest}{mark}")
        text = "\n".join(lines)
    emit(text, {"approvals": approvals}, args.json)
    return 0
