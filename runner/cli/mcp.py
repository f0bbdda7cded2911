"""`exechost mcp`: serve the exec and process tools to an agent over MCP stdio."""

from __future__ import annotations

import argparse
import sys

from engine.errors import InvalidInput
from engine.principals import token_from_env
from engine.protocol.frames import GatewayUnavailable, RemoteError
from runner.cli.common import Subparsers, agent_arg
from runner.cli.gateway import EXIT_UNAVAILABLE


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "mcp",
        help="serve the exec and process tools over MCP (stdio)",
        description="An MCP server on stdio with OpenClaw's exec and process tools, backed by the gateway.",
    )
    p.add_argument(
        "--agent",
        type=agent_arg,
        metavar="ID",
        help="the agent this server is for; checked against what its credential proves (default: that)",
    )
    p.add_argument(
        "--agent-token-file",
        metavar="FILE",
        help="the agent's credential (`exechost agents add`; default: $EXECHOST_AGENT_TOKEN)",
    )
    p.add_argument("--session", default="", metavar="KEY", help="session key (process scope, system events)")
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from runner.mcp_server import run

    try:
        credential = token_from_env(args.agent_token_file)
        run(agent_id=args.agent, session_key=args.session, credential=credential)
    except (GatewayUnavailable, RemoteError, InvalidInput) as exc:
        print(f"exechost: gateway unavailable: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return 0
