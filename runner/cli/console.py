"""`exechost console [--demo]`: the Textual operator console (Textual is imported only when it runs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from runner.cli.common import add_config_arg

Subparsers = argparse._SubParsersAction  # argparse exposes no public name for it


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "console",
        help="the operator console: approvals inbox, sessions, events, policy",
        description="Open the operator console. It connects to the gateway (starting one if none runs) "
        "and hosts exec-approvals.sock. Quitting it loses nothing: the gateway keeps every session "
        "and pending approval.",
    )
    add_config_arg(p)
    p.add_argument(
        "--demo",
        action="store_true",
        help="a guided tour: a throw-away state dir and workspace (under /tmp, removed on quit) and a "
        "scripted agent that keeps working while you watch (with --web: in a browser)",
    )
    p.add_argument(
        "--state-dir", metavar="DIR", help="state dir (default: $OPENCLAW_STATE_DIR or ~/.openclaw)"
    )
    p.add_argument(
        "--web",
        action="store_true",
        help="serve the console to a browser (loopback; a printed URL opens one tab, once; Enter: another)",
    )
    p.add_argument("--port", type=int, metavar="N", help="--web: the port (default: a free one)")
    # What --web runs for each browser tab: another tab (or a terminal console) may host the approval
    # socket already, which is then no news worth a toast in every tab.
    p.add_argument("--web-tab", action="store_true", help=argparse.SUPPRESS)
    # A browser tab of `--demo --web`: the demo its server prepared (the server runs the agent).
    p.add_argument("--demo-root", metavar="DIR", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    from console.launch import run_console

    if args.demo and (args.state_dir or args.config):
        # The demo never touches a real state dir: it makes its own and removes it on quit.
        raise SystemExit("exechost console --demo: --state-dir and --config are not used by the demo")
    if args.demo and os.environ.get("HOME"):
        # The demo's agents are its own scripted ones: its gateway protects whatever $HOME is (a `sudo` that
        # kept the caller's), never refusing to start (engine.commands.hostoutside.home_refused).
        os.environ["EXECHOST_HOST_HOME"] = os.environ["HOME"]
    state = Path(args.state_dir).expanduser().resolve() if args.state_dir else None
    if state is not None:  # every engine module finds its files through this variable
        os.environ["OPENCLAW_STATE_DIR"] = str(state)
    if args.web:
        from console.web import serve

        if args.demo:
            from console.demo_web import serve_demo

            return serve_demo(args.port)
        return serve(state, args.config, args.port)
    demo_root = Path(args.demo_root) if args.demo_root else None
    return run_console(
        state, config_path=args.config, demo=args.demo, web_tab=args.web_tab, demo_root=demo_root
    )
