"""`exechost process ACTION [SESSION_ID]`: the process tool (list/poll/log/write/kill/…) via the gateway."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from engine.display import visible
from engine.protocol.client import ControlClient
from engine.protocol.frames import Event, RemoteError
from engine.protocol.methods import EventName, RunStatus, Topic
from engine.protocol.requests import ProcessRequest, SessionsOutput, Subscribe
from engine.sessions.actions import ACTIONS, format_duration
from runner.cli import UsageError
from runner.cli.common import Subparsers, add_json_arg, agent_arg, emit, node_query_arg, table
from runner.cli.gateway import CliFailure, call, cli_failures, run_verb, running_or_fail, with_client

# What only reads sessions: with no gateway running these say so and fail, never start one (issue 30).
READ_ONLY = ("list", "poll", "log", "follow")


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "process",
        help="list, poll, read, write to and kill background sessions",
        description="The process tool: follow up on sessions the exec tool started.",
    )
    verbs = (*ACTIONS, "follow")
    p.add_argument(
        "action", choices=verbs, metavar="ACTION", help="|".join(verbs) + " (follow: output until exit)"
    )
    p.add_argument("session_id", nargs="?", metavar="SESSION_ID", help="the session (or use --session)")
    p.add_argument("--session", metavar="ID", help="the session id")
    p.add_argument("--session-key", default="", metavar="KEY", help="scope: the agent session key")
    p.add_argument(
        "--agent",
        type=agent_arg,
        metavar="ID",
        help="act as this agent: its credential from $EXECHOST_AGENT_TOKEN, else (the operator's "
        "terminal) its file from `exechost agents add ID`; default: whoever the credential says, else main",
    )
    p.add_argument("--data", metavar="S", help="write: data for stdin")
    p.add_argument("--eof", action="store_true", help="write: close stdin afterwards")
    p.add_argument("--keys", nargs="+", metavar="K", help="send-keys: tmux-style key names")
    p.add_argument("--hex", nargs="+", metavar="H", help="send-keys: raw bytes as hex")
    p.add_argument("--literal", metavar="S", help="send-keys: literal text")
    p.add_argument("--text", metavar="S", help="paste: text")
    p.add_argument("--no-bracketed", action="store_true", help="paste: no bracketed-paste wrapping")
    p.add_argument("--offset", type=int, metavar="N", help="log: first line")
    p.add_argument("--limit", type=int, metavar="N", help="log: number of lines")
    p.add_argument("--timeout", type=int, metavar="MS", help="poll: wait up to MS for exit")
    p.add_argument(
        "--node",
        type=node_query_arg,
        metavar="NAME",
        help="list: only this node's sessions (node=NAME); other actions: a node's session by its own id",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="list: every session of every agent, on the gateway and every connected node (operator)",
    )
    add_json_arg(p)
    p.set_defaults(func=run_verb(cmd_process))


def process_params(args: argparse.Namespace) -> ProcessRequest:
    params: dict[str, Any] = {}
    for key, value in (
        ("data", args.data),
        ("keys", args.keys),
        ("hex", args.hex),
        ("literal", args.literal),
        ("text", args.text),
        ("offset", args.offset),
        ("limit", args.limit),
        ("timeout", args.timeout),
    ):
        if value is not None:
            params[key] = value
    if args.eof:
        params["eof"] = True
    if args.no_bracketed:
        params["bracketed"] = False
    return ProcessRequest(
        action=args.action,
        session_key=args.session_key,
        agent_id=args.agent or None,
        session_id=args.session or args.session_id or None,
        node=args.node or None,
        args=params,
    )


def _agent_of(scope: Any) -> str:
    """`agent:<id>[:…]` scopes name their agent; any other session key does not say."""
    parts = str(scope or "").split(":")
    return parts[1] if len(parts) >= 2 and parts[0] == "agent" and parts[1] else "-"


def format_list(rows: list[dict[str, Any]]) -> str:
    """`process list` for people: where each session runs (NODE: `gateway` here, else the node's name)
    beside the tool's columns; an empty list keeps the tool's own text."""
    if not rows:
        return ""
    cells = [
        [
            r.get("sessionId"),
            r.get("node") or "gateway",
            r.get("status"),
            format_duration(int(r.get("runtimeMs") or 0)),
            visible(str(r.get("command") or r.get("name") or ""))[:60],
        ]
        for r in rows
    ]
    return table(["SESSION", "NODE", "STATUS", "RUNTIME", "COMMAND"], cells)


def format_all(rows: list[dict[str, Any]]) -> str:
    """The operator's table: where each session runs and whose it is."""
    if not rows:
        return "No sessions on the gateway or any connected node."
    cells = [
        [
            r.get("sessionId"),
            r.get("node") or "gateway",
            _agent_of(r.get("scopeKey")),
            r.get("scopeKey"),
            r.get("status"),
            r.get("pid") if r.get("pid") is not None else "-",
            str(r.get("command") or "")[:60],
        ]
        for r in rows
    ]
    return table(["SESSION", "NODE", "AGENT", "SCOPE", "STATUS", "PID", "COMMAND"], cells)


def _not_started(action: str, *, operator: bool = False, agent: str | None = None) -> None:
    """Fail (EXIT_UNAVAILABLE) unless a gateway is running: a read-only action never starts one."""
    running_or_fail(f"`process {action}` reads the sessions it keeps", operator=operator, agent=agent).close()


def cmd_list_all(args: argparse.Namespace) -> int:
    """`process list --all`: the operator's view (sessions.list), gateway and nodes, every scope."""
    _not_started("list", operator=True)
    listed = with_client(lambda client: client.list_sessions(), operator=True, autostart=False)
    rows = [r for r in listed if isinstance(r, dict)]
    for r in rows:
        r.setdefault("node", None)
        r["agent"] = _agent_of(r.get("scopeKey"))
    rows.sort(key=lambda r: r.get("startedAt") or 0, reverse=True)
    emit(format_all(rows), {"sessions": rows}, args.json)
    return 0


def _all_pages(
    first: dict[str, Any], params: ProcessRequest, request: Callable[[ProcessRequest], dict[str, Any]]
) -> dict[str, Any]:
    """`list` answers a page at a time (a frame holds ~2,000 rows); the CLI shows them all."""
    details = dict(first.get("details") or {})
    texts = [str(first.get("text", ""))]
    rows = list(details.get("sessions") or [])
    while details.get("next"):
        page = request(replace(params, args={**params.args, "cursor": details["next"]}))
        details = dict(page.get("details") or {})
        rows += details.get("sessions") or []
        texts[-1] = texts[-1].rsplit("\n(", 1)[0]  # drop the "… more sessions" line of the page before
        texts.append(str(page.get("text", "")))
    details.pop("next", None)
    details.pop("total", None)
    return {"text": "\n".join(texts), "details": {**details, "sessions": rows}}


def cmd_process(args: argparse.Namespace) -> int:
    if args.action == "follow":
        return cmd_follow(args)
    if args.all:
        if args.action != "list":
            raise UsageError("--all goes with list only")
        return cmd_list_all(args)
    params = process_params(args)
    if args.action in READ_ONLY:
        what = f"`process {args.action}` reads the sessions it keeps"
        with running_or_fail(what, agent=args.agent) as client, cli_failures():
            result = client.request(params)
            if args.action == "list":
                result = _all_pages(result, params, lambda page: client.request(page))
                result["text"] = format_list(result["details"]["sessions"]) or result.get("text", "")
    else:
        result = call(params, agent=args.agent)
    details = result.get("details") or {}
    emit(str(result.get("text", "")), details, args.json)
    if details.get("error") == "not-found":
        return 1  # an unknown id is an error for every action, poll and log included
    return 1 if details.get("status") == "failed" and args.action not in ("poll", "log", "list") else 0


def cmd_follow(args: argparse.Namespace) -> int:
    """`process follow ID` (like `pueue follow`): the output so far, then live output until the session
    ends; exits with the session's code. Output is the command's: its escapes are shown, never obeyed."""
    sid = args.session or args.session_id
    if not sid:
        raise UsageError("process follow needs a session id")

    def show(text: str) -> None:
        sys.stdout.write(visible(text, newline="\n", tabs=True))
        sys.stdout.flush()

    async def go(client: ControlClient) -> int:
        ended: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        offset: list[int] = [0]

        def on_event(event: Event) -> None:
            data = event.data
            if data.get("sessionId") != sid:
                return
            if event.event == EventName.SESSION_OUTPUT and not data.get("dropped"):
                if int(data.get("offset") or 0) >= offset[0]:
                    show(str(data.get("data") or ""))
            elif event.event == EventName.SESSION_EXITED and not ended.done():
                ended.set_result(data)

        client.add_listener(on_event)
        await client.request(Subscribe(topics=[Topic.SESSIONS], follow=[sid]))
        try:
            backlog = await client.request(SessionsOutput(session_id=sid, limit=256 * 1024))
        except RemoteError as exc:
            raise CliFailure(str(exc), 1) from None
        show(str(backlog.get("data") or ""))
        offset[0] = int(backlog.get("nextOffset") or 0)
        rows = await client.list_sessions()
        row: dict[str, Any] = next((r for r in rows if r.get("sessionId") == sid), {})
        if row.get("status") not in (None, RunStatus.RUNNING) and not ended.done():
            ended.set_result(row)
        result = await ended
        inner = result.get("session")
        session: dict[str, Any] = inner if isinstance(inner, dict) else result
        code = session.get("exitCode")
        return code if isinstance(code, int) and 0 <= code <= 255 else 1

    _not_started("follow", agent=args.agent)
    return with_client(go, agent=args.agent, autostart=False)
