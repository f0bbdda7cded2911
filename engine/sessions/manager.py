"""SessionManager: runs commands as sessions, supervises them to EOF and exit, and answers `process`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from engine import statefs
from engine.approvals import generations
from engine.errors import NotFound
from engine.protocol.methods import EventName
from engine.results import ToolError, ToolResult
from engine.sessions import procs
from engine.sessions.actions import run_action
from engine.sessions.events import SystemEvents
from engine.sessions.fanout import OutputSubscription
from engine.sessions.host import HostProcess
from engine.sessions.launcher import (
    Launcher,
    LocalLauncher,
    LocalProcess,
    ProcessHandle,
    RunSpec,
    clamp_yield_ms,
    host_workdir,
    run_timeout,
)
from engine.sessions.output import DEFAULT_LOG_CAP, SessionOutput
from engine.sessions.procs import KILL_GRACE_SEC
from engine.sessions.pty import TerminalWatcher
from engine.sessions.quota import Quota
from engine.sessions.registry import Registry, Session, now_ms

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SEC = 1800.0
_ENDED = "not started: agent {agent} was revoked (or its credential rotated) after this call was taken up"
DEFAULT_BACKGROUND_MS = 10_000
# After the main process exits: how long output may stay silent, and how long it may keep coming,
# before whoever still holds the pipes is treated as a stray.
EOF_IDLE_SEC = 0.25
EOF_MAX_SEC = 2.0
# A finished session's output goes to disk this long after its end: every waiter had its result by then
# (settled output reads the same from disk anyway; this only spares a fast reader the disk).
SETTLE_AFTER_SEC = 1.0
NOTIFY_TAIL_CHARS = 400
NOTIFY_SNIPPET_CHARS = 180
RUNNING_HINT = "Use process (list/poll/log/write/kill/clear/remove) for follow-up."

SessionListener = Callable[[str, dict[str, Any]], None]


def _compact(text: str, limit: int = NOTIFY_SNIPPET_CHARS) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[: max(1, limit - 1)] + "…"


def _warning_prefix(warnings: list[str]) -> str:
    return "\n".join(warnings) + "\n\n" if warnings else ""


class SessionManager:
    """Owns every session of this gateway. One instance per process; all methods run on its event loop."""

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        log_cap_bytes: int = DEFAULT_LOG_CAP,
        cleanup_ms: int = 1_800_000,
        events: SystemEvents | None = None,
        timeout_sec: float = DEFAULT_TIMEOUT_SEC,
        background_ms: int = DEFAULT_BACKGROUND_MS,
        kill_grace_sec: float = KILL_GRACE_SEC,
        launcher: Launcher | None = None,
        split_stream_chars: int = 0,
        quota: Quota | None = None,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else statefs.state_dir()
        self.split_stream_chars = split_stream_chars  # OutputBuffer.split_chars for every session
        self.log_dir = self.state_dir / "sessions"
        self.log_cap_bytes = log_cap_bytes
        self.events = events if events is not None else SystemEvents()
        self.default_timeout_sec = timeout_sec
        self.default_background_ms = background_ms
        self.kill_grace_sec = kill_grace_sec
        self.launcher: Launcher = launcher if launcher is not None else LocalLauncher()
        # Per agent: sessions kept, output bytes on disk (engine.sessions.quota); None: one principal here.
        self.quota = quota
        self.registry = Registry(cleanup_ms)
        self.registry.on_drop = self._on_drop
        self._listeners: list[SessionListener] = []
        # Told of every exit with the session itself (its instance: an id alone may be reused), before the
        # listeners hear of it: the gateway writes an approved run's end down under its approval.
        self.on_exit: Callable[[Session], None] | None = None
        self._supervisors: set[asyncio.Task[None]] = set()
        self._closing = False
        # Kept sessions being adopted in the background (engine.sessions.adopt.Adoption), else None.
        self.adoption: Any = None
        self.registry.reserved = self.adopting

    # -- listeners --------------------------------------------------------------------------------
    def add_listener(self, listener: SessionListener) -> Callable[[], None]:
        """`listener(event, session dict)` for `session.started` and `session.exited`."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _emit(self, event: str, session: Session) -> None:
        if not self._listeners:
            return
        data = session.to_dict()
        for listener in list(self._listeners):
            try:
                listener(event, data)
            except Exception:  # a broken viewer must not break the session or the other viewers
                log.exception("session listener failed on %s", event)

    # -- exec -------------------------------------------------------------------------------------
    def _effective_timeout(self, spec: RunSpec) -> float | None:
        return run_timeout(
            spec.timeout_sec,
            background=spec.allow_background and spec.background,
            yields=spec.allow_background and spec.yield_ms is not None,
            default=self.default_timeout_sec,
        )

    async def run(self, spec: RunSpec) -> ToolResult:
        """Start `spec` and return completed | failed (finished within the yield window) | running."""
        if not spec.command.strip() and not spec.argv:
            raise ToolError("Provide a command to start.")
        if self._closing:
            raise ToolError("The session manager is shutting down.")
        warnings = list(spec.warnings)
        background = spec.background and spec.allow_background
        if not spec.allow_background and (spec.background or spec.yield_ms is not None):
            warnings.append("Warning: background execution is disabled; running synchronously.")
        # A custom launcher (a sandbox) owns its cwd: it is a path inside the container, already mapped
        # and checked there, so testing it against this machine's filesystem would be wrong.
        cwd = spec.cwd if spec.launcher is not None and spec.cwd else host_workdir(spec.cwd, warnings)
        output_cap = self.log_cap_bytes
        if self.quota is not None and not spec.operator:
            output_cap = self.quota.grant(spec.scope_key, self.registry, self.log_cap_bytes)
        wanted = spec.session_id
        if wanted and self.registry.get(wanted) is None and not self.adopting(wanted):
            session_id = wanted
        else:
            session_id = self.registry.new_id()
        spec = dataclasses.replace(
            spec,
            cwd=cwd,
            timeout_sec=self._effective_timeout(spec),
            marker=f"{session_id}-{spec.instance or secrets.token_hex(6)}",
            session_id=session_id,  # what launchers read the id from (never parsed back out of the marker)
            started_at=now_ms(),
            warnings=warnings,
            output_cap=output_cap,
        )
        session = Session(
            id=session_id,
            spec=spec,
            cwd=cwd,
            started_at=spec.started_at,
            output=SessionOutput(
                self.log_dir / f"{session_id}.log",
                log_cap=output_cap,
                session_id=session_id,
                split_chars=self.split_stream_chars,
            ),
        )
        self.registry.add(session)  # before any await: the id stays reserved while a launcher spawns
        if self.quota is not None:
            self.quota.admit(session)
        try:
            handle = await self._spawn(session, warnings)
        except BaseException:
            self.registry.drop(session.id)  # a launcher's own error (or a cancel): no ghost "running" row
            raise
        if handle is None:
            self.registry.drop(session.id)
            return self._finished_result(session)
        self.supervise(session, handle)
        if background:
            session.backgrounded = True
            return self._running_result(session)
        try:
            if spec.allow_background:
                yield_sec = clamp_yield_ms(spec.yield_ms, self.default_background_ms) / 1000
                await asyncio.wait_for(asyncio.shield(session.done.wait()), yield_sec)
            else:
                await asyncio.shield(session.done.wait())
        except TimeoutError:
            if not session.exited:
                session.backgrounded = True
                return self._running_result(session)
        except asyncio.CancelledError:
            # The tool call was aborted before the command was backgrounded: it dies with the call.
            if not session.exited:
                self._request_kill(session)
            raise
        return self._finished_result(session)

    async def _spawn(self, session: Session, warnings: list[str]) -> ProcessHandle | None:
        spec = session.spec
        launcher = spec.launcher or self.launcher
        stamp = generations.stamped()  # the credential generation that authorized this run (None: operator)
        if stamp is not None and stamp.stale():  # revoked or rotated since the call was taken up
            return self._spawn_failed(session, generations.AuthorityEnded(_ENDED.format(agent=stamp.agent)))
        try:
            handle = await launcher.spawn(spec)
        except (OSError, ValueError, RuntimeError) as exc:
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):  # say why, what to do
                running = self.registry.counts()[1]
                explain = getattr(launcher, "open_file_limit_text", procs.open_file_limit_text)
                return self._spawn_failed(session, OSError(explain(running)))
            # A terminal the host view makes is its argv's to make: the same argv cannot run without it.
            if not spec.pty or spec.pty_in_view:
                return self._spawn_failed(session, exc)
            warnings.append(f"Warning: PTY spawn failed ({exc}); retrying without PTY for `{spec.command}`.")
            session.spec = spec = dataclasses.replace(spec, pty=False, stdin=True)
            try:
                handle = await launcher.spawn(spec)
            except (OSError, ValueError, RuntimeError) as retry_exc:
                return self._spawn_failed(session, retry_exc)
        if stamp is not None and stamp.stale():
            # Ended while it was being made: the revoke's kill may have looked before this process was
            # there, so it is ended here (the bump came before that kill, so one of the two sees it).
            await handle.terminate(grace=0)
            await handle.wait()
            handle.close()
            return self._spawn_failed(session, generations.AuthorityEnded(_ENDED.format(agent=stamp.agent)))
        session.handle = handle
        session.pid = handle.pid
        session.pty = handle.pty
        session.output.terminal = handle.pty
        if handle.pty:
            session.terminal = TerminalWatcher()
        return handle

    @staticmethod
    def _spawn_failed(session: Session, exc: BaseException) -> ProcessHandle | None:
        session.error = str(exc)
        session.exited = True
        session.ended_at = now_ms()
        session.done.set()
        return None

    # -- supervision ------------------------------------------------------------------------------
    def supervise(self, session: Session, handle: ProcessHandle) -> None:
        """Watch a registered session's process to its end (a new one, or one the session host kept)."""
        task = asyncio.get_running_loop().create_task(self._supervise(session, handle))
        self._supervisors.add(task)
        task.add_done_callback(self._supervisors.discard)
        self._emit(EventName.SESSION_STARTED, session)

    async def _supervise(self, session: Session, handle: ProcessHandle) -> None:
        loop = asyncio.get_running_loop()
        timeout = session.spec.timeout_sec
        timer = loop.call_later(timeout, self._on_timeout, session) if timeout else None
        pump = loop.create_task(self._pump(session, handle))
        try:
            code, sig = await handle.wait()
            await self._await_eof(session, handle, pump)
        finally:
            if timer is not None:
                timer.cancel()
            if not pump.done():
                handle.close()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
        self._record_exit(session, handle, code, sig)

    async def _pump(self, session: Session, handle: ProcessHandle) -> None:
        stream_to = getattr(handle, "stream_to", None)
        if stream_to is not None:  # a local child: chunks come straight from the read, no task hop each
            await stream_to(lambda stream, data: self._on_output(session, handle, stream, data))
        else:
            while (item := await handle.read()) is not None:
                self._on_output(session, handle, item[0], item[1])
        session.output.finish()

    def _on_output(self, session: Session, handle: ProcessHandle, stream: str, data: bytes) -> None:
        text = None
        if session.terminal is not None:
            text, queries = session.terminal.feed(data)
            if queries and handle.stdin_open:
                reply = TerminalWatcher.cursor_position_response() * queries
                asyncio.get_running_loop().create_task(self._quiet_write(handle, reply))
        session.output.feed(stream, data, text)
        session.activity.set()

    @staticmethod
    async def _quiet_write(handle: ProcessHandle, data: bytes) -> None:
        with contextlib.suppress(OSError):
            await handle.write(data)

    async def _await_eof(self, session: Session, handle: ProcessHandle, pump: asyncio.Task[None]) -> None:
        """Read to EOF after the main process exited (#58146), but never wait on strays forever (#147304)."""
        loop = asyncio.get_running_loop()
        if session.kill_task is not None and not session.kill_task.done():
            # A kill in progress signals the whole tree; give it its grace before judging strays.
            await asyncio.wait({pump, session.kill_task}, return_when=asyncio.FIRST_COMPLETED)
            if not pump.done():
                await asyncio.wait(
                    {pump, session.kill_task},
                    return_when=asyncio.ALL_COMPLETED,
                    timeout=self.kill_grace_sec + 1,
                )
        deadline = loop.time() + EOF_MAX_SEC
        seen = session.output.offset
        while True:
            if pump.done():
                return
            await asyncio.wait({pump}, timeout=EOF_IDLE_SEC)
            if pump.done():
                return
            if session.output.offset == seen or loop.time() >= deadline:
                break
            seen = session.output.offset
        holders = await asyncio.to_thread(handle.stdio_holders)
        session.stray = [h.to_dict() for h in holders]
        handle.close()
        await pump
        session.kill_task = loop.create_task(handle.terminate(self.kill_grace_sec))

    def _on_timeout(self, session: Session) -> None:
        if session.exited:
            return
        session.timed_out = True
        self._request_kill(session)

    def _request_kill(self, session: Session) -> bool:
        handle = session.handle
        if handle is None:
            return False
        session.killed = True
        if session.kill_task is None or session.kill_task.done():
            session.kill_task = asyncio.get_running_loop().create_task(handle.terminate(self.kill_grace_sec))
        return True

    def _record_exit(
        self, session: Session, handle: ProcessHandle, code: int | None, sig: str | None
    ) -> None:
        session.exit_code, session.exit_signal = code, sig
        reason = getattr(handle, "end_reason", None)  # e.g. the session host died with the command
        if isinstance(reason, str) and code is None and sig is None and session.error is None:
            session.error = reason
        session.exited = True
        # The session host knows when its command really ended (maybe while no gateway ran).
        ended_at = getattr(handle, "ended_at", None)
        session.ended_at = ended_at if isinstance(ended_at, int) else now_ms()
        collected = getattr(handle, "collected", None)
        if collected is not None and session.backgrounded:  # reported once, even across restarts
            collected({"killed": session.killed, "timedOut": session.timed_out})
        handle.close()
        session.output.close()
        session.output.end()
        if session.backgrounded:
            self._notify_exit(session)
        elif session.output.truncated:
            session.retained = True  # the result's marker points at `process log`; keep it pageable
        elif self.registry.get(session.id) is session:
            self.registry.drop(session.id)
        session.done.set()
        session.activity.set()
        if self.on_exit is not None:
            try:
                self.on_exit(session)
            except Exception:  # a failed record must not break the session or its viewers
                log.exception("exit hook failed for %s", session.id)
        self._emit(EventName.SESSION_EXITED, session)
        if session.listed:  # kept for list/poll/log: on disk once its waiters had their result
            asyncio.get_running_loop().call_later(SETTLE_AFTER_SEC, self._settle, session)

    def _settle(self, session: Session) -> None:
        """A finished session kept for `cleanupMs`: its output lives on disk from now on (its log; read
        back by poll and log), and memory keeps a summary: retention costs disk, not memory (issue 37)."""
        if self.registry.get(session.id) is not session or self._closing:
            return
        if session.output.settle():
            compact(session)

    def _notify_exit(self, session: Session) -> None:
        spec = session.spec
        key = (spec.session_key or spec.scope_key or "").strip()
        if not spec.notify_on_exit or session.notified or not key:
            return
        session.notified = True
        status = session.status
        output = _compact(session.output.tail(NOTIFY_TAIL_CHARS))
        if status == "completed" and not output and not spec.notify_on_exit_empty_success:
            return
        summary = f"Exec {status} ({session.id}, {session.exit_label})"
        self.events.enqueue(key, f"{summary} :: {output}" if output else summary)

    def _on_drop(self, session: Session) -> None:
        if not session.exited:
            self._request_kill(session)
        forget = getattr(session.handle, "forget", None)
        if forget is not None and not self._closing:  # a held session's files go with its row
            forget()
        session.output.close(delete=True)
        session.output.end()

    # -- results ----------------------------------------------------------------------------------
    def stray_note(self, session: Session) -> str:
        if not session.stray:
            return ""
        who = ", ".join(f"pid {p['pid']} ({p['comm']})" for p in session.stray)
        return (
            f"\n\n[the main process exited but {len(session.stray)} process(es) still held its output: "
            f"{who}; they were terminated]"
        )

    def _running_result(self, session: Session) -> ToolResult:
        pid = session.pid if session.pid is not None else "n/a"
        text = _warning_prefix(session.spec.warnings) + (
            f"Command still running (session {session.id}, pid {pid}). {RUNNING_HINT}"
        )
        return ToolResult(
            text,
            {
                "status": "running",
                "sessionId": session.id,
                "pid": session.pid,
                "startedAt": session.started_at,
                "cwd": session.cwd,
                "tail": session.output.tail(),
            },
        )

    def _finished_result(self, session: Session) -> ToolResult:
        aggregated = session.output.aggregated().strip()
        duration = max(0, (session.ended_at or now_ms()) - session.started_at)
        failure = session.failure
        prefix = _warning_prefix(session.spec.warnings)
        details: dict[str, Any] = {"durationMs": duration, "cwd": session.cwd}
        streams = session.output.streams()
        if streams is not None:  # asked for (a node's system.run): stdout and stderr apart too
            details["stdout"], details["stderr"], details["streamsTruncated"] = streams
        if failure is None:
            code = session.exit_code or 0
            if code != 0:
                exit_msg = f"(Command exited with code {code})"
                aggregated = f"{aggregated}\n\n{exit_msg}" if aggregated else exit_msg
            text = prefix + (aggregated or "(no output)") + self.stray_note(session)
            details.update(status="completed", exitCode=code, aggregated=aggregated)
        else:
            text = (
                prefix + (f"{aggregated}\n\n{failure}" if aggregated else failure) + self.stray_note(session)
            )
            details.update(
                status="failed", exitCode=session.exit_code, aggregated=aggregated, timedOut=session.timed_out
            )
        if session.exit_signal is not None:
            details["exitSignal"] = session.exit_signal
        if session.retained:
            details["sessionId"] = session.id
        if session.stray:
            details["strayProcesses"] = list(session.stray)
        return ToolResult(text, details)

    # -- process tool and operator API ------------------------------------------------------------
    async def process(
        self, action: str, params: dict[str, Any], scope_key: str | None, *, operator: bool = False
    ) -> ToolResult:
        """The `process` tool (reference §2.3). scope_key None = operator, sees every scope; `operator`:
        the operator acting within one scope (it may type where the agent may not)."""
        return await run_action(self, action, params, scope_key, operator=operator)

    def list_sessions(self, scope_key: str | None = None) -> list[dict[str, Any]]:
        """Listed sessions of one scope, newest first; None = operator view (also foreground runs)."""
        return [s.to_dict() for s in self.listed_sessions(scope_key)]

    def listed_sessions(self, scope_key: str | None = None) -> list[Session]:
        """What list_sessions shows, as sessions (a page builds only its own rows' views)."""
        if scope_key is None:
            return [s for s in self.registry.ordered() if s.listed or not s.exited]
        return [s for s in self.registry.ordered(scope_key) if s.listed]

    def adopting(self, session_id: str) -> bool:
        """A kept session of this id is still to be adopted: the id is taken."""
        adoption = self.adoption
        return adoption is not None and adoption.waiting(session_id)

    async def ready(self, session_id: str | None = None) -> None:
        """Before a request reads sessions while kept ones are still being adopted: this one adopted
        now (or its batch waited for); None: every one of them."""
        adoption = self.adoption
        if adoption is None or adoption.done.is_set():
            return
        if session_id is None:
            await adoption.done.wait()
        elif adoption.waiting(session_id):
            await adoption.wait_for(session_id)

    def new_id(self) -> str:
        """A free session id, for a caller that must name the session before it starts."""
        return self.registry.new_id()

    def get(self, session_id: str, scope_key: str | None = None) -> Session | None:
        return self.registry.get(session_id, scope_key)

    def subscribe(self, session_id: str, *, replay: bool = True) -> OutputSubscription:
        """A viewer's own bounded queue of raw output (replaying recent bytes first). KeyError if unknown."""
        session = self.registry.get(session_id)
        if session is None:
            raise NotFound(f"No session found for {session_id}")
        viewer = session.output.subscribe(replay=replay)
        if session.exited:  # (a held one this gateway let go ended for it too)
            viewer.end()
        return viewer

    async def read_output(
        self, session_id: str, *, offset: int | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """Raw output by byte offset for a pane (`sessions.output`): the text of `[offset, nextOffset)`."""
        session = self.registry.get(session_id)
        if session is None:
            raise NotFound(f"No session found for {session_id}")
        got = await session.output.read_async(offset, limit)  # settled: a ranged read, off the loop
        return {
            "sessionId": session_id,
            "offset": got.offset,
            "nextOffset": got.next_offset,
            "data": got.text,
            "dropped": got.dropped,
            "pty": session.pty,
            "status": session.status,
        }

    def resize(self, session_id: str, cols: int, rows: int, scope_key: str | None = None) -> bool:
        session = self.registry.get(session_id, scope_key)
        if session is None or session.handle is None or session.exited or not session.pty:
            return False
        session.handle.resize(max(1, int(cols)), max(1, int(rows)))
        return True

    def request_kill(self, session: Session) -> bool:
        return self._request_kill(session)

    async def close(self, *, keep_held: bool = False) -> None:
        """Kill every running command (SIGTERM, grace, SIGKILL) and forget every session. `keep_held`:
        sessions the session host holds keep running, for the next gateway to adopt."""
        self._closing = True
        self.registry.stop()
        if keep_held:
            for session in [s for s in self.registry if not s.exited]:
                detach = getattr(session.handle, "detach", None)
                if detach is not None:
                    detach()
                    session.exited = True  # to this gateway: its supervisor stops below
        for task in list(self._supervisors) if keep_held else ():
            task.cancel()
        running = [s for s in self.registry if not s.exited and s.handle is not None]
        local = [s for s in running if isinstance(s.handle, LocalProcess) and s.pid is not None]
        if local:
            # One /proc scan for all local sessions instead of one per session.
            await procs.kill_all(
                [s.pid for s in local if s.pid], [s.spec.marker for s in local], self.kill_grace_sec
            )
        for session in running:
            if session not in local:
                self._request_kill(session)
        if self._supervisors:
            await asyncio.wait(set(self._supervisors), timeout=self.kill_grace_sec + EOF_MAX_SEC + 2)
        kills = [s.kill_task for s in self.registry if s.kill_task is not None and not s.kill_task.done()]
        if kills:
            await asyncio.wait(kills, timeout=self.kill_grace_sec + 1)
        for session in self.registry:
            self.registry.drop(session.id)


class EndedHandle:
    """What a settled session keeps of its process handle: how to forget its files (a held session's)."""

    __slots__ = ("forget", "pty")
    pid = None
    live = False
    stdin_open = False

    def __init__(self, forget: Callable[[], None] | None, pty: bool) -> None:
        self.forget = forget
        self.pty = pty

    def close(self) -> None:
        pass


# Every settled session's `done` and `activity`: set for good (one Event instead of two per session).
ENDED = asyncio.Event()
ENDED.set()


def compact(session: Session) -> None:
    """A settled session's summary: what lists, poll and log need (its output is on disk), ~15 → ~5 KB.
    Its env, decoders, terminal model, events and process handle go."""
    session.output.compact()
    session.terminal = None
    session.done = session.activity = ENDED
    handle = session.handle
    if type(handle) is LocalProcess:
        session.handle = cast(ProcessHandle, EndedHandle(None, handle.pty))
    elif isinstance(handle, HostProcess) and type(handle).forget is HostProcess.forget:
        session.handle = cast(ProcessHandle, EndedHandle(handle.forgetter(), handle.pty))
    if session.spec.env is not None or session.spec.launcher is not None:
        session.spec = dataclasses.replace(session.spec, env=None, launcher=None, pass_fds=())
