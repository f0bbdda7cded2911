"""`exechost node serve --stdio`: the node side of host=node, started by the gateway over SSH."""

from __future__ import annotations

import argparse
import asyncio

from runner.cli import UsageError
from runner.cli.common import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "node",
        help="run as a node for a remote gateway (started by the gateway over SSH)",
        description="The node runner: decides with this machine's own config and exec-approvals.json.",
    )
    sub = p.add_subparsers(dest="node_command", metavar="VERB")
    serve = sub.add_parser("serve", help="speak the node protocol (JSON lines) on stdin/stdout")
    serve.add_argument("--stdio", action="store_true", help="on stdin/stdout (the only transport)")
    serve.set_defaults(func=cmd_serve)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def cmd_serve(args: argparse.Namespace) -> int:
    if not args.stdio:
        raise UsageError("node serve needs --stdio (the gateway runs it over SSH)")
    from runner.node.serve import serve_stdio

    return asyncio.run(serve_stdio())
