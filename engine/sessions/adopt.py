"""A new gateway adopts the sessions the last one left under their holders (engine.sessions.holder).

Each `<state>/holders/<id>.json` is a session: re-listed under the same id and scope, its output rebuilt
from byte 0 of the holder's spool (what was written while no gateway ran included), then followed live
when its holder still runs; a session that ended meanwhile reports the exit code and time its holder wrote.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

from engine import statefs
from engine.sessions.holder import FrameSource, HeldPaths, HolderLauncher, HolderProcess
from engine.sessions.launcher import RunSpec
from engine.sessions.manager import SessionManager
from engine.sessions.output import OutputBuffer
from engine.sessions.pty import TerminalWatcher
from engine.sessions.registry import Session

log = logging.getLogger("exechost.sessions")

SESSION_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MAX_REPLAY_BYTES = 256 * 1024 * 1024


async def adopt_held(manager: SessionManager, launcher: HolderLauncher) -> list[Session]:
    adopted: list[Session] = []
    if not launcher.directory.is_dir():
        return adopted
    for meta_path in sorted(launcher.directory.glob("*.json")):
        try:
            meta = json.loads(statefs.read_text(meta_path) or "")
        except (OSError, ValueError, statefs.StateFileError) as exc:
            log.error("cannot adopt the session in %s: %s", meta_path, exc)
            continue
        sid = str(meta.get("sessionId") or "") if isinstance(meta, dict) else ""
        if not SESSION_ID.match(sid) or meta_path.stem != sid or manager.registry.get(sid) is not None:
            continue
        if launcher.never_started(sid):
            launcher.paths(sid).remove()  # a holder that died before starting its command: nothing ran
            continue
        try:
            session = await _adopt_one(manager, launcher.paths(sid), meta)
        except Exception:
            log.exception("cannot adopt session %s", sid)
            continue
        adopted.append(session)
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
    )


async def _attach(paths: HeldPaths, meta: dict[str, Any]) -> HolderProcess | None:
    try:
        reader, writer = await asyncio.open_unix_connection(str(paths.socket), limit=2 * 1024 * 1024)
    except OSError:
        return None
    writer.write(b'{"op":"attach"}\n')
    return HolderProcess(
        paths,
        FrameSource(reader),
        writer,
        pid=None,
        pty=bool(meta.get("pty")),
        marker=str(meta.get("marker")),
    )


def _replay(paths: HeldPaths, meta: dict[str, Any]) -> HolderProcess:
    """The holder is gone: its spool is the output, its exit file the end."""
    reader = asyncio.StreamReader(limit=2 * 1024 * 1024)
    try:
        with open(paths.spool, "rb") as fh:
            reader.feed_data(fh.read(MAX_REPLAY_BYTES))
    except OSError:
        pass
    reader.feed_eof()
    return HolderProcess(
        paths, FrameSource(reader), None, pid=None, pty=bool(meta.get("pty")), marker=str(meta.get("marker"))
    )


async def _adopt_one(manager: SessionManager, paths: HeldPaths, meta: dict[str, Any]) -> Session:
    spec = _spec(meta)
    handle = await _attach(paths, meta) or _replay(paths, meta)
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
    session.handle = handle
    session.pty = handle.pty
    session.output.terminal = handle.pty
    if handle.pty:
        session.terminal = TerminalWatcher()
    pid = meta.get("pid")
    session.pid = handle.pid = pid if isinstance(pid, int) and handle.live else None
    manager.supervise(session, handle)
    return session
