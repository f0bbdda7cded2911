"""The sessions pane: the list (status, runtime, host, name, unread), a live view of the selected one, and
its flows (replay, page the log, act on a session, attach), each a request to the gateway."""

from __future__ import annotations

import functools
import os
import re
import shlex
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import ContentSwitcher, DataTable, Input, Static

from console.dialogs import ConfirmDialog, TextDialog
from console.gateway import GatewayLink
from console.inbox import clock_ms
from console.widgets.panes import LinePane, TerminalPane
from console.widgets.table import StableTable
from engine.display import visible
from engine.protocol.frames import RemoteError

REPLAY_BYTES = 64 * 1024
LOG_PAGE_LINES = 500
ESC_REMNANT = re.compile(r"\[[0-9;?]*[A-Za-z]")
HEADER_KEYS = ("status", "exitCode", "exitSignal", "pid", "host", "cwd", "command")
STATUS_STYLE = {"running": "bold green", "completed": "cyan", "failed": "bold red", "killed": "red"}


def fmt_runtime(row: dict[str, Any], now_ms: int | None = None) -> str:
    start = row.get("startedAtMs") or row.get("startedAt")
    if not isinstance(start, int | float):
        return "–"
    end = row.get("endedAtMs") or row.get("endedAt")
    now_ms = clock_ms() if now_ms is None else now_ms
    seconds = int(((end if isinstance(end, int | float) else now_ms) - start) / 1000)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def fmt_bytes(n: int) -> str:
    if n <= 0:
        return ""
    for unit in ("B", "K", "M"):
        if n < 1024:
            return f"{n}{unit}"
        n //= 1024
    return f"{n}G"


def session_name(row: dict[str, Any]) -> str:
    """Short and recognisable: the program's basename (paths are pinned and quoted by the engine) + args."""
    return _short_name(str(row.get("name") or row.get("command") or ""))


@functools.lru_cache(maxsize=4096)
def _short_name(raw: str) -> str:
    # Cached: the list re-renders every row each second, and shlex is the slowest part of a row.
    try:
        words = shlex.split(raw)
    except ValueError:
        words = raw.split()
    if words:
        words[0] = os.path.basename(words[0]) or words[0]
    name = visible(" ".join(words))
    return name if len(name) <= 24 else name[:23] + "…"


class SessionInput(Input):
    """The stdin line: Esc leaves it (the footer says so while it has focus)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "leave", "Leave input")]

    def action_leave(self) -> None:
        self.screen.query_one("#session-list").focus()


class SessionsPane(Horizontal):
    """Actions are posted up as `Act(verb, session)` so the app does the gateway round trip in a worker."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("i", "focus_input", "Input"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("s", "act('send-keys')", "Send keys"),
        Binding("p", "act('paste')", "Paste"),
        Binding("u", "act('submit')", "Submit ⏎"),
        Binding("k", "act('kill')", "Kill"),
        Binding("x", "act('clear')", "Clear"),
        Binding("delete", "act('remove')", "Remove"),
        Binding("t", "act('attach')", "Attach"),
        Binding("[", "act('log-older')", "Older log"),
        Binding("]", "act('log-newer')", "Newer log"),
        Binding("f", "act('follow')", "Follow", show=False),
    ]

    def __init__(
        self, link: GatewayLink, *, state: Path | None = None, live: bool = True, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.link = link
        self.state = state  # for `attach`: the PTY proxy connects to this state dir's gateway
        self.live = live  # False: no gateway (tests of the layout alone)
        self.log_page: dict[str, int] = {}  # session id -> first line shown while paging the log
        self.replaying: str | None = None  # live output waits while this session's log is re-read
        self.read_chars: dict[str, int] = {}  # no-push fallback: totalChars already looked at
        self.seen_total: dict[str, tuple[Any, Any]] = {}  # poll fallback: log size last shown
        self.sessions: dict[str, dict[str, Any]] = {}
        self.filter = ""  # `/`: only sessions whose id, name or command contain it
        self.order: list[str] = []
        self.current: str | None = None
        self._shown: dict[str, tuple[Any, ...]] = {}  # cells last written per row: only changes are sent
        self._header_shown: Any = object()  # what the header was last drawn from (nothing yet)

    def compose(self) -> ComposeResult:
        table = StableTable(id="session-list", cursor_type="row", zebra_stripes=True)
        table.add_columns("status", "id", "name", "runtime", "unread", "host")
        yield table
        with Vertical(id="session-view"):
            yield Static(id="session-header")
            with ContentSwitcher(initial="line-pane", id="session-switcher"):
                yield LinePane(id="line-pane")
                yield TerminalPane(id="term-pane")
            yield SessionInput(
                placeholder="type a line for the session's stdin, Enter sends (i to focus, Esc leaves)",
                id="session-input",
            )

    @property
    def line_pane(self) -> LinePane:
        return self.query_one("#line-pane", LinePane)

    @property
    def term_pane(self) -> TerminalPane:
        return self.query_one("#term-pane", TerminalPane)

    def is_pty(self, session_id: str | None) -> bool:
        row = self.sessions.get(session_id or "")
        return bool(row and row.get("pty"))

    def upsert(self, row: dict[str, Any]) -> None:
        sid = row.get("sessionId") or row.get("id")
        if not isinstance(sid, str):
            return
        self.sessions[sid] = {**self.sessions.get(sid, {}), **row, "sessionId": sid}

    def replace_all(self, rows: list[dict[str, Any]]) -> None:
        self.sessions = {}
        for row in rows:
            self.upsert(row)

    def drop(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    def render_list(self, unread: dict[str, int]) -> None:
        """Rows newest first; keeps the cursor on the same session."""
        table = self.query_one("#session-list", StableTable)
        order = sorted(
            (sid for sid in self.sessions if self._matches(sid)),
            key=lambda s: -(self.sessions[s].get("startedAtMs") or self.sessions[s].get("startedAt") or 0),
        )
        now = clock_ms()
        if order != self.order:
            self.order = order
            table.clear()
            self._shown = {sid: self._cells(sid, unread, now) for sid in order}
            for sid in order:
                table.add_row(*self._shown[sid], key=sid)
            if self.current in order:
                table.move_cursor(row=order.index(self.current))
        else:
            # Only changed cells are written, in one batch that repaints only their rows: with 100 busy
            # sessions, re-rendering the whole table every second was most of the console's work.
            columns = table.ordered_columns
            changes: list[tuple[str, Any, Any]] = []
            for sid in order:
                cells = self._cells(sid, unread, now)
                before = self._shown.get(sid, ())
                kept = []
                for i, (col, value) in enumerate(zip(columns, cells, strict=True)):
                    if i < len(before) and before[i] == value:
                        kept.append(before[i])  # the same object: the table keeps its rendering
                    else:
                        kept.append(value)
                        changes.append((sid, col.key, value))
                self._shown[sid] = tuple(kept)
            table.update_cells(changes)
        if self.current is None and order:
            self.select(order[table.cursor_row if 0 <= table.cursor_row < len(order) else 0])
        self._header()

    def _matches(self, sid: str) -> bool:
        if not self.filter:
            return True
        row = self.sessions[sid]
        hay = " ".join(str(row.get(k) or "") for k in ("name", "command", "host", "status")) + " " + sid
        return self.filter.lower() in hay.lower()

    def action_filter(self) -> None:
        self.filter_flow()

    @work(group="dialog", exit_on_error=False)
    async def filter_flow(self) -> None:
        text = await self.app.push_screen_wait(
            TextDialog("Filter sessions", placeholder="part of an id, name or command (empty: all)")
        )
        if text is not None:
            self.set_filter(text.strip())

    def action_clear_filter(self) -> None:
        if self.filter:
            self.set_filter("")

    def set_filter(self, text: str) -> None:
        self.filter = text
        self.render_list(self.unread())
        self.notify(f"filter: {text}" if text else "filter cleared", markup=False, timeout=2)

    def _cells(self, sid: str, unread: dict[str, int], now: int) -> tuple[Any, ...]:
        row = self.sessions[sid]
        status = str(row.get("status") or "?")
        mark = "▣ " if row.get("pty") else ""
        return (
            Text(status, style=STATUS_STYLE.get(status, "")),
            Text(sid),  # Text, never str: DataTable parses str cells as markup
            Text(mark + session_name(row)),
            fmt_runtime(row, now),
            fmt_bytes(unread.get(sid, 0)),
            Text(str(row.get("host") or "gateway")),
        )

    def _header(self) -> None:
        row = self.sessions.get(self.current or "")
        # Re-read on every list render (each second): an unchanged header must not relayout the screen.
        shown = (self.current, *(row.get(k) for k in HEADER_KEYS)) if row is not None else None
        if shown == self._header_shown:
            return
        self._header_shown = shown
        header = self.query_one("#session-header", Static)
        if row is None:
            header.update(Text("No sessions yet. Background and PTY sessions appear here.", style="dim"))
            return
        status = str(row.get("status") or "?")
        bits = Text.assemble((f"{self.current} ", "bold"), (status, STATUS_STYLE.get(status, "")))
        if row.get("exitCode") is not None:
            bits.append(f" (code {row['exitCode']})")
        elif row.get("exitSignal"):
            bits.append(f" ({row['exitSignal']})")
        for label in ("pid", "host", "cwd"):
            if row.get(label):
                bits.append(f"  {label}={row[label]}", style="dim")
        bits.append(f"\n$ {row.get('command', '')}")
        # Its height is auto: lay the screen out again only when the line count changes (selecting a
        # session with the arrow keys would otherwise relayout and repaint everything on each press).
        width, height = header.content_region.size
        lines = len(bits.wrap(self.app.console, width)) if width > 0 else -1
        header.update(bits, layout=lines != height)

    def select(self, session_id: str | None, *, move_cursor: bool = True) -> None:
        if move_cursor and session_id in self.order:
            table: DataTable[Any] = self.query_one("#session-list", DataTable)
            index = self.order.index(session_id)
            if table.cursor_row != index:
                table.move_cursor(row=index)  # its highlight event re-selects the same row: a no-op
        if session_id == self.current:
            return
        self.current = session_id
        pty = self.is_pty(session_id)
        self.query_one("#session-switcher", ContentSwitcher).current = "term-pane" if pty else "line-pane"
        if pty:
            row = self.sessions[session_id or ""]
            self.term_pane.reset(int(row.get("cols") or 120), int(row.get("rows") or 40))
        else:
            self.line_pane.clear(refill=self.live and session_id is not None)  # the replay refills it
        self._header()
        self._selected(session_id)

    def feed(self, data: str) -> None:
        if self.is_pty(self.current):
            self.term_pane.feed(data)
        else:
            self.line_pane.feed(data)

    def flush_output(self) -> None:
        """~30 Hz: move what arrived for the visible session into its pane, or re-read when the router
        cannot line it up with what the pane shows; nothing else is touched."""
        router = self.link.output
        sid = router.visible
        if sid is None or sid == self.replaying or not (router.pending or router.overflowed):
            return
        data, overflowed = router.drain()
        if overflowed:
            self.replay(sid)
            return
        self.feed(data)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        # Rebuilding the table queues highlight events for rows that are no longer under the cursor;
        # acting on those would bounce the selection back and forth.
        if event.cursor_row != event.data_table.cursor_row or event.row_key.value is None:
            return
        self.select(str(event.row_key.value), move_cursor=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.current is not None:
            self.act_flow("write", self.current, event.value)
        event.input.value = ""

    def action_focus_input(self) -> None:
        self.query_one("#session-input", Input).focus()

    def action_act(self, verb: str) -> None:
        if self.current is None:
            self.notify("No session selected.", severity="warning")
            return
        self.act_flow(verb, self.current)

    def unread(self) -> dict[str, int]:
        """Unread chars per session: counted from pushed output, else from each row's totalChars."""
        router = self.link.output
        if router.pushed:
            return router.unread
        out: dict[str, int] = {}
        for sid, row in self.sessions.items():
            total = row.get("totalChars")
            if isinstance(total, int):
                if sid == router.visible:
                    self.read_chars[sid] = total
                out[sid] = max(0, total - self.read_chars.setdefault(sid, 0))
        return out

    def notify_plain(self, message: str, **kwargs: Any) -> None:
        """notify() without markup: messages carry commands, paths and gateway texts."""
        self.notify(message, markup=False, **kwargs)

    # -- flows: every request goes to the gateway through the app's link

    def _selected(self, session_id: str | None) -> None:
        self.link.output.show(session_id)
        self.log_page.pop(session_id or "", None)
        if session_id:
            self.replay(session_id)

    def poll_visible(self) -> None:
        """Fallback for a gateway that does not push `session.output`: re-read the visible log on change.
        A node session is pushed like a local one; one whose node cannot push is read by offset."""
        router = self.link.output
        sid = router.visible
        if sid is not None and sid.startswith("node:"):
            running = self.sessions.get(sid, {}).get("status") == "running"
            if sid in router.polled and self.link.connected.is_set() and running:
                self.poll_node_output(sid)
            return
        if sid is None or router.pushed or not self.link.connected.is_set() or sid in self.log_page:
            return
        if self.sessions.get(sid, {}).get("status") == "running":
            self.poll_output(sid)

    @work(group="poll", exclusive=True, exit_on_error=False)
    async def poll_output(self, session_id: str) -> None:
        row = self.sessions.get(session_id, {})
        params: dict[str, Any] = {"action": "log", "sessionId": session_id, "limit": 1}
        if isinstance(row.get("scopeKey"), str):
            params["sessionKey"] = row["scopeKey"]
        try:
            details = (await self.link.request("process", params)).get("details") or {}
        except (RemoteError, ConnectionError):
            return
        total = (details.get("totalChars"), details.get("totalLines"))
        if total != self.seen_total.get(session_id):
            self.seen_total[session_id] = total
            self.replay(session_id)

    @work(group="node-poll", exclusive=True, exit_on_error=False)
    async def poll_node_output(self, session_id: str) -> None:
        """What a node session printed since the offset the pane has shown (`sessions.output`)."""
        router = self.link.output
        since = router.cursor(session_id)
        if since is None or self.replaying == session_id:
            return  # the replay sets the offset first
        try:
            res = await self.link.request("sessions.output", {"sessionId": session_id, "offset": since})
        except (RemoteError, ConnectionError):
            return
        nxt = res.get("nextOffset")
        if self.current != session_id or not isinstance(nxt, int):
            return  # switched away
        if not router.advance(session_id, since, nxt):
            return  # a replay moved the offset meanwhile
        if res.get("data"):
            self.feed(str(res["data"]))

    @work(group="replay", exclusive=True, exit_on_error=False)
    async def replay(self, session_id: str) -> None:
        """Fill the pane from the log tail; live chunks wait meanwhile and resume after its last byte."""
        if not self.live:
            return
        self.replaying = session_id
        try:
            await self.link.follow(session_id)
            data, next_offset = await self.read_tail(session_id)
            if self.current != session_id:
                return
            pane = self
            if pane.is_pty(session_id):
                row = pane.sessions[session_id]
                pane.term_pane.reset(int(row.get("cols") or 120), int(row.get("rows") or 40))
            else:
                pane.line_pane.clear(refill=True)  # fed right below
            self.link.output.replayed(session_id, next_offset)
            pane.feed(data)
        finally:
            self.replaying = None
            if self.current == session_id:  # not superseded by another selection: its pane is final
                self.line_pane.settle_scrollbars()

    async def read_tail(self, session_id: str) -> tuple[str, int | None]:
        """(text, raw byte offset it ends at) from `sessions.output`; else `process log` without offsets."""
        row = self.sessions.get(session_id, {})
        try:
            res = await self.link.request("sessions.output", {"sessionId": session_id, "limit": REPLAY_BYTES})
            next_offset = res.get("nextOffset")
            return str(res.get("data") or ""), next_offset if isinstance(next_offset, int) else None
        except RemoteError:
            pass
        except ConnectionError:
            return "", None
        try:
            res = await self.link.request(
                "process",
                {
                    "action": "log",
                    "sessionId": session_id,
                    "limit": LOG_PAGE_LINES,
                    "sessionKey": row.get("scopeKey"),
                },
            )
        except (RemoteError, ConnectionError):
            return "", None
        details = res.get("details") or {}
        if "totalLines" not in details:  # "No session found …" is a message, not output
            return "", None
        # The agent-facing log has ESC removed, leaving "[32m" behind: drop those remnants too.
        return ESC_REMNANT.sub("", str(details.get("aggregated") or res.get("text") or "")) + "\n", None

    @work(group="sessions-list", exclusive=True, exit_on_error=False)
    async def refresh_sessions(self) -> None:
        try:
            rows = await self.link.list_sessions()
        except (RemoteError, ConnectionError):
            return
        self.replace_all(rows)
        self.render_list(self.unread())

    @work(group="dialog", exit_on_error=False)
    async def act_flow(self, verb: str, sid: str, text: str | None = None) -> None:
        row = self.sessions.get(sid, {})
        pty = bool(row.get("pty"))
        params: dict[str, Any] = {"sessionId": sid}
        if verb == "write":
            text = text or ""
            if not text:
                params["action"] = "submit"
            else:
                params.update(action="write", data=text + ("\r" if pty else "\n"))
        elif verb == "send-keys":
            keys = await self.app.push_screen_wait(
                TextDialog("Send keys", placeholder="C-c   up enter   0x1b   (space separated, tmux style)")
            )
            if not keys:
                return
            params.update(action="send-keys", keys=keys.split())
        elif verb == "paste":
            text = await self.app.push_screen_wait(TextDialog("Paste text", placeholder="text to paste"))
            if not text:
                return
            params.update(action="paste", text=text)
        elif verb == "submit":
            params["action"] = "submit"
        elif verb == "kill":
            if not await self.app.push_screen_wait(
                ConfirmDialog(
                    "Kill session?",
                    f"{sid}: {visible(row.get('command', ''))}\nSIGTERM to the process group, then SIGKILL.",
                    yes="Kill",
                )
            ):
                return
            params["action"] = "kill"
        elif verb == "clear":
            params["action"] = "clear"
        elif verb == "remove":
            if row.get("status") == "running" and not await self.app.push_screen_wait(
                ConfirmDialog(
                    "Remove running session?",
                    f"{sid} is still running; removing terminates it.",
                    yes="Remove",
                )
            ):
                return
            params["action"] = "remove"
        elif verb == "attach":
            self.attach(sid)
            return
        elif verb in ("log-older", "log-newer", "follow"):
            self.page_log(sid, verb)
            return
        else:
            return
        self.run_process(params, row.get("scopeKey"))

    @work(group="process", exit_on_error=False)
    async def run_process(self, params: dict[str, Any], scope_key: Any) -> None:
        if isinstance(scope_key, str):
            params["sessionKey"] = scope_key
        try:
            res = await self.link.request("process", params)
        except (RemoteError, ConnectionError) as exc:
            self.notify_plain(str(exc), severity="error")
            return
        text = str(res.get("text") or "")
        if params["action"] not in ("write", "submit") or "No " in text or "not" in text:
            self.notify_plain(text[:200] or params["action"], timeout=3)
        if params["action"] in ("clear", "remove", "kill"):
            self.refresh_sessions()

    @work(group="log", exclusive=True, exit_on_error=False)
    async def page_log(self, session_id: str, verb: str) -> None:
        """`[`/`]` page the on-disk log by LOG_PAGE_LINES (process log); `f` returns to live follow."""
        pane = self
        if verb == "follow" or pane.is_pty(session_id):
            self.log_page.pop(session_id, None)
            self.replay(session_id)
            return
        row = pane.sessions.get(session_id, {})
        params: dict[str, Any] = {"action": "log", "sessionId": session_id, "limit": LOG_PAGE_LINES}
        if isinstance(row.get("scopeKey"), str):
            params["sessionKey"] = row["scopeKey"]
        try:
            total = int(
                ((await self.link.request("process", {**params, "limit": 1})).get("details") or {}).get(
                    "totalLines"
                )
                or 0
            )
        except (RemoteError, ConnectionError, ValueError) as exc:
            self.notify_plain(str(exc), severity="error")
            return
        first = self.log_page.get(session_id, max(0, total - LOG_PAGE_LINES))
        first = max(0, first - LOG_PAGE_LINES) if verb == "log-older" else first + LOG_PAGE_LINES
        if first >= total:
            self.log_page.pop(session_id, None)
            self.replay(session_id)
            return
        params["offset"] = first
        try:
            res = await self.link.request("process", params)
        except (RemoteError, ConnectionError) as exc:
            self.notify_plain(str(exc), severity="error")
            return
        self.log_page[session_id] = first
        self.link.output.show(None)  # paging: live output must not scroll the page away
        pane.line_pane.clear(refill=True)  # fed right below
        pane.line_pane.feed(str(res.get("text") or "") + "\n")
        pane.line_pane.scroll_home(animate=False)
        self.notify_plain(
            f"log lines {first + 1}–{min(first + LOG_PAGE_LINES, total)} of {total}; f follows live",
            timeout=3,
        )

    def attach(self, session_id: str) -> None:
        """Full-screen programs get the real terminal: suspend Textual, proxy the PTY until ctrl+]."""
        row = self.sessions.get(session_id, {})
        if not row.get("pty") or row.get("status") != "running":
            self.notify_plain("Only running PTY sessions can be attached.", severity="warning")
            return
        from console.attach import attach_session

        try:
            with self.app.suspend():
                attach_session(self.state, session_id, row)
        except Exception as exc:  # SuspendNotSupported (headless, web) and any terminal error
            self.notify_plain(f"attach unavailable: {exc}", severity="warning")
        self.replay(session_id)
