"""A new gateway adopts the sessions the last one left in the session hosts (engine.sessions.hosts).

Each `<state>/holders/<id>.json` (and `holders/h<k>/<id>.json`, in the hosts past the first) is a session:
re-listed under the same id and scope, its output rebuilt from byte 0 of its spool (what was written while
no gateway ran included), then followed live when the host still holds it; a session that ended meanwhile
reports the exit code and time the host wrote, and one whose host died without writing an end is reported
ended ("session host died").
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from engine import statefs
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
from engine.sessions.manager import SessionManager
from engine.sessions.output import OutputBuffer
from engine.sessions.pty import TerminalWatcher
from engine.sessions.registry import Session
from engine.unixsock import socket_is_live

log = logging.getLogger("exechost.sessions")

SESSION_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MAX_REPLAY_BYTES = 256 * 1024 * 1024
LEGACY_HOLDER = "held by an older exechost's per-session holder: still running, not adopted"


async def adopt_held(manager: SessionManager, hosts: SessionHosts | HostLauncher) -> list[Session]:
    """What every session host of the state dir holds (engine.sessions.hosts), in the registry again."""
    adopted: list[Session] = []
    for launcher in hosts.launchers() if isinstance(hosts, SessionHosts) else [hosts]:
        adopted += await _adopt_from(manager, launcher)
    return adopted


async def _adopt_from(manager: SessionManager, launcher: HostLauncher) -> list[Session]:
    adopted: list[Session] = []
    if not launcher.directory.is_dir():
        return adopted
    try:
        live = await launcher.list_live()
    except (OSError, ConnectionError) as exc:
        log.error("cannot list the session host's sessions: %s", exc)
        live = {}
    for meta_path in sorted(launcher.directory.glob("*.json")):
        try:
            meta = json.loads(statefs.read_text(meta_path) or "")
        except (OSError, ValueError, statefs.StateFileError) as exc:
            log.error("cannot adopt the session in %s: %s", meta_path, exc)
            continue
        sid = str(meta.get("sessionId") or "") if isinstance(meta, dict) else ""
        if not SESSION_ID.match(sid) or meta_path.stem != sid or manager.registry.get(sid) is not None:
            continue
        try:
            session = await _adopt_one(manager, launcher, launcher.paths(sid), meta, sid in live)
        except Exception:
            log.exception("cannot adopt session %s", sid)
            continue
        adopted.append(session)
    launcher.release_unlisted(set(live) - {s.id for s in adopted}, live)
    return adopted


def _spec(meta: dict[str, Any]) -> RunSpec:
    timeout = meta.get("timeoutSec")
    remaining: float | None = None
    if isinstance(timeout, (int, float)) and timeout > 0:
        started = float(meta.get("startedAt") or 0) / 1000
        remaining = max(0.001, started + float(timeout) - time.time())
    return RunSpec(
        command=str(meta.get("command") or ""),
        cwd=meta.get("cwd"),
        pty=bool(meta.get("pty")),
        scope_key=str(meta.get("scopeKey") or ""),
        session_key=meta.get("sessionKey"),
        host=str(meta.get("host") or "gateway"),
        name=meta.get("name"),
        timeout_sec=remaining,
        notify_on_exit=bool(meta.get("notifyOnExit", True)),
        notify_on_exit_empty_success=bool(meta.get("notifyOnExitEmptySuccess")),
        marker=str(meta.get("marker") or ""),
        background=True,
        operator=meta.get("operator") is True,
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


async def _adopt_one(
    manager: SessionManager, launcher: HostLauncher, paths: HeldPaths, meta: dict[str, Any], live: bool
) -> Session:
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
        output=OutputBuffer(
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
