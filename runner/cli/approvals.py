"""`exechost approvals`: inspect the host's exec-approvals.json and edit its allowlists."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import Any

from engine.approvals.store import (
    DEFAULT_AGENT,
    WILDCARD_AGENT,
    AgentApprovals,
    AllowlistRecord,
    ApprovalsFile,
    ApprovalsFileError,
    ApprovalsStore,
    normalize_agent_id,
)
from engine.commands.allowlist import COMMAND_HASH_PREFIX, bare_name_path
from engine.commands.filetrust import writable_pattern_warning
from engine.config.loader import load_config
from engine.config.model import ConfigError
from engine.errors import InvalidInput
from engine.policy.precedence import resolve_policy
from engine.results import ToolError
from runner.cli import UsageError
from runner.cli.common import Subparsers, add_config_arg, add_json_arg, emit
from runner.cli.common import escape_controls as _safe

_POLICY_FIELDS = (
    ("security", "security"),
    ("ask", "ask"),
    ("askFallback", "ask_fallback"),
    ("autoAllowSkills", "auto_allow_skills"),
)
# Stored commands and patterns come from agents: every one is shown through _safe, so none can drive
# the operator's terminal.
_COMMAND_WIDTH = 60


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "approvals",
        help="the host approvals file, its allowlists, and pending approvals",
        description="The exec host's approvals file (exec-approvals.json: policy, allowlists, socket) "
        "and the running gateway's pending approvals.",
    )
    actions = parser.add_subparsers(dest="approvals_action", metavar="ACTION", required=True)
    register_actions(actions)


def register_actions(actions: Subparsers) -> None:
    """The `approvals` actions: `get` and `allowlist` work on the local file; `pending` asks the
    running gateway and lives with `approve` (runner/cli/approve.py)."""
    get = actions.add_parser("get", help="show the file, the agent's effective host policy and allowlist")
    get.add_argument("--agent", default=DEFAULT_AGENT, metavar="ID", help="agent id (default: main)")
    add_config_arg(get)
    add_json_arg(get)
    get.set_defaults(func=cmd_get)

    allowlist = actions.add_parser("allowlist", help="add or remove allowlist entries")
    verbs = allowlist.add_subparsers(dest="allowlist_action", metavar="ACTION", required=True)
    add = verbs.add_parser("add", help="allow an executable pattern")
    add.add_argument("pattern", metavar="PATTERN", help="executable path glob or bare name")
    add.add_argument(
        "--agent", default=WILDCARD_AGENT, metavar="ID", help='agent id (default: "*", every agent)'
    )
    add.add_argument("--arg-pattern", metavar="RE", help="regular expression the arguments must match")
    add_json_arg(add)
    add.set_defaults(func=cmd_allowlist_add)
    listing = verbs.add_parser("list", help="every agent's entries (or one agent's), with their scope")
    listing.add_argument("--agent", metavar="ID", help="only this agent's entries (and agents.*)")
    add_json_arg(listing)
    listing.set_defaults(func=cmd_allowlist_list)
    remove = verbs.add_parser("remove", help="remove entries by pattern or id")
    remove.add_argument("pattern", metavar="PATTERN", help="the entry's pattern (case-insensitive) or id")
    remove.add_argument("--agent", default=WILDCARD_AGENT, metavar="ID", help='agent id (default: "*")')
    add_json_arg(remove)
    remove.set_defaults(func=cmd_allowlist_remove)

    from runner.cli.approve import register_pending  # needs the gateway: lives with `approve`

    register_pending(actions)


def _store() -> ApprovalsStore:
    return ApprovalsStore()


def _agent_id(raw: str) -> str:
    try:
        return normalize_agent_id(raw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_get(args: argparse.Namespace) -> int:
    store = _store()
    agent_id = _agent_id(args.agent)
    try:
        exists = store.exists()
        current = store.load()
    except ApprovalsFileError as exc:
        raise UsageError(str(exc)) from None
    view = current.agent(agent_id)
    rows: list[dict[str, Any]] = []
    owners = [WILDCARD_AGENT] if agent_id == WILDCARD_AGENT else [WILDCARD_AGENT, agent_id]
    for owner in owners:
        block = current.agents.get(owner)
        rows += [{"agent": owner, **_entry_json(e)} for e in (block.allowlist if block else [])]
    defaults = {key: current.defaults.value(key) for key, _ in _POLICY_FIELDS}
    policy = {key: getattr(view, attr) for key, attr in _POLICY_FIELDS}
    details: dict[str, Any] = {
        "path": str(store.path),
        "exists": exists,
        "socket": {"path": current.socket_path, "tokenSet": bool(current.socket_token)},
        "defaults": defaults,
        "agentId": agent_id,
        "agent": policy,
        "sources": view.sources,
        "effective": _effective(args.config, agent_id, current, view),
        "allowlist": rows,
        # Names an allow-always admitted for the agent's sandboxes (agents.<id>.egress.allow, and agents.*).
        "egressAllow": store.egress_allow(agent_id),
        "warnings": current.problems(),
    }
    emit(_render_get(details), details, args.json)
    return 0


def _effective(
    config_file: str | None, agent_id: str, current: ApprovalsFile, view: AgentApprovals
) -> dict[str, Any]:
    """What a call with no per-call or session overrides gets: config.toml clamped by this file."""
    try:
        config = load_config(config_file, required=config_file is not None)
        policy = resolve_policy(config, agent_id, {}, None, view, False, file_defaults=current.defaults)
    except (ConfigError, ToolError) as exc:
        return {"error": str(exc)}
    out: dict[str, Any] = {"host": policy.host}
    values = {"security": policy.security, "ask": policy.ask, "askFallback": policy.ask_fallback}
    for key, value in values.items():
        step = policy.step(key)
        out[key] = {"value": value, "decidedBy": f"{step.layer}: {step.key}" if step else None}
    return out


def _entry_json(entry: AllowlistRecord) -> dict[str, Any]:
    return {
        "id": entry.id,
        "pattern": entry.pattern,
        "argPattern": entry.arg_pattern,
        "source": entry.source,
        "lastUsedAt": entry.last_used_at,
        "lastUsedCommand": entry.last_used_command,
        "lastResolvedPath": entry.last_resolved_path,
    }


def _render_get(d: dict[str, Any]) -> str:
    lines = [f"Approvals file: {_safe(d['path'])}" + ("" if d["exists"] else "  (not created yet)")]
    socket = d["socket"]
    if socket["path"]:
        token = "token set" if socket["tokenSet"] else "no token"
        lines.append(f"Socket:         {_safe(socket['path'])}  ({token})")
    defaults = "  ".join(f"{k}={_show(v)}" for k, v in d["defaults"].items())
    lines += ["", f"Defaults:  {defaults}", "", f"Agent {_safe(d['agentId'])}: host policy in this file"]
    for key, value in d["agent"].items():
        source = d["sources"].get(key) or "unset here: config / built-in default applies"
        lines.append(f"  {key:<16} {_show(value):<10} {source}")
    effective = d["effective"]
    lines += ["", "Effective (config.toml clamped by this file; no per-call or session overrides):"]
    if "error" in effective:
        lines.append(f"  unavailable: {_safe(effective['error'])}")
    else:
        for key in ("security", "ask", "askFallback"):
            item = effective[key]
            lines.append(f"  {key:<16} {item['value']:<10} {_safe(item['decidedBy'] or '')}")
    rows = d["allowlist"]
    scope = "agents.*" if d["agentId"] == WILDCARD_AGENT else f"agents.* first, then agents.{d['agentId']}"
    lines += ["", f"Allowlist: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'} ({_safe(scope)})"]
    if rows:
        table = [("AGENT", "PATTERN", "ARG PATTERN", "SOURCE", "LAST USED")]
        table += [
            (
                _safe(r["agent"]),
                _safe(r["pattern"]),
                _safe(r["argPattern"] or "-"),
                _safe(r["source"] or "manual"),
                _last_use(r),
            )
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(4)]
        for row in table:
            cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:4])]
            lines.append("  " + "  ".join([*cells, row[4]]).rstrip())
    if d.get("egressAllow"):
        lines += ["", "Sandbox egress names allowed always (egress.allow):"]
        lines += [f"  {_safe(name)}" for name in d["egressAllow"]]
    if d["warnings"]:
        lines += ["", "Warnings:"] + [f"  {_safe(w)}" for w in d["warnings"]]
    return "\n".join(lines)


def _last_use(row: dict[str, Any]) -> str:
    if row["lastUsedAt"] is None:
        return "never"
    when = datetime.fromtimestamp(row["lastUsedAt"] / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [when]
    if row["lastUsedCommand"]:
        command = _safe(row["lastUsedCommand"])
        if len(command) > _COMMAND_WIDTH:
            command = command[: _COMMAND_WIDTH - 1] + "…"
        parts.append(command)
    if row["lastResolvedPath"]:
        parts.append(f"-> {_safe(row['lastResolvedPath'])}")
    return "  ".join(parts)


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def cmd_allowlist_add(args: argparse.Namespace) -> int:
    store = _store()
    agent_id = _agent_id(args.agent)
    if args.pattern.strip().startswith(COMMAND_HASH_PREFIX):
        # Reference §3.3: only an allow-always decision makes a hash entry durable, and hash entries
        # never match as patterns, so one added here would silently approve nothing.
        raise UsageError(
            f"{COMMAND_HASH_PREFIX} entries are written only by an allow-always approval; "
            "approve the command with allow-always instead"
        )
    pattern = _resolve_bare_name(args.pattern.strip())
    for warning in _never_matches(pattern):
        print(f"warning: {warning}", file=sys.stderr)
    writable = writable_pattern_warning(pattern)
    if writable:
        print(writable, file=sys.stderr)
    try:
        before = {e.id for e in store.load().agent(agent_id).allowlist}
        record = store.add_allowlist(agent_id, pattern, arg_pattern=args.arg_pattern)
    except (ApprovalsFileError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    added = record.id not in before
    what = _safe(record.pattern)
    if record.arg_pattern:
        what += f" (argPattern {_safe(record.arg_pattern)})"
    verb = "Added" if added else "Already allowed:"
    text = f"{verb} {what} for agent {_safe(agent_id)} in {_safe(str(store.path))}"
    emit(text, {"added": added, "agentId": agent_id, "entry": _entry_json(record)}, args.json)
    return 0


def _never_matches(pattern: str) -> list[str]:
    """What makes an entry useless, said when it is added rather than discovered when nothing matches."""
    if pattern == "*" or pattern.startswith(COMMAND_HASH_PREFIX):
        return []
    if not pattern.startswith(("/", "~")):
        return [f"{pattern} is not an absolute path: patterns match absolute paths, so it never matches"]
    if any(c in pattern for c in "*?["):
        return []
    path = os.path.expanduser(pattern)
    if not os.path.exists(path):
        return [f"{pattern} does not exist (yet): the entry matches nothing until it does"]
    if os.path.isdir(path):
        return [f"{pattern} is a directory: add {pattern.rstrip('/')}/* to allow the programs in it"]
    if not os.access(path, os.X_OK):
        return [f"{pattern} is not executable"]
    return []


def cmd_allowlist_list(args: argparse.Namespace) -> int:
    """Every entry with its scope (`*` = every agent); `=command:` entries show the command they stand for."""
    data = _store().load()
    wanted = _agent_id(args.agent) if args.agent else None
    rows = []
    for agent, block in sorted(data.agents.items()):
        if wanted is not None and agent not in (wanted, WILDCARD_AGENT):
            continue
        for entry in block.allowlist:
            rows.append({"agent": agent, **_entry_json(entry)})
    if not rows:
        text = "No allowlist entries."
    else:
        lines = []
        for r in rows:
            arg = f"  args: {r['argPattern']}" if r["argPattern"] else ""
            meaning = ""
            if r["pattern"].startswith(COMMAND_HASH_PREFIX):
                meaning = f"  = {r['lastUsedCommand'] or '(an exact command approved with allow-always)'}"
            lines.append(f"{r['agent']:<10} {r['pattern']}{arg}{meaning}  [{r['source'] or 'manual'}]")
        text = "\n".join(lines)
    emit(text, {"entries": rows}, args.json)
    return 0


def _resolve_bare_name(pattern: str) -> str:
    """A bare name (`rg`) is resolved through this shell's PATH and stored as the path it names (the
    operator is told which): bare names never match at run time."""
    try:
        path = bare_name_path(pattern)
    except InvalidInput as exc:
        raise UsageError(str(exc)) from None
    if path is None:
        return pattern
    print(f"note: bare name {pattern} resolved to {path}", file=sys.stderr)
    return path


def cmd_allowlist_remove(args: argparse.Namespace) -> int:
    store = _store()
    agent_id = _agent_id(args.agent)
    try:
        removed = store.remove_allowlist(agent_id, args.pattern)
    except (ApprovalsFileError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if not removed:
        raise UsageError(f"no allowlist entry {args.pattern!r} for agent {agent_id!r} in {store.path}")
    text = f"Removed {_safe(args.pattern.strip())} from agent {_safe(agent_id)} in {_safe(str(store.path))}"
    emit(text, {"removed": True, "agentId": agent_id, "pattern": args.pattern.strip()}, args.json)
    return 0
