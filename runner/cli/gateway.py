"""`exechost gateway run|start|stop|status|install-service`, and `call()`: how CLI verbs reach the daemon."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from engine import statefs
from engine.protocol.frames import (
    GatewayNotAnswering,
    GatewayNotRunning,
    GatewayUnavailable,
    RemoteError,
    socket_path,
)
from engine.protocol.requests import Message, Shutdown, Status
from engine.protocol.syncclient import SyncClient
from runner.cli.common import Subparsers, add_config_arg, add_json_arg, emit

if TYPE_CHECKING:
    from engine.protocol.client import ControlClient

T = TypeVar("T")

EXIT_UNAVAILABLE = 69  # EX_UNAVAILABLE: no gateway answers and none could be started
UNIT_NAME = "exechost-gateway.service"


class CliFailure(Exception):
    """A verb failed: message for stderr, and the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def cli_failures() -> Iterator[None]:
    """Gateway failures as the CLI reports them: a message and an exit code."""
    try:
        yield
    except GatewayUnavailable as exc:
        raise CliFailure(f"gateway unavailable: {exc}", EXIT_UNAVAILABLE) from None
    except RemoteError as exc:
        raise CliFailure(str(exc), EXIT_UNAVAILABLE if exc.code in ("auth", "version") else 1) from None
    except ConnectionError as exc:
        raise CliFailure(f"lost the gateway connection: {exc}", EXIT_UNAVAILABLE) from None


def sync_client(
    *, autostart: bool = True, operator: bool = False, agent: str | None = None
) -> SyncClient | None:
    """A blocking connection for a one-shot verb (no asyncio to import); None when no gateway answers and
    one may be started: the caller then goes through `with_client`, which starts it."""
    with cli_failures():
        try:
            return SyncClient.connect(client="cli", name="cli", operator=operator, agent=agent)
        except GatewayNotAnswering:
            raise
        except GatewayUnavailable:
            if not autostart:
                raise
    return None


def running_client(*, operator: bool = False, agent: str | None = None) -> SyncClient | None:
    """A connection to the gateway when one is running, None when none is: read-only verbs then read the
    state files themselves and never start a daemon (on a node's state dir least of all)."""
    with cli_failures():
        try:
            return SyncClient.connect(client="cli", name="cli", operator=operator, agent=agent)
        except GatewayNotAnswering:
            raise  # one holds the socket: its files may be mid-write, and it will answer again
        except GatewayUnavailable:
            return None


def running_or_fail(what: str, *, operator: bool = False, agent: str | None = None) -> SyncClient:
    """A connection to the running gateway, for a verb that reads what only its memory holds (sessions):
    with none running it says so and fails (EXIT_UNAVAILABLE), never starting a daemon just to be asked."""
    with cli_failures():
        try:
            return SyncClient.connect(client="cli", name="cli", operator=operator, agent=agent)
        except GatewayNotRunning:
            pass
    from engine.protocol.stopped import read_stop, stopped_error

    state = statefs.state_dir()
    record = read_stop(state)
    if record is not None:  # the operator's stop, said as every client says it
        raise CliFailure(f"gateway unavailable: {stopped_error(state, record)}", EXIT_UNAVAILABLE)
    raise CliFailure(f"no gateway is running; {what} (`exechost gateway start` starts one)", EXIT_UNAVAILABLE)


def call(
    msg: Message,
    *,
    autostart: bool = True,
    operator: bool = False,
    agent: str | None = None,
) -> dict[str, Any]:
    """One request over a fresh connection (starting the gateway if needed). `operator`: the verb is the
    operator's own (approve, policy overrides), never one an agent runs. `agent`: act as that agent, with
    its credential ($EXECHOST_AGENT_TOKEN, else its file in the state dir: engine.protocol.handshake)."""
    client = sync_client(autostart=autostart, operator=operator, agent=agent)
    if client is not None:
        with client, cli_failures():
            return client.request(msg)
    return with_client(
        lambda client: client.request(msg),
        autostart=autostart,
        operator=operator,
        agent=agent,
    )


def with_client(
    use: Callable[[ControlClient], Awaitable[T]],
    *,
    autostart: bool = True,
    operator: bool = False,
    agent: str | None = None,
) -> T:
    """`use` a fresh asyncio connection (starting the gateway if needed); failures become CliFailure."""
    import asyncio

    from engine.protocol.client import ControlClient

    async def go() -> T:
        client = await ControlClient.connect(
            client="cli", name="cli", autostart=autostart, operator=operator, agent=agent
        )
        if client.started_gateway and _may_print_over(sys.stderr):
            # A verb leaves a daemon behind: say so, and how to stop it.
            print(
                f"exechost: started a gateway (pid {client.server_pid}); `exechost gateway stop` stops it",
                file=sys.stderr,
            )
        try:
            return await use(client)
        finally:
            await client.close()

    with cli_failures():
        return asyncio.run(go())


def _may_print_over(stream: Any) -> bool:
    """A notice may go to this stream unless it is a terminal that another job holds in the foreground:
    a CLI run in the background of the console's terminal would print over the TUI (the gateway log and
    `gateway status` still say it started)."""
    try:
        fd = stream.fileno()
        return not os.isatty(fd) or os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError):
        return True


def run_verb(func: Any) -> Any:
    """Wrap a verb so CliFailure prints `exechost: <message>` and exits with its code."""

    def wrapper(args: argparse.Namespace) -> int:
        try:
            return int(func(args) or 0)
        except CliFailure as exc:
            from runner.cli import report_failure

            return report_failure(str(exc), bool(getattr(args, "json", False)), exc.code)

    return wrapper


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "gateway",
        help="run, start, stop or inspect the gateway daemon",
        description="The gateway daemon owns sessions and approvals and serves the control socket.",
    )
    actions = parser.add_subparsers(dest="gateway_action", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="run the gateway in the foreground (SIGTERM stops it gracefully)")
    add_config_arg(run)
    run.add_argument("--verbose", "-v", action="store_true", help="log at debug level")
    run.set_defaults(func=cmd_run)
    start = actions.add_parser("start", help="start the gateway in the background unless one is running")
    add_json_arg(start)
    start.set_defaults(func=run_verb(cmd_start))
    stop = actions.add_parser(
        "stop",
        help="stop the gateway gracefully (sessions keep running; the next gateway adopts them)",
        description="Stop the gateway. Background sessions keep running in the session host and pending "
        "approvals stay on disk: the next gateway adopts both. --kill-sessions ends the sessions instead.",
    )
    stop.add_argument(
        "--kill-sessions", action="store_true", help="end every running session (SIGTERM, grace, SIGKILL)"
    )
    add_json_arg(stop)
    stop.set_defaults(func=run_verb(cmd_stop))
    restart = actions.add_parser(
        "restart",
        help="replace the running gateway (an upgrade): sessions and pending approvals carry over",
    )
    add_json_arg(restart)
    restart.set_defaults(func=run_verb(cmd_restart))
    status = actions.add_parser("status", help="is the gateway running; pid, uptime, counts (exit 1 if not)")
    add_json_arg(status)
    status.set_defaults(func=run_verb(cmd_status))
    install = actions.add_parser("install-service", help="write a systemd user unit for the gateway")
    install.add_argument(
        "--path", metavar="FILE", help=f"unit file (default ~/.config/systemd/user/{UNIT_NAME})"
    )
    add_config_arg(install)
    add_json_arg(install)
    install.set_defaults(func=run_verb(cmd_install_service))


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from runner import daemonproc
    from runner.gateway.pidlock import GatewayBusy
    from runner.gateway.server import run_gateway

    notes = daemonproc.settle()  # first: it may re-exec (nothing its starter handed it lasts)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    daemonproc.log_notes(notes)
    from engine.sessions import procs

    procs.raise_open_file_limit()  # thousands of idle sessions at ~4 fds each (issue 19)
    try:
        asyncio.run(run_gateway(config_path=args.config))
    except GatewayBusy as exc:
        print(f"exechost: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # config errors, unusable state dir: say so, no traceback
        print(f"exechost: gateway failed to start: {exc}", file=sys.stderr)
        return 1
    return 0


def _status() -> dict[str, Any]:
    """The running gateway's status; GatewayUnavailable when none answers (none is started)."""
    # The gateway verbs are the operator's: only the operator sees gateway-wide counts.
    with SyncClient.connect(client="cli", name="cli", operator=True) as client:
        return client.request(Status())


def cmd_start(args: argparse.Namespace) -> int:
    from engine.protocol.stopped import clear_stop

    clear_stop(statefs.state_dir())  # the operator's stop is lifted by the operator's start
    try:
        _status()
        already = True
    except (GatewayUnavailable, ConnectionError):
        already = False
    info = call(Status(), autostart=True, operator=True)
    text = f"gateway {'already running' if already else 'started'} (pid {info['pid']}) on {socket_path()}"
    emit(text, {"status": "running", "started": not already, **info}, args.json)
    return 0


def _stop(kill_sessions: bool, *, sticks: bool = False) -> dict[str, Any] | None:
    """Stop the running gateway and wait for it to go; None when none was running. `sticks`: the
    operator's stop, recorded first, so no client starts a gateway behind it (engine.protocol.stopped)."""
    try:
        info = _status()
    except (GatewayUnavailable, ConnectionError):
        info = None
    if sticks:
        from engine.protocol.stopped import record_stop

        record_stop(statefs.state_dir(), int(info["pid"]) if info else None)
    if info is None:
        return None
    from engine.sessions import procs

    stopping = call(Shutdown(kill_sessions=kill_sessions or None), autostart=False, operator=True)
    pid = int(info["pid"])
    # Killing sessions takes their grace; a stop that keeps them is quick.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and procs.alive(pid):
        time.sleep(0.05)
    if procs.alive(pid):
        raise CliFailure(f"gateway pid {pid} did not stop within 15 s")
    return {**stopping, "pid": pid}


def _sessions_line(stopped: dict[str, Any]) -> str:
    running = int(stopped.get("runningSessions") or 0)
    if not running:
        return "no sessions were running"
    if stopped.get("sessionsKept"):
        return (
            f"{running} running session(s) keep running in the session host; the next gateway adopts them "
            "(`gateway stop --kill-sessions` ends them)"
        )
    return f"{running} running session(s) were ended"


def cmd_stop(args: argparse.Namespace) -> int:
    stopped = _stop(args.kill_sessions, sticks=True)
    stays = "; clients wait and start none until `exechost gateway start`"
    if stopped is None:
        emit("gateway is not running" + stays, {"status": "stopped", "wasRunning": False}, args.json)
        return 0
    pending = int(stopped.get("pendingApprovals") or 0)
    text = f"gateway stopped (pid {stopped['pid']}); {_sessions_line(stopped)}"
    if pending:
        text += f"; {pending} pending approval(s) are kept for the next gateway"
    text += stays
    emit(text, {"status": "stopped", "wasRunning": True, **stopped}, args.json)
    return 0


def _config_problem() -> str | None:
    """Why a gateway started now could not start: the config it would load does not (None: it loads)."""
    from engine.config.loader import config_path, load_config

    try:
        load_config(config_path())  # as the daemon loads it: a missing file means the defaults
    except Exception as exc:  # whatever stops `gateway run` from starting stops the restart first
        return str(exc)
    return None


def cmd_restart(args: argparse.Namespace) -> int:
    """Stop keeping every session and ask, start a new daemon, and say what it took over. A config the new
    daemon could not load refuses the restart first: stopping the running one would leave no gateway."""
    problem = _config_problem()
    if problem is not None:
        try:
            pid = _status()["pid"]
            running = f"the running gateway (pid {pid}) keeps running on its last good config"
        except (GatewayUnavailable, ConnectionError, RemoteError):
            running = "no gateway is running, and none can start until it is fixed"
        fix = "fix the file, then run `exechost gateway restart` again"
        raise CliFailure(f"gateway restart refused: {problem}\n{running}; {fix}")
    from engine.protocol.stopped import clear_stop

    stopped = _stop(kill_sessions=False)
    clear_stop(statefs.state_dir())  # a restart is a start: an earlier operator's stop is lifted
    info = call(Status(), autostart=True, operator=True)
    old = f"pid {stopped['pid']} → " if stopped else ""
    text = (
        f"gateway restarted ({old}pid {info['pid']}): {_adoption_text(info)}, "
        f"{info.get('pendingApprovals', 0)} pending approval(s)"
    )
    emit(text, {"status": "running", "previous": stopped, **info}, args.json)
    return 0


def _adoption_text(info: dict[str, Any]) -> str:
    """How far the kept sessions' adoption is: it runs after the gateway answers."""
    adoption = info.get("adoption") or {}
    total = int(adoption.get("total") or 0)
    if adoption and not adoption.get("done"):
        return f"adopting {adoption.get('adopted', 0)} of {total} kept session(s)"
    return f"{int(info.get('adoptedSessions') or 0)} session(s) adopted"


def _pid_holding_lock() -> int | None:
    """The pid of a daemon that holds gateway.pid (starting, or not answering), else None."""
    import fcntl

    path = statefs.state_dir() / "gateway.pid"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else 0
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def cmd_status(args: argparse.Namespace) -> int:
    try:
        info = _status()
    except GatewayNotAnswering as exc:
        emit(f"gateway not answering: {exc}", {"status": "not-answering"}, args.json)
        return 1
    except (GatewayUnavailable, ConnectionError) as exc:
        holder = _pid_holding_lock()
        if holder is not None:  # a daemon holds gateway.pid: starting up, never "not running"
            text = f"gateway starting (pid {holder or '?'} holds gateway.pid; not answering yet: {exc})"
            emit(text, {"status": "starting", "pid": holder or None}, args.json)
            return 1
        emit(f"gateway is not running ({exc})", {"status": "stopped"}, args.json)
        return 1
    except RemoteError as exc:
        raise CliFailure(str(exc)) from None
    text = (
        f"gateway running (pid {info['pid']}, up {info['uptimeSec']:.0f} s) on {socket_path()}\n"
        f"connections {info['connections']} (approvers {info['approvers']}), "
        f"sessions {info['sessions']} (running {info['runningSessions']}), "
        f"pending approvals {info['pendingApprovals']}"
    )
    adoption = info.get("adoption") or {}
    if adoption and not adoption.get("done"):
        text += f"\n{_adoption_text(info)}"
    elif adoption.get("total"):
        text += f"\nadopted {adoption['total']} kept session(s) in {adoption.get('elapsedMs', 0):.0f} ms"
    if info.get("configError"):
        text += f"\nconfig: {info['configError']}"
    warnings = [w for w in (_proc_warning(),) if w is not None]
    text += "".join(f"\nwarning: {w}" for w in warnings)
    emit(text, {"status": "running", **info, "warnings": warnings}, args.json)
    return 0


def _proc_warning() -> str | None:
    """What the gateway logged at its start about /proc (runner.gateway.procvisible), asked again here: the
    same config on the same machine (None when it does not load: `config:` says why)."""
    from engine.config.loader import config_path, load_config
    from runner.gateway import procvisible

    try:
        return procvisible.warning(load_config(config_path()))
    except Exception:  # (the daemon's own answer says what is wrong with it)
        return None


def unit_text(config: str | None = None) -> str:
    """The systemd user unit: foreground `gateway run`, restarted on failure, SIGTERM for a graceful stop."""
    argv = [sys.executable, "-P", "-m", "runner", "gateway", "run"]
    if config:
        argv += ["--config", os.path.abspath(os.path.expanduser(config))]
    state = statefs.state_dir()
    repo = Path(__file__).resolve().parents[2]
    return "\n".join(
        [
            "[Unit]",
            "Description=exechost gateway (exec host for AI agents)",
            "After=default.target",
            "",
            "[Service]",
            "Type=simple",
            f"ExecStart={shlex.join(argv)}",
            f"WorkingDirectory={repo}",
            f'Environment="OPENCLAW_STATE_DIR={state}"',
            f'Environment="PYTHONPATH={repo}"',
            "KillSignal=SIGTERM",
            "# Only the daemon: the session host and its sessions outlive a restart, for the next gateway.",
            "KillMode=process",
            "TimeoutStopSec=20",
            "Restart=on-failure",
            "RestartSec=2",
            "UMask=0077",
            "NoNewPrivileges=yes",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def cmd_install_service(args: argparse.Namespace) -> int:
    path = Path(args.path) if args.path else Path.home() / ".config/systemd/user" / UNIT_NAME
    statefs.atomic_write(path, unit_text(args.config), mode=0o644)
    text = (
        f"wrote {path}\n"
        f"enable it with: systemctl --user daemon-reload && systemctl --user enable --now {UNIT_NAME}"
    )
    emit(text, {"path": str(path), "unit": UNIT_NAME}, args.json)
    return 0
