"""`exechost exec [options] -- COMMAND`: the exec tool through the gateway; exit code mirrors the outcome."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from engine import statefs
from engine.display import visible
from engine.protocol.frames import Event
from engine.protocol.methods import EventName, RunStatus
from engine.protocol.requests import ExecRequest
from runner.cli import UsageError
from runner.cli.common import Subparsers, add_json_arg, agent_arg, emit, node_query_arg
from runner.cli.gateway import CliFailure, cli_failures, run_verb, sync_client, with_client

if TYPE_CHECKING:
    from engine.protocol.client import ControlClient

EXIT_PENDING = 10
EXIT_DENIED = 11
EXIT_UNAVAILABLE_APPROVAL = 12


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "exec",
        help="run a shell command through the gateway (policy, approvals, sessions)",
        description="Run COMMAND with the exec tool: the same policy, approvals and sessions agents get.",
    )
    p.add_argument(
        "--agent",
        type=agent_arg,
        metavar="ID",
        help="act as this agent: its credential from $EXECHOST_AGENT_TOKEN, else (the operator's "
        "terminal) its file from `exechost agents add ID`; default: whoever the credential says, else main",
    )
    p.add_argument("--session", default="", metavar="KEY", help="session key (system events, process scope)")
    p.add_argument("--host", metavar="H", help="auto|sandbox|gateway|node")
    p.add_argument("--security", metavar="S", help="deny|allowlist|full (may only tighten)")
    p.add_argument("--ask", metavar="A", help="off|on-miss|always (may only ask more)")
    p.add_argument("--node", type=node_query_arg, metavar="N", help="node id/name for host=node")
    p.add_argument(
        "--yield-ms", type=int, metavar="N", help="ms to wait before backgrounding (default 10000)"
    )
    p.add_argument("--background", action="store_true", help="run in the background immediately")
    p.add_argument("--timeout", type=float, metavar="S", help="kill after S seconds")
    p.add_argument("--pty", action="store_true", help="run in a pseudo-terminal")
    p.add_argument(
        "--elevated", action="store_true", help="run on the host with elevated permissions (if allowed)"
    )
    p.add_argument("--workdir", metavar="D", help="working directory (default: the current directory)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment (repeatable)")
    p.add_argument("--reason", metavar="TEXT", help="why this command runs (shown to the approver)")
    add_json_arg(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    p.set_defaults(func=run_verb(cmd_exec))


def exec_params(args: argparse.Namespace) -> ExecRequest:
    words = list(args.command)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UsageError("exec needs a command after --")
    env: dict[str, str] = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env expects KEY=VALUE, got {item!r}")
        env[key] = value
    return ExecRequest(
        command=words[0] if len(words) == 1 else " ".join(words),
        agent_id=args.agent or None,
        session_key=args.session,
        default_workdir=os.getcwd(),
        workdir=args.workdir or None,
        reason=args.reason or None,
        host=args.host,
        security=args.security,
        ask=args.ask,
        node=args.node,
        yield_ms=args.yield_ms,
        timeout=args.timeout,
        background=args.background or None,
        pty=args.pty or None,
        elevated=args.elevated or None,
        env=env or None,
    )


def exit_code(details: dict[str, Any]) -> int:
    """0 success or still running; the command's own code when it exited non-zero; 1 failed; 10 pending;
    11 denied; 12 approval unavailable."""
    status = details.get("status")
    if status == RunStatus.COMPLETED:
        code = details.get("exitCode")
        return code if isinstance(code, int) and 0 <= code <= 255 else 1
    codes: dict[str, int] = {
        RunStatus.RUNNING: 0,
        RunStatus.FAILED: 1,
        RunStatus.APPROVAL_PENDING: EXIT_PENDING,
        RunStatus.DENIED: EXIT_DENIED,
        RunStatus.APPROVAL_UNAVAILABLE: EXIT_UNAVAILABLE_APPROVAL,
    }
    return codes.get(str(status), 1)


def waiting_line(data: dict[str, Any], now: float | None = None) -> str:
    """What the CLI says while its command waits for the operator."""
    slug = visible(data.get("approvalSlug") or "?")
    left = max(0, int((float(data.get("expiresAtMs") or 0) / 1000) - (time.time() if now is None else now)))
    return (
        f"waiting for approval {slug} (expires in {left // 60}:{left % 60:02d}) — approve in the console "
        f"or with: exechost approve {slug} allow-once"
    )


class _Waiting:
    """What the CLI says on stderr while its command waits for a human (a live countdown on a TTY)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.data: dict[str, Any] | None = None
        self.said_stopped = False

    def on_event(self, event: Event) -> None:
        if event.event != EventName.EXEC_WAITING:
            return
        self.data = dict(event.data)
        sys.stderr.write(waiting_line(event.data) + ("" if self.tty else "\n"))
        sys.stderr.flush()

    def tick(self) -> None:
        if self.tty and self.data is not None:
            sys.stderr.write("\r\x1b[2K" + waiting_line(self.data))
            sys.stderr.flush()

    def done(self) -> None:
        if self.tty and self.data is not None:
            sys.stderr.write("\n")

    def lost(self) -> None:
        from engine.protocol.stopped import read_stop

        assert self.data is not None
        if read_stop(statefs.state_dir()) is not None:
            self.stopped()
            return
        sys.stderr.write(
            f"\nexechost: lost the gateway; waiting for approval {visible(self.data['approvalSlug'])} "
            "on the next one\n"
        )

    def stopped(self, _exc: object = None) -> None:
        """The operator stopped the gateway: no gateway is started; the ask waits on disk for the next."""
        if self.said_stopped:
            return
        self.said_stopped = True
        slug = visible(self.data["approvalSlug"]) if self.data else "?"
        sys.stderr.write(
            f"\nexechost: the gateway was stopped by the operator; waiting (approval {slug} is kept for "
            "the next gateway: `exechost gateway start`)\n"
        )
        sys.stderr.flush()


async def _follow(waiting: _Waiting, call: ExecRequest) -> dict[str, Any]:
    """The gateway went away while a human was being asked: the ask is kept on disk, so reconnect (starting
    a gateway if none comes back, unless the operator stopped it) and keep waiting for it."""
    from engine.protocol.client import ControlClient
    from engine.protocol.resume import follow_approval

    waiting.lost()
    assert waiting.data is not None
    return await follow_approval(
        lambda: ControlClient.connect(client="cli", name="cli", agent=call.agent_id),
        waiting.data,
        call.agent_id or "",
        on_stopped=waiting.stopped,
    )


async def _exec_async(client: ControlClient, call: ExecRequest, waiting: _Waiting) -> dict[str, Any]:
    """The exec request over the asyncio client (a gateway had to be started), with the same countdown."""
    import asyncio

    async def ticker() -> None:
        while True:
            await asyncio.sleep(1)
            waiting.tick()

    client.add_listener(waiting.on_event)
    ticking = asyncio.ensure_future(ticker())
    try:
        return await client.request(call)
    except ConnectionError:
        if waiting.data is None:
            raise
        return await _follow(waiting, call)
    finally:
        ticking.cancel()


def _exec(call: ExecRequest, agent: str | None) -> dict[str, Any]:
    """The exec request over a blocking connection; through the asyncio client only when a gateway must be
    started first."""
    waiting = _Waiting()
    client = sync_client(agent=agent)
    try:
        if client is None:
            return with_client(lambda started: _exec_async(started, call, waiting), agent=agent)
        with client, cli_failures():
            try:
                return client.request(call, on_event=waiting.on_event, tick=waiting.tick)
            except ConnectionError:
                if waiting.data is None:
                    raise
        import asyncio

        with cli_failures():
            return asyncio.run(_follow(waiting, call))
    finally:
        waiting.done()


def cmd_exec(args: argparse.Namespace) -> int:
    try:
        result = _exec(exec_params(args), args.agent)
    except CliFailure as exc:
        if not args.json:
            raise
        # --json promises one object on stdout whatever happens: a refusal or a node error included.
        emit(str(exc), {"status": "error", "error": str(exc), "exitCode": None}, True)
        return exc.code
    details = result.get("details") or {}
    emit(str(result.get("text", "")), details, args.json)
    return exit_code(details)
