"""`exechost node serve --stdio|run|install-service`: the node side of host=node (started over SSH, or kept
running as a service so sessions outlive the link)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import shlex
import sys
from pathlib import Path

from engine import statefs
from runner.cli import UsageError
from runner.cli.common import Subparsers, add_json_arg, emit

UNIT_NAME = "exechost-node.service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "node",
        help="run as a node for a remote gateway (started by the gateway over SSH)",
        description="The node runner: decides with this machine's own config and exec-approvals.json.",
    )
    sub = p.add_subparsers(dest="node_command", metavar="VERB")
    serve = sub.add_parser(
        "serve",
        help="speak the node protocol (JSON lines) on stdin/stdout; relays to `node run` if it answers",
    )
    serve.add_argument("--stdio", action="store_true", help="on stdin/stdout (the only transport)")
    serve.set_defaults(func=cmd_serve)
    run = sub.add_parser(
        "run",
        help="the long-lived node service: sessions survive SSH links coming and going",
        description="Listens on <state>/node.sock (0600, this user only); `node serve --stdio` relays to it.",
    )
    run.set_defaults(func=cmd_run)
    install = sub.add_parser("install-service", help="write a systemd unit that runs `exechost node run`")
    scope = install.add_mutually_exclusive_group()
    scope.add_argument(
        "--user", action="store_true", help=f"a user unit, ~/.config/systemd/user/{UNIT_NAME} (default)"
    )
    scope.add_argument("--system", action="store_true", help=f"a system unit, {SYSTEM_UNIT_DIR}/{UNIT_NAME}")
    install.add_argument("--print", action="store_true", help="print the unit instead of writing it")
    install.add_argument("--path", metavar="FILE", help="write the unit here instead")
    add_json_arg(install)
    install.set_defaults(func=cmd_install_service)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def cmd_serve(args: argparse.Namespace) -> int:
    if not args.stdio:
        raise UsageError("node serve needs --stdio (the gateway runs it over SSH)")
    from runner import daemonproc
    from runner.node.serve import serve_stdio

    notes = daemonproc.settle()  # first: it may re-exec (sshd's or a login's process state does not last)
    return asyncio.run(serve_stdio(notes))


def cmd_run(args: argparse.Namespace) -> int:
    from runner import daemonproc
    from runner.node.service import run_service

    notes = daemonproc.settle()  # first: it may re-exec
    return asyncio.run(run_service(notes))


def unit_text(system: bool = False) -> str:
    """The unit: a foreground `node run` in this state dir, restarted on failure. Only the service gets
    SIGTERM (KillMode=mixed): it ends its sessions' process trees itself, with their grace period."""
    argv = [sys.executable, "-P", "-m", "runner", "node", "run"]
    repo = Path(__file__).resolve().parents[2]
    lines = [
        "[Unit]",
        "Description=exechost node service (keeps node sessions alive between SSH links)",
        "After=network.target" if system else "After=default.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={shlex.join(argv)}",
        f"WorkingDirectory={repo}",
        f'Environment="OPENCLAW_STATE_DIR={statefs.state_dir()}"',
        f'Environment="PYTHONPATH={repo}"',
    ]
    if system:
        lines.append(f"User={getpass.getuser()}")
    lines += [
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=20",
        "Restart=on-failure",
        "RestartSec=2",
        "UMask=0077",
        "",
        "[Install]",
        "WantedBy=multi-user.target" if system else "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def cmd_install_service(args: argparse.Namespace) -> int:
    text = unit_text(system=args.system)
    if args.print:
        sys.stdout.write(text)
        return 0
    if args.path:
        path = Path(args.path)
    elif args.system:
        path = SYSTEM_UNIT_DIR / UNIT_NAME
    else:
        path = Path.home() / ".config/systemd/user" / UNIT_NAME
    statefs.atomic_write(path, text, mode=0o644, private_dir=not args.system)
    ctl = "systemctl" if args.system else "systemctl --user"
    done = f"wrote {path}\nenable it with: {ctl} daemon-reload && {ctl} enable --now {UNIT_NAME}"
    scope = "system" if args.system else "user"
    emit(done, {"path": str(path), "unit": UNIT_NAME, "scope": scope}, args.json)
    return 0
