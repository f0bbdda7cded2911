"""The `process` tool's actions and their exact texts (reference §2.3)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from engine.results import ToolError, ToolResult
from engine.sessions.keys import encode_key_token, encode_keys, encode_paste, needs_cursor_mode
from engine.sessions.registry import Registry, Session, now_ms, truncate_middle


class SessionManager(Protocol):
    """What the actions need of the session manager (engine.sessions.manager owns them and calls in;
    this module never imports it, so the dependency runs one way)."""

    registry: Registry

    def get(self, session_id: str, scope_key: str | None = None) -> Session | None: ...
    def list_sessions(self, scope_key: str | None = None) -> list[dict[str, Any]]: ...
    def listed_sessions(self, scope_key: str | None = None) -> list[Session]: ...
    def request_kill(self, session: Session) -> bool: ...
    def stray_note(self, session: Session) -> str: ...


MAX_POLL_WAIT_MS = 120_000
LOG_TAIL_LINES = 200
RETRY_STEPS_MS = (5_000, 10_000, 30_000, 60_000)
MAX_KEY_DELAY_MS = 10_000
KILL_WAIT_SEC = 5.0  # how long `kill` waits to report the exit (SIGKILL follows SIGTERM sooner)
ACTIONS = ("list", "poll", "log", "write", "send-keys", "submit", "paste", "kill", "clear", "remove")


def _fail(text: str, **details: Any) -> ToolResult:
    return ToolResult(text, {"status": "failed", **details})


def format_duration(ms: int) -> str:
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds}s" if seconds else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m" if minutes else f"{hours}h"


_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}")


def _int_param(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    # ASCII digits only: str.isdigit() also says yes to '²' and a second sign, which int() refuses
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _str_list(value: Any) -> list[str]:
    """A list of tokens; a bare string is one token (iterating it would send its letters as keys)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return [str(value)]


def _exit_line(session: Session) -> str:
    return f"\n\nProcess exited with {session.exit_label}."


async def run_action(
    manager: SessionManager, action: str, params: dict[str, Any], scope: str | None, *, operator: bool = False
) -> ToolResult:
    name = str(action or "").strip().lower()
    if name == "list":
        return _list(manager, scope, params)
    handler = HANDLERS.get(name)
    if handler is None:
        return _fail(f"Unknown action {action}")
    session_id = str(params.get("sessionId") or "").strip()
    if not session_id:
        return _fail("sessionId is required for this action.")
    session = manager.get(session_id, scope)
    if session is not None and not session.exited and not session.backgrounded and name != "clear":
        # The operator's list shows foreground runs too: it may read and stop one, never take its output.
        operator_view = scope is None or operator
        if not (operator_view and name in OPERATOR_FOREGROUND):
            return _fail(_foreground_text(session_id, operator_view=operator_view))
    refused = session.spec.input_refused if session is not None else ""
    # The operator may always type (scope None, or its console acting in one scope); the agent may not.
    if name in INPUT_ACTIONS and scope is not None and not operator and refused:
        return _fail(f"Session {session_id} takes no input from the agent: {refused}.")
    return await handler(manager, name, session, session_id, params)


INPUT_ACTIONS = frozenset({"write", "send-keys", "submit", "paste"})
OPERATOR_FOREGROUND = frozenset({"log", "kill"})


def _foreground_text(session_id: str, *, operator_view: bool) -> str:
    text = f"Session {session_id} is not backgrounded."  # the agent's text is OpenClaw's, exactly
    if operator_view:
        text += (
            " It runs in the foreground and its agent is waiting for it: process log reads its output,"
            " process kill stops it."
        )
    return text


async def _kill(manager: SessionManager, name: str, session: Any, session_id: str, params: Any) -> ToolResult:
    if session is None or session.exited:
        return _fail(f"No active session found for {session_id}")
    if not manager.request_kill(session):
        return _fail(f"Unable to terminate session {session_id}: no active supervisor run or process id.")
    # The status says what is true when we answer: a process that ignores SIGTERM for a while is
    # still running (the kill escalates); `completed` only once it has gone.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(session.done.wait()), KILL_WAIT_SEC)
    gone = session.done.is_set()
    return ToolResult(
        f"Termination requested for session {session_id}."
        + ("" if gone else " It is still running; poll to see it exit."),
        {
            "status": "completed" if gone else "running",
            "sessionId": session_id,
            "name": session.name,
            "terminationRequested": True,
        },
    )


async def _clear(
    manager: SessionManager, name: str, session: Any, session_id: str, params: Any
) -> ToolResult:
    if session is None or not session.exited or not session.listed:
        return _fail(f"No finished session found for {session_id}")
    manager.registry.drop(session_id)
    return ToolResult(f"Cleared session {session_id}.", {"status": "completed"})


async def _remove(
    manager: SessionManager, name: str, session: Any, session_id: str, params: Any
) -> ToolResult:
    if session is None or (session.exited and not session.listed):
        return _fail(f"No session found for {session_id}", error="not-found")
    if not session.exited:
        manager.request_kill(session)
        session.backgrounded = False  # dropped now: no exit notice for a session the agent removed
        manager.registry.drop(session_id)
        return ToolResult(
            f"Removed session {session_id} (termination requested).",
            {"status": "completed", "name": session.name},
        )
    manager.registry.drop(session_id)
    return ToolResult(f"Removed session {session_id}.", {"status": "completed"})


# One `list` answer stays well under the 1 MiB frame cap however many sessions there are (issue 19: it
# failed at ~2,700): rows are added until their views and lines reach this, and `next` continues.
LIST_PAGE_BYTES = 384 * 1024
LIST_PAGE_ROWS = 200  # and a page's cost stays flat in the session count (a view costs ~10-30 µs)


def _list_cursor(session: Session, shown: int) -> str:
    return f"{session.started_at}:{session.id}:{shown}"


def _parse_cursor(cursor: object) -> tuple[tuple[int, str] | None, int]:
    """(the list key the page starts after, rows shown before it); a bad cursor starts at the top."""
    if not isinstance(cursor, str) or not cursor:
        return None, 0
    started, _, rest = cursor.partition(":")
    sid, _, shown = rest.partition(":")
    try:
        return (-int(started), sid), int(shown) if shown else 0
    except ValueError:
        return None, 0


def _list(manager: SessionManager, scope: str | None, params: dict[str, Any] | None = None) -> ToolResult:
    """One page, newest first, walked from the registry's ordered index: its cost is its own rows',
    whatever the number of finished sessions retained."""
    after, before = _parse_cursor((params or {}).get("cursor"))
    total = manager.registry.listed_count(scope)
    sessions: list[dict[str, Any]] = []
    lines: list[str] = []
    size = 0
    last: Session | None = None
    more = False
    for session in manager.registry.ordered(scope, after):
        if not (session.listed if scope is not None else session.listed or not session.exited):
            continue
        s = session.to_dict()
        label = truncate_middle(s["name"], 80) if s["name"] else truncate_middle(s["command"], 120)
        line = f"{s['sessionId']} {s['status']:<9} {format_duration(s['runtimeMs'])} :: {label}"
        size += len(json.dumps(s, ensure_ascii=False)) + 2 * len(line.encode())  # the line, and escaped
        if sessions and (size > LIST_PAGE_BYTES or len(sessions) >= LIST_PAGE_ROWS):
            more = True
            break
        sessions.append(s)
        lines.append(line)
        last = session
    details: dict[str, Any] = {"status": "completed", "sessions": sessions}
    if more and last is not None:
        shown = before + len(sessions)
        details["next"] = _list_cursor(last, shown)
        details["total"] = total
        lines.append(f"({max(1, total - shown)} more sessions: process list with cursor={details['next']})")
    return ToolResult("\n".join(lines) or "No running or recent sessions.", details)


async def _poll(
    manager: SessionManager, session: Session | None, sid: str, params: dict[str, Any]
) -> ToolResult:
    if session is None or (session.exited and not session.listed):
        return _fail(f"No session found for {sid}", error="not-found")
    wait_ms = max(0, min(MAX_POLL_WAIT_MS, _int_param(params.get("timeout")) or 0))
    if wait_ms and not session.exited and not session.output.has_pending():
        # Wakes on new output or exit: an interactive prompt reaches the agent before the timeout.
        session.activity.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.activity.wait(), wait_ms / 1000)
        if session.exited and not session.done.is_set():
            await session.done.wait()
    stdout, stderr, dropped = session.output.drain()
    output = "\n".join(part for part in (stdout.rstrip(), stderr.rstrip()) if part).strip()
    if dropped:
        output = (
            f"[{dropped} chars of output overflowed the poll buffer; use process log to read them]\n{output}"
        )
    details: dict[str, Any] = {
        "status": session.status,
        "sessionId": sid,
        "exitCode": session.exit_code,
        "aggregated": await session.output.off_loop(session.output.aggregated),
        "name": session.name,
    }
    if session.exited:
        session.empty_polls = 0
        if not output:
            output = session.output.tail().strip() if session.output.total_chars else "(no output recorded)"
        if session.exit_signal is not None:
            details["exitSignal"] = session.exit_signal
        if session.timed_out:
            details["timedOut"] = True
        return ToolResult(output + manager.stray_note(session) + _exit_line(session), details)
    if output:
        session.empty_polls = 0
        retry = RETRY_STEPS_MS[0]
    else:
        session.empty_polls += 1
        retry = RETRY_STEPS_MS[min(session.empty_polls, len(RETRY_STEPS_MS)) - 1]
    details["retryInMs"] = retry
    return ToolResult((output or "(no new output)") + "\n\nProcess still running.", details)


async def _log(session: Session | None, sid: str, params: dict[str, Any]) -> ToolResult:
    if session is None or (session.exited and not session.listed):
        return _fail(f"No session found for {sid}", error="not-found")
    offset, limit = _int_param(params.get("offset")), _int_param(params.get("limit"))
    output = session.output

    def read() -> tuple[str, int, int, bool]:
        # Counts too: an adopted session's are read from its spool on first use, here off the loop.
        body, total = output.log_lines(offset, limit, LOG_TAIL_LINES)
        return body, total, output.total_chars, output.truncated

    body, total, total_chars, truncated = await output.off_loop(read)
    empty = "(no output recorded)" if session.exited else "(no output yet)"
    note = ""
    if offset is None and limit is None and total > LOG_TAIL_LINES:
        note = f"\n\n[showing last {LOG_TAIL_LINES} of {total} lines; pass offset/limit to page]"
    return ToolResult(
        (body or empty) + note,
        {
            "status": session.status,
            "sessionId": sid,
            "name": session.name,
            "total": total,
            "totalLines": total,
            "totalChars": total_chars,
            "truncated": truncated,
            "exitCode": session.exit_code,
            "exitSignal": session.exit_signal,
        },
    )


async def _input(
    manager: SessionManager, name: str, session: Session | None, sid: str, params: dict[str, Any]
) -> ToolResult:
    if session is None or session.exited:
        return _fail(f"No active session found for {sid}")
    raw = session.handle
    if raw is None or not session.stdin_writable:
        return _fail(f"Session {sid} stdin is not writable.")
    running = {"status": "running", "sessionId": sid, "name": session.name}
    handle = _Budgeted(manager, session)
    try:
        if name == "write":
            data = str(params.get("data") or "").encode("utf-8")
            if data:
                await handle.write(data)
            eof = bool(params.get("eof"))
            if eof:
                await raw.close_stdin()
            return ToolResult(
                f"Wrote {len(data)} bytes to session {sid}{' (stdin closed)' if eof else ''}.", running
            )
        if name == "submit":
            await handle.write(b"\r")
            return ToolResult(f"Submitted session {sid} (sent CR).", running)
        if name == "paste":
            text = str(params.get("text") or "")
            if not text:
                return _fail("No paste text provided.")
            await handle.write(encode_paste(text, params.get("bracketed") is not False).encode("utf-8"))
            return ToolResult(f"Pasted {len(text)} chars to session {sid}.", running)
        return await _send_keys(handle, session, sid, params, running)
    except OSError:
        return _fail(f"Session {sid} stdin is not writable.")
    except ToolError as exc:  # the agent's unread input is at its budget: nothing of this write was sent
        return _fail(str(exc), sessionId=sid)


class _Budgeted:
    """A session's stdin, each write charged first to its agent's budget of unread input
    (engine.sessions.quota): a write that does not fit is refused whole, never reported as written."""

    def __init__(self, manager: SessionManager, session: Session) -> None:
        self.manager, self.session = manager, session

    async def write(self, data: bytes) -> None:
        quota = getattr(self.manager, "quota", None)
        if quota is not None:
            quota.charge_input(self.session, len(data), self.manager.registry)
        assert self.session.handle is not None
        await self.session.handle.write(data)


async def _send_keys(
    handle: _Budgeted, session: Session, sid: str, params: dict[str, Any], running: dict[str, Any]
) -> ToolResult:
    keys = _str_list(params.get("keys"))
    hex_bytes = _str_list(params.get("hex"))
    literal = params.get("literal")
    mode = session.cursor_key_mode
    if mode == "unknown" and needs_cursor_mode(keys):
        return _fail(
            f"Session {sid} cursor key mode is not known yet. "
            "Poll or log until startup output appears, then retry send-keys."
        )
    delay_ms = max(0, min(MAX_KEY_DELAY_MS, _int_param(params.get("delayMs")) or 0))
    if delay_ms and len(keys) > 1:
        # One write per key with a pause: TUIs that read keys in a loop can miss a burst (PR #20798).
        head = encode_keys(hex_bytes=hex_bytes, literal=str(literal) if literal else None, cursor_mode=mode)
        warnings, sent = list(head.warnings), 0
        if head.data:
            await handle.write(head.data)
            sent += len(head.data)
        for index, key in enumerate(keys):
            if index:
                await asyncio.sleep(delay_ms / 1000)
            encoded = encode_key_token(key, session.cursor_key_mode if mode != "unknown" else mode)
            warnings.extend(encoded.warnings)
            if encoded.data:
                await handle.write(encoded.data)
                sent += len(encoded.data)
    else:
        encoded = encode_keys(
            keys=keys, hex_bytes=hex_bytes, literal=str(literal) if literal else None, cursor_mode=mode
        )
        warnings, sent = encoded.warnings, len(encoded.data)
        if encoded.data:
            await handle.write(encoded.data)
    if not sent and not warnings:
        return _fail("No key data provided.")
    text = f"Sent {sent} bytes to session {sid}."
    if warnings:
        text += "\n" + "\n".join(warnings)
    return ToolResult(text, running)


__all__ = ["ACTIONS", "format_duration", "now_ms", "run_action"]


# Every action but `list` (which needs no session): (manager, action, session or None, its id, params).
ActionHandler = Callable[[SessionManager, str, Any, str, dict[str, Any]], Awaitable[ToolResult]]
HANDLERS: dict[str, ActionHandler] = {
    "poll": lambda manager, _name, session, sid, params: _poll(manager, session, sid, params),
    "log": lambda _manager, _name, session, sid, params: _log(session, sid, params),
    "write": lambda manager, name, session, sid, params: _input(manager, name, session, sid, params),
    "send-keys": lambda manager, name, session, sid, params: _input(manager, name, session, sid, params),
    "submit": lambda manager, name, session, sid, params: _input(manager, name, session, sid, params),
    "paste": lambda manager, name, session, sid, params: _input(manager, name, session, sid, params),
    "kill": _kill,
    "clear": _clear,
    "remove": _remove,
}
