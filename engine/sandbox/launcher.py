"""The sandbox Launcher: sessions.ProcessHandle implementations for commands running inside a container."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from engine.sandbox import slots
from engine.sandbox import supervisor as sv
from engine.sandbox.incontainer import InContainer, terminate_in_container
from engine.sandbox.ptyexec import DockerPtyProcess
from engine.sandbox.validate import filter_exec_env
from engine.sessions import procs
from engine.sessions.fdreader import FdReader, write_all
from engine.sessions.launcher import ProcessHandle, RunSpec

SPAWN_TIMEOUT = 10.0
DEFAULT_TERM = "xterm-256color"


class SupervisedProcess(InContainer):
    """A pipes-mode command started by the in-container supervisor (the fast path)."""

    pty = False

    def __init__(self, channel: sv.Channel, marker: str, on_done: Callable[[], None] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._channel = channel
        self._marker = marker
        self._on_done = on_done
        self.pid: int | None = None
        self._streams = FdReader(self._loop, on_eof=self._maybe_cleanup)
        self._exit: asyncio.Future[tuple[int | None, str | None]] = self._loop.create_future()
        self._started: asyncio.Future[None] = self._loop.create_future()
        self._placeholders: list[int] = []
        self._stdin_fd: int | None = None
        self._stdin_closed = True
        self._rc_fd: int | None = None
        self._rc_buf = b""
        self._sent_signal: int | None = None
        self._dir: tuple[str, int, int] | None = None
        self._closed = False
        self._handoff = False
        self._held: list[int] = []  # output FIFO ends kept for the session host (handoff)
        self.exec_id = ""  # after release(): the exec dir its holder removes at the end

    async def start(
        self, script: str, want_stdin: bool, *, handoff: bool = False, pool: slots.SlotPool | None = None
    ) -> None:
        """`handoff`: the output FIFOs are not read here; `release()` hands them (and the status and
        stdin FIFOs) to the session host once the command runs. `pool`: run in a ready slot (or a fresh
        one) rather than through the supervisor's `run` (which a supervisor older than slots needs)."""
        self._handoff = handoff
        if pool is not None:
            try:
                slot = pool.take(script, want_stdin) or await pool.fresh(script, want_stdin)
                self._adopt(slot, want_stdin)
                if not self._started.done():
                    await self._wait_started()
            except BaseException:
                self.close()
                raise
            return
        exec_id, xfd, efd = self._channel.new_exec_dir()
        self._dir = (exec_id, xfd, efd)
        try:
            sv.write_file("spec", script, efd)
            self._channel.give(["spec"], efd)
            ends = sv.make_fifos(self._channel, efd, stdin=want_stdin)
            self._placeholders = ends.placeholders
            if ends.stdin is not None:
                self._stdin_fd, self._stdin_closed = ends.stdin, False
            self._rc_fd = ends.rc
            self._loop.add_reader(self._rc_fd, self._rc_readable)
            if handoff:
                self._held = [ends.out, ends.err]
            else:
                self._streams.add(ends.out, "stdout")
                self._streams.add(ends.err, "stderr")
            self._channel.send(f"run {exec_id}")
            await self._wait_started()
        except BaseException:
            self.close()
            raise

    async def _wait_started(self) -> None:
        try:
            async with asyncio.timeout(SPAWN_TIMEOUT):
                await asyncio.shield(self._started)
        except TimeoutError:
            raise sv.SupervisorUnavailable(
                f"sandbox command did not start within {SPAWN_TIMEOUT:g} s"
            ) from None

    def _adopt(self, slot: slots.Slot, want_stdin: bool) -> None:
        """Take over a slot's fds (it is given its command already). A ready slot's process holds its ends,
        so an unused stdin fd closes now; a fresh one's closes with the placeholders at "pid"."""
        self._dir = (slot.exec_id, slot.xfd, slot.efd)
        self._rc_fd, self._rc_buf = slot.rc, slot.rc_buf
        self._placeholders = slot.placeholders
        late = []
        if want_stdin:
            self._stdin_fd, self._stdin_closed = slot.stdin, False
        else:
            late.append(slot.stdin)
        out, err = slot.out, slot.err
        slot.handed_over()
        if slot.pid is not None:
            self.pid = slot.pid
            for fd in late:
                os.close(fd)
            self._started.set_result(None)
        else:
            self._placeholders.extend(late)
        if self._handoff:
            self._held = [out, err]
        else:
            self._streams.add(out, "stdout")
            self._streams.add(err, "stderr")
        if not (self._handoff and self.pid is not None):
            # A handed-over command's status lines are the session host's from "pid" on (release()).
            self._loop.add_reader(self._rc_fd, self._rc_readable)

    # -- status -----------------------------------------------------------------------------------
    def _rc_readable(self) -> None:
        assert self._rc_fd is not None
        try:
            data = os.read(self._rc_fd, 256)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._rc_eof()
            return
        self._rc_buf = (self._rc_buf + data)[-512:]
        while b"\n" in self._rc_buf:
            line, self._rc_buf = self._rc_buf.split(b"\n", 1)
            self._status_line(line.decode("ascii", "replace").split())
            if self._handoff and self.pid is not None:
                # The rest (an exit line already) is the session host's to read: release() passes it on.
                self._loop.remove_reader(self._rc_fd)
                return

    def _status_line(self, words: list[str]) -> None:
        if len(words) != 2 or not words[1].isdigit():
            return
        value = int(words[1])
        if words[0] == "pid" and self.pid is None:
            self.pid = value
            for fd in self._placeholders:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._placeholders.clear()
            if not self._started.done():
                self._started.set_result(None)
        elif words[0] == "exit" and not self._exit.done():
            status = sv.decode_status(value, self._sent_signal)
            name = signal.Signals(status.signal).name if status.signal else None
            self._exit.set_result((status.exit_code, name))

    def _rc_eof(self) -> None:
        if self._rc_fd is not None:
            self._loop.remove_reader(self._rc_fd)
            with contextlib.suppress(OSError):
                os.close(self._rc_fd)
            self._rc_fd = None
        if not self._started.done():
            self._started.set_exception(sv.SupervisorUnavailable("sandbox command did not start"))
        if not self._exit.done():
            # The status writer vanished without a word: the container or supervisor was killed.
            self._exit.set_result((None, "SIGKILL"))
        self._maybe_cleanup()

    def release(self) -> tuple[tuple[int, ...], list[str], bytes]:
        """For the session host: (fds, stream names, status bytes already read) — stdout, stderr, status,
        [stdin]. From here on the fds are the caller's to send and close; this handle only removes the
        FIFOs' names (the open ends outlive them) and is done."""
        if self._rc_fd is None or len(self._held) != 2 or self.pid is None:
            raise sv.SupervisorUnavailable("the sandbox command ended before it could be handed over")
        self._loop.remove_reader(self._rc_fd)
        status, self._rc_buf = self._rc_buf, b""
        fds, names = (*self._held, self._rc_fd), list(("stdout", "stderr", "status"))
        if self._stdin_fd is not None and not self._stdin_closed:
            fds, names = (*fds, self._stdin_fd), [*names, "stdin"]
        self._held, self._rc_fd, self._stdin_fd, self._stdin_closed = [], None, None, True
        if not self._exit.done():
            self._exit.set_result((None, None))
        # The FIFOs' names go (their open ends live on); the spec stays until the command's end, since
        # the shell that reads it may not have opened it yet (engine.sandbox.held removes the dir).
        if self._dir is not None:
            exec_id, xfd, efd = self._dir
            self._dir = None
            for name in ("out", "err", "rc", "in"):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=efd)
            os.close(efd)
            os.close(xfd)
            self.exec_id = exec_id
        self.close()
        return fds, names, status

    def _maybe_cleanup(self) -> None:
        if self._dir is not None and self._rc_fd is None and not self._streams.open:
            exec_id, xfd, efd = self._dir
            self._dir = None
            slots.janitor.remove(exec_id, xfd, efd)
            if self._on_done is not None:
                self._on_done()

    # -- ProcessHandle ----------------------------------------------------------------------------
    async def write(self, data: bytes) -> None:
        if not self.stdin_open or self._stdin_fd is None:
            raise BrokenPipeError("stdin is closed")
        await write_all(self._loop, self._stdin_fd, data)

    async def close_stdin(self) -> None:
        if self._stdin_fd is not None and not self._stdin_closed:
            # Safe: start() returned only after "pid", so the container holds the read end and sees EOF.
            with contextlib.suppress(OSError):
                os.close(self._stdin_fd)
        self._stdin_closed = True

    def resize(self, cols: int, rows: int) -> None:
        return None  # pipes have no window

    def _finished(self) -> bool:
        return self._exit.done() and not self._streams.open

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in [*self._placeholders, *self._held]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._placeholders.clear()
        self._held.clear()
        if self._stdin_fd is not None and not self._stdin_closed:
            with contextlib.suppress(OSError):
                os.close(self._stdin_fd)
        self._stdin_closed = True
        self._streams.close()
        # The status FIFO stays open until the exit line: wait() must still resolve after close().
        if self._exit.done() and self._rc_fd is not None:
            self._loop.remove_reader(self._rc_fd)
            with contextlib.suppress(OSError):
                os.close(self._rc_fd)
            self._rc_fd = None
        if not self._started.done():
            self._started.cancel()
        self._maybe_cleanup()


class SandboxLauncher:
    """sessions.Launcher for one container. Built by engine.sandbox.prepare_exec; reusable across commands."""

    def __init__(
        self,
        *,
        container: str,
        channel: sv.Channel,
        api_factory: Callable[[], Any],
        explicit_env: frozenset[str] = frozenset(),
        base_env: Mapping[str, str],
        path_prepend: str | None,
        has_busybox: bool,
        cwd: str = "/workspace",
        roots: tuple[str, ...] = ("/workspace",),
        activity: Callable[[int], None] | None = None,
        session_host: Any = None,
        use_slots: bool = False,
        terminal: Callable[[RunSpec, str, str], Awaitable[Any]] | None = None,
    ) -> None:
        self.container = container
        # How a PTY command runs when the backend is not Docker (engine.sandbox.backend): (spec, spec script,
        # marker) -> a handle. None: `docker exec -t` into the container.
        self._terminal = terminal
        # Ready slots need a supervisor that knows them: false for a container still running an older one.
        self._slots = use_slots
        self._session_host = session_host
        # The prepared container cwd: used when the caller's RunSpec.cwd is not a container path (a
        # session manager that resolved it against the host filesystem would hand us a host dir).
        self.cwd = cwd
        self._roots = roots
        self._activity = activity
        self._waiters: set[asyncio.Future[Any]] = set()
        self._channel = channel
        self._api_factory = api_factory
        self._explicit_env = explicit_env
        self._base_env = dict(base_env)
        self._path_prepend = path_prepend
        self._busybox = sv.BUSYBOX if has_busybox else ""

    def _script(self, spec: RunSpec, marker: str, pty: bool) -> str:
        filtered = filter_exec_env(spec.env or {}, self._explicit_env)
        spec.warnings.extend(w for w in filtered.warnings if w not in spec.warnings)
        env = {**self._base_env, **filtered.env}
        # A PATH from the tool's env is prepended inside the login shell, like OpenClaw's
        # OPENCLAW_PREPEND_PATH: /etc/profile may reset PATH, and the container is the boundary here.
        user_path = env.pop("PATH", None)
        prepend = ":".join(p for p in (user_path, self._path_prepend) if p) or None
        env[procs.MARKER_ENV] = marker
        if pty:
            env.setdefault("TERM", DEFAULT_TERM)
        command = spec.command if not spec.argv else shlex.join(spec.argv)
        cwd = spec.cwd if spec.cwd and _inside_any(spec.cwd, self._roots) else self.cwd
        script = sv.spec_script(command, cwd, env, prepend, "/bin/sh", busybox=self._busybox)
        if pty and self._busybox:
            script = (
                f"{self._busybox} stty cols {int(spec.cols)} rows {int(spec.rows)} 2>/dev/null\n" + script
            )
        return script

    async def spawn(self, spec: RunSpec) -> ProcessHandle:
        marker = spec.marker or secrets.token_hex(8)
        if not all(c in "0123456789abcdef" for c in marker):
            marker = secrets.token_hex(8)
        session_id = spec.session_id or ""
        host = self._session_host
        held = host is not None and bool(session_id) and await host.connect() is not None
        if spec.pty and self._terminal is not None:
            return self._track(await self._terminal(spec, self._script(spec, marker, True), marker))
        if spec.pty:
            api = await asyncio.to_thread(self._api_factory)  # the first call connects to the engine
            pty = DockerPtyProcess(api, self._channel, self.container, marker)
            try:
                await pty.start(
                    self._script(spec, marker, True), spec.cols, spec.rows, self._busybox, handoff=held
                )
            except BaseException:
                pty.close()
                raise
            if held:
                return self._track(await self._hold_pty(host, spec, session_id, marker, pty))
            return self._track(pty)
        if held:
            return self._track(await self._spawn_held(host, spec, session_id, marker))
        proc = SupervisedProcess(self._channel, marker)
        await proc.start(self._script(spec, marker, False), spec.wants_stdin(), pool=self._pool())
        return self._track(proc)

    def _pool(self) -> slots.SlotPool | None:
        return slots.pool_for(self._channel) if self._slots else None

    async def _hold_pty(
        self, host: Any, spec: RunSpec, session_id: str, marker: str, pty: DockerPtyProcess
    ) -> Any:
        """A `docker exec -t` terminal handed to the session host: its socket outlives us."""
        pid = pty.pid
        fd, docker_exec, exec_dir = pty.release()
        sandbox = {"execId": exec_dir, "dockerExec": docker_exec}
        return await self._hold(host, spec, session_id, marker, pid, (fd,), ["pty"], sandbox, b"", "terminal")

    async def _spawn_held(self, host: Any, spec: RunSpec, session_id: str, marker: str) -> Any:
        """Started by the supervisor as always, then handed to the session host: it outlives us."""
        proc = SupervisedProcess(self._channel, marker)
        await proc.start(
            self._script(spec, marker, False), spec.wants_stdin(), handoff=True, pool=self._pool()
        )
        fds, names, status = proc.release()
        sandbox = {"execId": proc.exec_id}
        return await self._hold(
            host, spec, session_id, marker, proc.pid, fds, names, sandbox, status, "command"
        )

    async def _hold(
        self,
        host: Any,
        spec: RunSpec,
        session_id: str,
        marker: str,
        pid: int | None,
        fds: tuple[int, ...],
        names: list[str],
        sandbox: dict[str, Any],
        status: bytes,
        what: str,
    ) -> Any:
        """Hand a started command's fds to the session host (a terminal or its FIFOs), with the session file
        that lets the next gateway signal it through the container. Our fds are closed either way; a host
        that fails or went away ends the command in the container (nobody would read it)."""
        from engine.sandbox.held import KIND, make_held
        from engine.sessions.host import session_meta

        meta = session_meta(session_id, spec) | {
            "held": KIND,
            "marker": marker,  # the container's processes carry this one (kill_marked)
            "sandbox": {"container": self.container, "pid": pid, **sandbox},
        }
        try:
            handle = await host.hold(session_id, fds, names, meta, make_held, status, spec.output_cap)
        except BaseException:
            await terminate_in_container(self._channel, pid, marker, 0.0, lambda: False, lambda _s: None)
            raise
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if handle is None:  # the host went away between connect and hold: nobody reads it, end it
            await terminate_in_container(self._channel, pid, marker, 0.0, lambda: False, lambda _s: None)
            raise sv.SupervisorUnavailable(f"the session host went away while taking the sandbox {what}")
        handle.pid = pid
        return handle

    def _track(self, handle: Any) -> Any:
        """Count running commands per container: prune and the hot window never take a busy container."""
        activity = self._activity
        if activity is not None:
            activity(1)
            task = asyncio.ensure_future(handle.wait())
            self._waiters.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._waiters.discard)
            task.add_done_callback(lambda _f: activity(-1))
        return handle


def _inside_any(path: str, roots: tuple[str, ...]) -> bool:
    norm = os.path.normpath(path)
    return any(norm == r or norm.startswith(r.rstrip("/") + "/") for r in roots)
