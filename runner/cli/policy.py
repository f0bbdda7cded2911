"""`exechost policy check`: the decision for one command, and which layer and key made it."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys

from engine.approvals.store import ApprovalsFileError, ApprovalsStore
from engine.config.loader import load_config
from engine.config.model import Config, ConfigError
from engine.modes import ASKS, HOSTS, SECURITIES, normalize_ask, normalize_host, normalize_security
from engine.results import ToolError
from engine.sandbox import with_sandbox_refusal
from runner.cli import UsageError
from runner.cli.common import Subparsers, add_config_arg, escape_controls, node_query_arg

# Commands come from agents: never let them drive the operator's terminal.
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "policy",
        help="explain the exec policy decision for a command",
        description="Exec policy: what would happen to a command, and why.",
    )
    actions = parser.add_subparsers(dest="policy_action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="decide allow/ask/deny for COMMAND and name the layer and key that decided",
        description="Evaluate COMMAND as the exec tool would (without running it). "
        "Put the command after `--`; several words are shell-quoted and joined.",
    )
    add_config_arg(check)
    check.add_argument("--agent", default="main", metavar="ID", help="agent id (default: main)")
    check.add_argument("--host", metavar="H", help=f"per-call host ({'|'.join(HOSTS)})")
    check.add_argument(
        "--security", metavar="S", help=f"per-call security ({'|'.join(SECURITIES)}); only tightens"
    )
    check.add_argument("--ask", metavar="A", help=f"per-call ask ({'|'.join(ASKS)}); only asks more")
    check.add_argument("--node", type=node_query_arg, metavar="N", help="per-call node (id/name), as exec's")
    check.add_argument("--cwd", metavar="DIR", help="working directory for executable resolution")
    check.add_argument("--json", action="store_true", help="print the decision as one JSON object")
    check.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    check.set_defaults(func=cmd_check)


def _known_node(config: Config, query: str) -> None:
    """As the gateway checks it first: a node query naming no configured node is the error, not the host.
    (Ids and display names are learnt from a link; the configured names and hosts are what is known here.)"""
    from engine.nodes.select import Candidate, NodeSelectError, select_node

    candidates = [
        Candidate(name, cfg.host, display_name=cfg.display_name) for name, cfg in config.nodes.items()
    ]
    try:
        select_node(candidates, query)
    except NodeSelectError as exc:
        raise ToolError(str(exc)) from None


def cmd_check(args: argparse.Namespace) -> int:
    words = list(args.command)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UsageError("policy check: missing COMMAND (usage: exechost policy check [options] -- COMMAND)")
    command = words[0] if len(words) == 1 else shlex.join(words)
    if not _AGENT_ID.fullmatch(args.agent):
        raise UsageError(f"policy check: invalid --agent {args.agent!r} (letters, digits, _ . -)")
    params: dict[str, str] = {}
    for flag, value, normalize, choices in (
        ("host", args.host, normalize_host, HOSTS),
        ("security", args.security, normalize_security, SECURITIES),
        ("ask", args.ask, normalize_ask, ASKS),
    ):
        if value is None:
            continue
        norm = normalize(value)
        if norm is None:
            raise UsageError(f"policy check: invalid --{flag} {value!r} (expected {'|'.join(choices)})")
        params[flag] = norm
    cwd = os.path.abspath(os.path.expanduser(args.cwd)) if args.cwd else os.getcwd()
    if not os.path.isdir(cwd):
        raise UsageError(f"policy check: --cwd {args.cwd!r} is not a directory")
    # Imported here so a problem in the analysis stack cannot take down every other CLI verb.
    from engine.policy.decision import evaluate
    from engine.policy.explain import explain
    from engine.tools.exec_host import host_outside

    try:
        config = load_config(args.config, required=bool(args.config or os.environ.get("EXECHOST_CONFIG")))
        sandbox = config.sandbox_for(args.agent)
        if args.node:
            _known_node(config, args.node)
            params["node"] = args.node
        decision = evaluate(
            command,
            config=config,
            agent_id=args.agent,
            params=params,
            store=ApprovalsStore(),
            cwd=cwd,
            # The CLI speaks for the agent's main session: non-main sandboxing does not apply to it.
            sandbox_available=sandbox.mode == "all",
            outside=lambda: host_outside(config, args.agent, cwd),  # globs expand as the run sees them
        )
    except (ConfigError, ApprovalsFileError) as exc:
        raise UsageError(str(exc)) from None
    except ToolError as exc:
        raise UsageError(f"policy check: {exc}") from None
    decision = with_sandbox_refusal(decision, config, args.agent)
    if args.json:
        payload = {"text": explain(decision), **decision.to_json()}
        json.dump(payload, sys.stdout, ensure_ascii=True)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(escape_controls(explain(decision), keep_lines=True) + "\n")
    sys.stdout.flush()
    return 0
