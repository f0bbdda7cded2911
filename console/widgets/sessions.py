"""The sessions pane: the list (status, runtime, host, name, unread) and a live view of the selected one."""

from __future__ import annotations

import functools
import os
import shlex
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import ContentSwitcher, DataTable, Input, Static

from console.inbox import clock_ms
from console.widgets.panes import LinePane, TerminalPane
from engine.display import visible

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


class SessionsPane(Horizontal):
    """Actions are posted up as `Act(verb, session)` so the app does the gateway round trip in a worker."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("i", "focus_input", "Input"),
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

    class Selected(Message):
        def __init__(self, session_id: str | None) -> None:
            super().__init__()
            self.session_id = session_id

    class Act(Message):
        def __init__(self, verb: str, session_id: str, text: str | None = None) -> None:
            super().__init__()
            self.verb = verb
            self.session_id = session_id
            self.text = text

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sessions: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.current: str | None = None
        self._shown: dict[str, tuple[Any, ...]] = {}  # cells last written per row: only changes are sent

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="session-list", cursor_type="row", zebra_stripes=True)
        table.add_columns("status", "id", "name", "runtime", "unread", "host")
        yield table
        with Vertical(id="session-view"):
            yield Static(id="session-header")
            with ContentSwitcher(initial="line-pane", id="session-switcher"):
                yield LinePane(id="line-pane")
                yield TerminalPane(id="term-pane")
            yield Input(
                placeholder="type a line for the session's stdin, Enter sends (i to focus)",
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
        table: DataTable[Any] = self.query_one("#session-list", DataTable)
        order = sorted(
            self.sessions,
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
            # Each update_cell refreshes the table: with 100 busy sessions, writing unchanged cells was
            # most of the console's work.
            columns = table.ordered_columns
            for sid in order:
                cells = self._cells(sid, unread, now)
                before = self._shown.get(sid, ())
                for i, (col, value) in enumerate(zip(columns, cells, strict=True)):
                    if i >= len(before) or before[i] != value:
                        table.update_cell(sid, col.key, value)
                self._shown[sid] = cells
        if self.current is None and order:
            self.select(order[table.cursor_row if 0 <= table.cursor_row < len(order) else 0])
        self._header()

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
        header.update(bits)

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
            self.line_pane.clear()
        self._header()
        self.post_message(self.Selected(session_id))

    def feed(self, data: str) -> None:
        if self.is_pty(self.current):
            self.term_pane.feed(data)
        else:
            self.line_pane.feed(data)

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
            self.post_message(self.Act("write", self.current, event.value))
        event.input.value = ""

    def action_focus_input(self) -> None:
        self.query_one("#session-input", Input).focus()

    def action_act(self, verb: str) -> None:
        if self.current is None:
            self.notify("No session selected.", severity="warning")
            return
        self.post_message(self.Act(verb, self.current))
