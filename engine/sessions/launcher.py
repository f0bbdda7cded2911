"""How a command is started: RunSpec, the Launcher/ProcessHandle seam, and the local pipes/PTY launcher."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import secrets
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from engine.commands import hostview
from engine.commands.offargv import carried
from engine.sessions import host_io, procs
from engine.sessions.fdreader import FdReader, write_all
from engine.sessions.host_spawn import start_view_pty
from engine.sessions.pty import become_controlling_tty, open_pty, set_winsize

DEFAULT_SHELL = "/bin/sh"
DEFAULT_TERM = "xterm-256color"
PIPE_SIZE = 1024 * 1024


YIELD_MIN_MS, YIELD_MAX_MS = 10, 120_000


def clamp_yield_ms(value: Any, default: int) -> int:
    """The yield window, the one rule: the ms given (a number, not a bool) or `default`, in [10 ms, 120 s]."""
    ms = value if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    return int(min(max(ms, YIELD_MIN_MS), YIELD_MAX_MS))


def run_timeout(given: Any, *, background: bool, yields: bool, default: float) -> float | None:
    """The timeout rule (reference §1.10), the one place it is written: a positive timeout given wins;
    backgrounded or yielding without one means none (backgroundTimeoutBypass); else `default` (0: none)."""
    if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
        return float(given)
    if background or yields:
        return None
    return float(default) if default > 0 else None


def workdir_warning(raw: str, fallback: str) -> str:
    """The reference's words when a workdir cannot be used (§1.6): the host and the sandbox say the same."""
    return f'Warning: workdir "{raw}" is unavailable; using "{fallback}".'


def home_workdir() -> str:
    """Where a host command runs when no usable workdir was given: $HOME, or / when there is none."""
    home = os.path.expanduser("~")
    return home if os.path.isdir(home) else "/"


def host_workdir(raw: str | None, warnings: list[str]) -> str:
    """The workdir fallback on this machine, the one rule: the directory asked for (`~` expanded, made
    absolute), else $HOME with the reference warning; none asked: $HOME. A sandbox maps its own
    (engine.sandbox.map_workdir) and says the same warning."""
    fallback = home_workdir()
    if not raw:
        return fallback
    path = os.path.expanduser(raw)
    if os.path.isdir(path):
        return os.path.abspath(path)
    warnings.append(workdir_warning(raw, fallback))
    return fallback


@dataclass
class RunSpec:
    """One command to run. `timeout_sec=None` means "not given": the manager applies the reference rules."""

    command: str
    argv: list[str] | None = None  # None => [/bin/sh, -c, command]
    cwd: str | None = None
    env: dict[str, str] | None = None  # sanitised by the caller (engine.commands.hostenv); None => inherit
    pty: bool = False
    cols: int = 120
    rows: int = 40
    yield_ms: int | None = None
    background: bool = False
    timeout_sec: float | None = None
    scope_key: str = ""
    notify_on_exit: bool = True
    notify_on_exit_empty_success: bool = False
    session_key: str | None = None  # system-event queue; defaults to scope_key
    host: str = "gateway"
    name: str | None = None
    launcher: Launcher | None = None  # None => LocalLauncher
    stdin: bool | None = None  # None => open for background or PTY sessions, closed otherwise
    allow_background: bool = True
    warnings: list[str] = field(default_factory=list)  # caller's warnings, shown before the output
    marker: str = ""  # filled by the manager: the value of EXECHOST_SESSION for this command
    output_cap: int | None = None  # filled by the manager: its share of its agent's output budget
    operator: bool = False  # started by the operator: counted against no agent's quota
    # Why the agent may not write to this session (`process write`/keys/paste), "" when it may: a run no
    # human approved whose program may read its input as commands (engine.commands.stdindata).
    input_refused: str = ""
    # Why the agent may not write to it once its policy is no longer `security=full` or elevated, which
    # let it start unasked and take any input: what an allowlist run of the same command would refuse.
    input_refused_unless_full: str = ""
    # The id to use when it is free: an approval's run writes it to disk before the spawn (engine.tools.exec).
    session_id: str | None = None
    # The caller's nonce for this run's marker (`<id>-<instance>`), "" for a fresh one: an approval records
    # it before the spawn and names its run by it, since a session id is reused once its session is gone.
    instance: str = ""
    started_at: int = 0  # filled by the manager: the Session's own start, so a re-read meta lists the same
    # Sealed copies of verified files (engine.commands.verified), inherited at the same numbers.
    pass_fds: tuple[int, ...] = ()
    # The argv makes its terminal in its own /dev/pts and sends the master back (the host view's helper,
    # engine.commands.pinned.PinnedView.terminal): the spawn receives it instead of opening one here.
    pty_in_view: bool = False

    def resolved_argv(self) -> list[str]:
        return list(self.argv) if self.argv else [DEFAULT_SHELL, "-c", self.command]

    def wants_stdin(self) -> bool:
        return self.stdin if self.stdin is not None else (self.background or self.pty)


@runtime_checkable
class ProcessHandle(Protocol):
    """A started command, as the session manager drives it. LocalProcess is the reference implementation.

    `read` returns (stream, bytes) with stream in stdout|stderr|pty, or None once every stream is at EOF
    or `close` was called. `wait` returns (exit code, signal name); exactly one is not None.
    """

    pid: int | None
    pty: bool

    @property
    def stdin_open(self) -> bool: ...

    async def read(self) -> tuple[str, bytes] | None: ...

    async def write(self, data: bytes) -> None: ...

    async def close_stdin(self) -> None: ...

    def resize(self, cols: int, rows: int) -> None: ...

    def signal_group(self, sig: int) -> None: ...

    async def wait(self) -> tuple[int | None, str | None]: ...

    def stdio_holders(self) -> list[procs.ProcInfo]:
        """Processes still holding the command's output open (asked after the main process exited)."""
        ...

    async def terminate(self, grace: float = procs.KILL_GRACE_SEC) -> list[procs.ProcInfo]:
        """SIGTERM everything the command started, `grace` seconds, then SIGKILL. Returns stragglers found."""
        ...

    def close(self) -> None:
        """Stop reading and release every descriptor; pending `read` calls return None."""
        ...


class Launcher(Protocol):
    async def spawn(self, spec: RunSpec) -> ProcessHandle: ...


def _exit_status(status: int, args: Any = None) -> tuple[int | None, str | None]:
    # A run in the host view reports its command's signal as bwrap could not (engine.commands.hostview).
    return hostview.exit_status(args, os.waitstatus_to_exitcode(status))


class LocalProcess:
    """A local child in its own session: non-blocking fds on the event loop, reads batched, pidfd wait."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        readers: dict[int, str],
        stdin_fd: int | None,
        *,
        pty_master: int | None,
        fd_targets: set[str],
        marker: str,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._popen = popen
        self.pid: int | None = popen.pid
        self.pty = pty_master is not None
        self._master = pty_master
        self._stdin_fd = stdin_fd
        self._stdin_closed = stdin_fd is None
        self._fd_targets = fd_targets
        self._marker = marker
        self._exit: asyncio.Future[tuple[int | None, str | None]] = self._loop.create_future()
        self.status_fd: int | None = None  # a host-view run's status pipe (host_io.status_pipe)
        self._closed = False
        keep = frozenset() if pty_master is None else frozenset({pty_master})
        self._out = FdReader(self._loop, coalesce=pty_master is None, keep_open=keep)
        for fd, name in readers.items():
            self._out.add(fd, name)
        self._watch_exit()

    # -- exit -------------------------------------------------------------------------------------
    def _watch_exit(self) -> None:
        try:
            pidfd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):
            self._loop.create_task(self._wait_in_thread())
            return

        def on_exit() -> None:
            try:
                pid, status = os.waitpid(self._popen.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self._popen.pid, 0
            if pid == 0:
                return
            self._loop.remove_reader(pidfd)
            os.close(pidfd)
            self._set_exit(status)

        self._loop.add_reader(pidfd, on_exit)

    async def _wait_in_thread(self) -> None:
        _, status = await asyncio.to_thread(os.waitpid, self._popen.pid, 0)
        self._set_exit(status)

    def _set_exit(self, status: int) -> None:
        if self.status_fd is not None:
            fd, self.status_fd = self.status_fd, None
            code, sig = host_io.status_exit(fd, self._popen.args, os.waitstatus_to_exitcode(status))
        else:
            code, sig = _exit_status(status, self._popen.args)
        # Tell Popen the child is reaped so it never waits on (or warns about) a recycled pid.
        self._popen.returncode = code if code is not None else os.waitstatus_to_exitcode(status)
        if not self._exit.done():
            self._exit.set_result((code, sig))

    async def wait(self) -> tuple[int | None, str | None]:
        return await asyncio.shield(self._exit)

    # -- output -----------------------------------------------------------------------------------
    async def read(self) -> tuple[str, bytes] | None:
        return await self._out.read()

    async def stream_to(self, sink: Callable[[str, bytes], None]) -> None:
        """Instead of `read`: every chunk to `sink` as it arrives, until EOF or `close` (what `sink` raises,
        this raises)."""
        await self._out.stream_to(sink)

    # -- input ------------------------------------------------------------------------------------
    @property
    def stdin_open(self) -> bool:
        return not self._stdin_closed and not self._closed

    async def write(self, data: bytes) -> None:
        if not self.stdin_open or self._stdin_fd is None:
            raise BrokenPipeError("stdin is closed")
        await write_all(self._loop, self._stdin_fd, data)

    async def close_stdin(self) -> None:
        if self._stdin_closed:
            return
        if self.pty:
            # A terminal has no half-close: EOT is what a user's ^D sends.
            await self.write(b"\x04")
        elif self._stdin_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._stdin_fd)
        self._stdin_closed = True

    def resize(self, cols: int, rows: int) -> None:
        if self._master is not None and not self._closed:
            set_winsize(self._master, cols, rows)

    # -- termination ------------------------------------------------------------------------------
    def signal_group(self, sig: int) -> None:
        if self.pid is not None:
            procs.signal_group(self.pid, sig)

    def stdio_holders(self) -> list[procs.ProcInfo]:
        return procs.scan(fd_targets=self._fd_targets)

    async def terminate(self, grace: float = procs.KILL_GRACE_SEC) -> list[procs.ProcInfo]:
        if self.pid is None:
            return []
        return await procs.kill_tree(self.pid, marker=self._marker, fd_targets=self._fd_targets, grace=grace)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._out.close()
        if self.status_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.status_fd)
            self.status_fd = None
        if self._stdin_fd is not None and not self._stdin_closed and self._stdin_fd != self._master:
            with contextlib.suppress(OSError):
                os.close(self._stdin_fd)
        self._stdin_closed = True
        if self._master is not None:
            with contextlib.suppress(OSError):
                os.close(self._master)


def _fd_name(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class LocalLauncher:
    """Runs commands on this machine: pipes by default, a real PTY when asked."""

    async def spawn(self, spec: RunSpec) -> LocalProcess:
        env = dict(os.environ if spec.env is None else spec.env)
        marker = spec.marker or secrets.token_hex(8)
        env[procs.MARKER_ENV] = marker
        # The command's text in the environment, never on an argv (engine.commands.offargv).
        argv, env = carried(spec.resolved_argv(), env)
        # A host-view run's status pipe (host_io.status_pipe): its own exit, which bwrap cannot tell.
        argv, status_fd, status_w = host_io.status_pipe(argv)
        if status_w is not None:
            spec = dataclasses.replace(spec, pass_fds=(*spec.pass_fds, status_w))
        try:
            proc = (
                self._spawn_pty(spec, argv, env, marker)
                if spec.pty
                else self._spawn_pipes(spec, argv, env, marker)
            )
        except BaseException:
            if status_fd is not None:
                os.close(status_fd)
            raise
        finally:
            if status_w is not None:
                os.close(status_w)
        proc.status_fd = status_fd
        return proc

    def _spawn_pty(self, spec: RunSpec, argv: list[str], env: dict[str, str], marker: str) -> LocalProcess:
        env.setdefault("TERM", DEFAULT_TERM)
        if spec.pty_in_view:  # the view makes the terminal in its own /dev/pts and hands the master here
            popen_args = {
                "cwd": spec.cwd,
                "env": env,
                "close_fds": True,
                "pass_fds": spec.pass_fds,
                "start_new_session": True,
            }
            popen, master = start_view_pty(argv, popen_args, spec.cols, spec.rows)
            os.set_blocking(master, False)
            # its slave is named in the run's own /dev/pts: no path here finds its holders
            streams = {master: "pty"}
            return LocalProcess(popen, streams, master, pty_master=master, fd_targets=set(), marker=marker)
        master, slave = open_pty(spec.cols, spec.rows)
        try:
            targets = {os.ttyname(slave)}
            popen = subprocess.Popen(
                argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=spec.cwd,
                env=env,
                close_fds=True,
                pass_fds=spec.pass_fds,
                preexec_fn=become_controlling_tty,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return LocalProcess(
            popen, {master: "pty"}, master, pty_master=master, fd_targets=targets, marker=marker
        )

    def _spawn_pipes(self, spec: RunSpec, argv: list[str], env: dict[str, str], marker: str) -> LocalProcess:
        # Our own pipes (close-on-exec in this process) rather than Popen's file objects: this object
        # owns and closes the read ends, and Popen never reads or reaps anything.
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if spec.wants_stdin() else (None, None)
        child_ends = [fd for fd in (out_w, err_w, in_r) if fd is not None]
        try:
            popen = subprocess.Popen(
                argv,
                stdin=in_r if in_r is not None else subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                cwd=spec.cwd,
                env=env,
                close_fds=True,
                pass_fds=spec.pass_fds,
                start_new_session=True,
            )
        except BaseException:
            for fd in (out_r, err_r, in_w):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in child_ends:
                with contextlib.suppress(OSError):
                    os.close(fd)
        targets: set[str] = set()
        for fd in (out_r, err_r):
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)  # fewer, larger reads under a flood
            targets.add(_fd_name(fd))
        if in_w is not None:
            os.set_blocking(in_w, False)
            targets.add(_fd_name(in_w))
        return LocalProcess(
            popen,
            {out_r: "stdout", err_r: "stderr"},
            in_w,
            pty_master=None,
            fd_targets=targets,
            marker=marker,
        )
