"""A new gateway adopts the sessions the last one left in the session hosts (engine.sessions.hosts).

Each `<state>/holders/<id>.json` (and `holders/h<k>/<id>.json`, in the hosts past the first) is a session:
re-listed under the same id and scope, its output rebuilt from byte 0 of its spool (what was written while
no gateway ran included), then followed live when the host still holds it; a session that ended meanwhile
reports the exit code and time the host wrote, and one whose host died without writing an end is reported
ended ("session host died").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from engine import statefs
from engine.principals import key_owner, operator_key
from engine.sessions.host import (
    SPOOL_HEADER_SIZE,
    HeldFactory,
    HeldPaths,
    HostLauncher,
    HostProcess,
    end_orphans,
    stream_kind,
)
from engine.sessions.hosts import SessionHosts
from engine.sessions.launcher import RunSpec
from engine.sessions.manager import SessionManager, compact
from engine.sessions.output import SessionOutput
from engine.sessions.pty import TerminalWatcher
from engine.sessions.registry import Session, now_ms
from engine.unixsock import socket_is_live

log = logging.getLogger("exechost.sessions")

SESSION_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MAX_REPLAY_BYTES = 256 * 1024 * 1024
LEGACY_HOLDER = "held by an older exechost's per-session holder: still running, not adopted"
ADOPT_BATCH = 256  # sessions adopted concurrently: a live one costs a round trip to its host


async def adopt_held(manager: SessionManager, hosts: SessionHosts | HostLauncher) -> list[Session]:
    """What every session host of the state dir holds (engine.sessions.hosts), in the registry again."""
    adoption = Adoption(manager, hosts)
    adoption.scan()
    await adoption.run()
    return adoption.sessions


class Adoption:
    """The kept sessions, adopted in the background while the gateway already answers.

    `scan()` lists every session file (fast: names only) so the ids are known, and taken, before the
    socket opens; `run()` adopts them in batches. A request for one not yet adopted calls `wait_for`,
    which adopts it at once (or waits for the batch that has it); one for all of them waits for `done`.
    """

    def __init__(
        self, manager: SessionManager, hosts: SessionHosts | HostLauncher, ended: frozenset[str] = frozenset()
    ) -> None:
        self.manager = manager
        # Agents whose credential was revoked while no gateway ran (engine.sandbox.hostrevocations): a
        # session in any scope they own (`agent:<id>` or `agent:<id>:…`) still running is ended as it is
        # adopted, before `done`, never served on. (The operator's runs naming them are not theirs.)
        self.ended = ended
        self.launchers = hosts.launchers() if isinstance(hosts, SessionHosts) else [hosts]
        self.pending: dict[str, tuple[HostLauncher, Path]] = {}
        self.total = 0
        self.adopted = 0
        self.sessions: list[Session] = []
        self.done = asyncio.Event()
        self.started = time.monotonic()
        self.elapsed: float | None = None
        self._live: dict[int, dict[str, dict[str, Any]]] = {}  # per launcher (by index)
        self._live_ready: dict[int, asyncio.Future[None]] = {}
        self._busy: dict[str, asyncio.Future[None]] = {}

    def scan(self) -> None:
        for k, launcher in enumerate(self.launchers):
            self._live_ready[k] = asyncio.get_running_loop().create_future()
            try:
                entries = os.scandir(launcher.directory)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    sid = entry.name[:-5] if entry.name.endswith(".json") else ""
                    if SESSION_ID.match(sid) and sid not in self.pending and self.manager.get(sid) is None:
                        self.pending[sid] = (launcher, Path(entry.path))
        self.total = len(self.pending)
        self.manager.adoption = self

    def status(self) -> dict[str, Any]:
        elapsed = self.elapsed if self.elapsed is not None else time.monotonic() - self.started
        return {
            "adopted": self.adopted,
            "total": self.total,
            "done": self.done.is_set(),
            "elapsedMs": round(elapsed * 1000, 1),
        }

    def waiting(self, session_id: str) -> bool:
        """This id belongs to a kept session not adopted yet: taken, and worth waiting for."""
        return session_id in self.pending or session_id in self._busy

    async def wait_for(self, session_id: str) -> None:
        """A request names this session: adopt it now, or wait for the batch adopting it."""
        await self._adopt(session_id)

    async def run(self) -> None:
        try:
            for k, launcher in enumerate(self.launchers):
                try:
                    self._live[k] = await launcher.list_live() if launcher.directory.is_dir() else {}
                except (OSError, ConnectionError) as exc:
                    log.error("cannot list the session host's sessions: %s", exc)
                    self._live[k] = {}
                self._live_ready[k].set_result(None)
            order = sorted(self.pending)  # the order of the files' names, as before
            for i in range(0, len(order), ADOPT_BATCH):
                # Sessions that ended and were reported are listed here and now (no task, no await);
                # the others wait for their host's answer, a batch's round trips in flight at once.
                # Requests are answered between batches.
                rest = [sid for sid in order[i : i + ADOPT_BATCH] if not self._adopt_ended(sid)]
                await asyncio.gather(*(self._adopt(sid) for sid in rest))
                await asyncio.sleep(0)
            for k, launcher in enumerate(self.launchers):
                live = self._live.get(k, {})
                launcher.release_unlisted(set(live) - {s.id for s in self.sessions}, live)
        finally:
            self.elapsed = time.monotonic() - self.started
            self.done.set()

    def _adopt_ended(self, sid: str) -> bool:
        """Adopt `sid` at once if it ended and was reported (its host no longer holds it, its exit and
        done files are there); False: it needs the full path (`_adopt`)."""
        entry = self.pending.get(sid)
        if entry is None:
            return True  # adopted already, on a request's demand (or being adopted: `_adopt` waits)
        launcher, meta_path = entry
        k = self.launchers.index(launcher)
        if sid in self._live.get(k, {}):
            return False
        base = f"{launcher.directory}/{sid}"
        end, done = _read_small(base + ".exit"), _read_small(base + ".done")
        if end is None or done is None:
            return False
        meta = _read_small(str(meta_path))
        if meta is None or meta.get("sessionId") != sid or launcher.held_factory(meta) is not None:
            return False
        del self.pending[sid]
        self.adopted += 1
        if self.manager.get(sid) is None:
            self.sessions.append(_adopt_ended(self.manager, launcher.paths(sid), meta, end, done))
        return True

    async def _adopt(self, sid: str) -> None:
        if sid not in self.pending:  # adopted, or being adopted, on a request's demand
            busy = self._busy.get(sid)
            if busy is not None:
                await asyncio.shield(busy)
            return
        self._busy[sid] = asyncio.get_running_loop().create_future()
        await self._adopt_now(sid)

    async def _adopt_now(self, sid: str) -> None:
        launcher, meta_path = self.pending.pop(sid)
        k = self.launchers.index(launcher)
        try:
            await asyncio.shield(self._live_ready[k])
            meta = json.loads(statefs.read_text(meta_path) or "")
            if not isinstance(meta, dict) or str(meta.get("sessionId") or "") != sid:
                raise ValueError("not this session's file")
            if self.manager.get(sid) is None:
                live = sid in self._live.get(k, {})
                session = await _adopt_one(self.manager, launcher, launcher.paths(sid), meta, live)
                self.sessions.append(session)
                ended = key_owner(session.scope_key) in self.ended and not session.exited
                if ended and self.manager.request_kill(session):
                    await session.done.wait()
        except (OSError, ValueError, statefs.StateFileError) as exc:
            log.error("cannot adopt the session in %s: %s", meta_path, exc)
        except Exception:
            log.exception("cannot adopt session %s", sid)
        finally:
            self.adopted += 1  # handled (a file that could not be adopted is logged and counted too)
            fut = self._busy.pop(sid, None)
            if fut is not None and not fut.done():
                fut.set_result(None)


def _read_small(path: str) -> dict[str, Any] | None:
    """A session file, read the short way (O_NOFOLLOW refuses a symlink; the holders dir is 0700 and
    ours): a restart reads three per session, 30,000 at 10,000 sessions."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = json.loads(os.read(fd, 1 << 20))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


def _spec(meta: dict[str, Any]) -> RunSpec:
    timeout = meta.get("timeoutSec")
    remaining: float | None = None
    if isinstance(timeout, (int, float)) and timeout > 0:
        started = float(meta.get("startedAt") or 0) / 1000
        remaining = max(0.001, started + float(timeout) - time.time())
    scope = str(meta.get("scopeKey") or "")
    return RunSpec(
        command=str(meta.get("command") or ""),
        cwd=meta.get("cwd"),
        pty=bool(meta.get("pty")),
        # The operator's run stays the operator's: one a gateway before this filed under the agent it named
        # is moved out of that agent's scope as it is adopted (principals.operator_key is idempotent).
        scope_key=operator_key(scope) if meta.get("operator") is True else scope,
        session_key=None if meta.get("operator") is True else meta.get("sessionKey"),
        host=str(meta.get("host") or "gateway"),
        name=meta.get("name"),
        timeout_sec=remaining,
        notify_on_exit=bool(meta.get("notifyOnExit", True)),
        notify_on_exit_empty_success=bool(meta.get("notifyOnExitEmptySuccess")),
        marker=str(meta.get("marker") or ""),
        background=True,
        operator=meta.get("operator") is True,
        # A restart keeps the refusal; a row from before it knew none is refused too (closed by default).
        input_refused=str(meta.get("inputRefused", "its decision is not known")),
        input_refused_unless_full=str(meta.get("inputRefusedUnlessFull", "its decision is not known")),
    )


def _replay(paths: HeldPaths, meta: dict[str, Any], held: HeldFactory | None = None) -> HostProcess:
    """The host no longer holds it: its spool is the output, its exit file the end."""
    if held is not None:
        handle = held(paths, None, 0, meta)
    else:
        handle = HostProcess(
            paths, None, 0, pid=None, pty=bool(meta.get("pty")), marker=str(meta.get("marker"))
        )
    try:
        with open(paths.spool, "rb") as fh:
            data = fh.read(MAX_REPLAY_BYTES)
    except OSError:
        data = b""
    pos = 0
    while pos + SPOOL_HEADER_SIZE <= len(data):
        stream, size = data[pos], int.from_bytes(data[pos + 1 : pos + SPOOL_HEADER_SIZE], "big")
        end = pos + SPOOL_HEADER_SIZE + size
        if end > len(data):
            break
        handle.on_output(stream_kind(stream), data[pos + SPOOL_HEADER_SIZE : end])
        pos = end
    legacy = paths.directory / f"{paths.session_id}.sock"
    if paths.read_exit() is None and legacy.exists() and socket_is_live(legacy):
        # Held by a per-session holder of an exechost before the session host: it still runs, and this
        # gateway cannot speak to it. Listed as ended, never killed.
        handle.on_lost()
        handle.end_reason = LEGACY_HOLDER
        return handle
    if paths.read_exit() is None and paths.read_done() is None:
        end_orphans(str(meta.get("marker") or ""))
    handle.on_lost()
    return handle


def _adopt_ended(
    manager: SessionManager, paths: HeldPaths, meta: dict[str, Any], end: dict[str, Any], done: dict[str, Any]
) -> Session:
    """A session that ended and was reported before this gateway: listed as it was, its output left in
    the spool until someone reads it (no replay, no supervisor: the bulk of what a restart adopts)."""
    sid = paths.session_id
    spec = _spec(meta)
    handle = HostProcess(paths, None, 0, pid=None, pty=bool(meta.get("pty")), marker=spec.marker)
    handle.recorded = True  # for forget(): its files go with its row
    output = SessionOutput(manager.log_dir / f"{sid}.log", session_id=sid, terminal=handle.pty)
    output.settle_spool(paths.spool)
    code, sig, ended = end.get("code"), end.get("signal"), end.get("endedAt")
    session = Session(
        id=sid,
        spec=spec,
        cwd=str(spec.cwd or ""),
        output=output,
        handle=handle,
        pty=handle.pty,
        started_at=int(meta.get("startedAt") or 0),
        ended_at=ended if isinstance(ended, int) else now_ms(),
        backgrounded=True,
        exited=True,
        exit_code=code if isinstance(code, int) else None,
        exit_signal=sig if isinstance(sig, str) else None,
        killed=bool(done.get("killed")),
        timed_out=bool(done.get("timedOut")),
        notified=True,
    )
    session.output.end()
    compact(session)
    manager.registry.add(session)
    if manager.quota is not None:  # a kept session counts against its agent's caps, ended or not
        manager.quota.admit(session)
    return session


async def _adopt_one(
    manager: SessionManager, launcher: HostLauncher, paths: HeldPaths, meta: dict[str, Any], live: bool
) -> Session:
    if not live and launcher.held_factory(meta) is None:
        end, done = paths.read_exit(), paths.read_done()
        if end is not None and done is not None:
            return _adopt_ended(manager, paths, meta, end, done)
    spec = _spec(meta)
    handle = None
    if live:
        handle = await launcher.attach(
            paths, pty=bool(meta.get("pty")), marker=str(meta.get("marker")), meta=meta
        )
    if handle is None:
        handle = _replay(paths, meta, launcher.held_factory(meta))
    sid = paths.session_id
    session = Session(
        id=sid,
        spec=spec,
        cwd=str(spec.cwd or ""),
        output=SessionOutput(
            manager.log_dir / f"{sid}.log",
            log_cap=manager.log_cap_bytes,
            session_id=sid,
            split_chars=manager.split_stream_chars,
        ),
        started_at=int(meta.get("startedAt") or 0),
        backgrounded=True,
    )
    done = paths.read_done()
    if done is not None:  # reported by the last gateway: listed again, not announced again
        handle.recorded = True
        session.notified = True
        session.killed = bool(done.get("killed"))
        session.timed_out = bool(done.get("timedOut"))
    manager.registry.add(session)
    if manager.quota is not None:  # counted against its agent again (engine.sessions.quota)
        manager.quota.admit(session)
    session.handle = handle
    session.pty = handle.pty
    session.output.terminal = handle.pty
    if handle.pty:
        session.terminal = TerminalWatcher()
    pid = meta.get("pid")
    session.pid = handle.pid = pid if isinstance(pid, int) and handle.live else None
    manager.supervise(session, handle)
    return session
