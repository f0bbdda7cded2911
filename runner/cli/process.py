"""`exechost process ACTION [SESSION_ID]`: the process tool (list/poll/log/write/kill/…) via the gateway."""

from __future__ import annotations

import argparse
from typing import Any

from engine.sessions.actions import ACTIONS
from runner.cli.common import Subparsers, add_json_arg, emit
from runner.cli.gateway import call, run_verb


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "process",
        help="list, poll, read, write to and kill background sessions",
        description="The process tool: follow up on sessions the exec tool started.",
    )
    p.add_argument("action", choices=ACTIONS, metavar="ACTION", help="|".join(ACTIONS))
    p.add_argument("session_id", nargs="?", metavar="SESSION_ID", help="the session (or use --session)")
    p.add_argument("--session", metavar="ID", help="the session id")
    p.add_argument("--session-key", default="", metavar="KEY", help="scope: the agent session key")
    p.add_argument("--agent", default="main", metavar="ID", help="agent id (default: main)")
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
    add_json_arg(p)
    p.set_defaults(func=run_verb(cmd_process))


def process_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"action": args.action, "sessionKey": args.session_key, "agentId": args.agent}
    sid = args.session or args.session_id
    if sid:
        params["sessionId"] = sid
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
    return params


def cmd_process(args: argparse.Namespace) -> int:
    result = call("process", process_params(args))
    details = result.get("details") or {}
    emit(str(result.get("text", "")), details, args.json)
    if details.get("error") == "not-found":
        return 1  # an unknown id is an error for every action, poll and log included
    return 1 if details.get("status") == "failed" and args.action not in ("poll", "log", "list") else 0
