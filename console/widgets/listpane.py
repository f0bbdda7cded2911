"""What the list panes share (Sandboxes, Nodes, Browsers): a table of what the gateway reports, refreshed
while on screen, a detail line, and requests through the app's one gateway link."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from engine.protocol.requests import Message

REFRESH_SEC = 5.0


class ListPane(Vertical):
    """Subclasses name their table and detail widgets and define `action_refresh_list`."""

    TABLE_ID: ClassVar[str]
    DETAIL_ID: ClassVar[str]
    HINT: ClassVar[str] = ""  # the detail line when there is nothing else to say (the pane's keys)
    TRANSIENT_SEC: ClassVar[float] = 10.0  # how long a one-off message ("container started") stays

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: list[dict[str, Any]] = []
        # The detail describes a moment, not the rows ("No … yet", a progress line): replaced as soon as
        # the rows say otherwise, so no stale message sits under a live table.
        self._transient = False
        self._shown: object = None
        self._lost_since: str | None = None

    def on_mount(self) -> None:
        self.set_interval(REFRESH_SEC, self._tick)
        if self._connected():
            self.action_refresh_list()
        else:  # the app tells every list pane when the link comes up (connection_changed)
            self._detail(Text("waiting for the gateway…", style="dim"), transient=True)

    def action_refresh_list(self) -> object:  # a @work method in each subclass: it returns its Worker
        raise NotImplementedError

    def _connected(self) -> bool:
        """Whether the app's link is up (a bare client, as a test may give, is taken as up)."""
        link = getattr(self.app, "link", None)
        state = getattr(link, "connected", None)
        return link is not None and (state is None or state.is_set())

    def connection_changed(self, lost: str | None) -> None:
        """Follow the gateway link by itself: reload when it is back (what it shows may have changed
        meanwhile); say so when it is gone, keeping the rows as they were, dated."""
        if lost is None:
            self._lost_since = None
            self.action_refresh_list()
            return
        self._lost_since = self._lost_since or time.strftime("%H:%M:%S")  # the outage's start, not a retry's
        self._detail(Text(f"{lost} — the rows above are as of {self._lost_since}", style="bold yellow"))

    def _tick(self) -> None:
        # Not while the link is down: each try would only replace the outage line with "not connected".
        if self.display and self.is_on_screen and self._connected():
            self.action_refresh_list()

    async def _request(self, msg: Message) -> dict[str, Any]:
        link = getattr(self.app, "link", None)
        if link is None:
            raise RuntimeError("no gateway link")
        result: dict[str, Any] = await link.request(msg)
        return result

    def _detail(self, text: Text | str, *, transient: bool = False) -> None:
        self._transient = transient
        self._shown = text
        self.query_one(f"#{self.DETAIL_ID}", Static).update(text)

    def _detail_for_now(self, text: Text | str) -> None:
        """A one-off message: it goes back to the hint after TRANSIENT_SEC unless replaced meanwhile."""
        self._detail(text)
        self.set_timer(self.TRANSIENT_SEC, lambda: self._expire(text))

    def _expire(self, text: Text | str) -> None:
        if self._shown is text:
            self._detail(self.HINT)

    def fill(
        self, rows: list[dict[str, Any]], cells: Callable[[dict[str, Any]], list[Any]], empty: Text
    ) -> None:
        """Replace the table's rows, keeping the cursor where it was; `empty` in the detail line if none."""
        table = self.table
        cursor = table.cursor_row
        table.clear()
        self.rows = rows
        for row in rows:
            table.add_row(*cells(row))
        if rows and cursor is not None:
            table.move_cursor(row=min(cursor, len(rows) - 1))
        if not rows:
            self._detail(empty, transient=True)
        elif self._transient:
            self._detail(self.HINT)

    @property
    def table(self) -> DataTable[Any]:
        return self.query_one(f"#{self.TABLE_ID}", DataTable)

    @property
    def selected(self) -> dict[str, Any] | None:
        table = self.table
        if not self.rows or table.cursor_row is None or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row]
