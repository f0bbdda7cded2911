"""The decision history pane: every approval decided, who decided and when, the command, what it led to."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Static

from console.text import plain
from engine.display import MARKED_LINES, visible
from engine.protocol.frames import RemoteError
from engine.protocol.requests import ApprovalsHistory

DECISION_STYLE = {"allow-once": "green", "allow-always": "bold green", "deny": "red", "expired": "yellow"}


def _when(ms: Any) -> str:
    if not isinstance(ms, int | float):
        return "–"
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def outcome(row: dict[str, Any]) -> str:
    run = row.get("run") or {}
    if not run.get("status"):
        return "–" if row.get("status") in ("deny", "expired", "shutdown") else "not run"
    code = run.get("exitCode")
    return f"{run['status']}" + (f" ({code})" if code is not None else "")


def render_entry(row: dict[str, Any] | None) -> RenderableType:
    if row is None:
        return Text("No decisions yet. Every approval decided shows here with what it led to.", style="dim")
    run = row.get("run") or {}
    head = Text.assemble(
        ("Approval ", "bold"),
        (str(row.get("slug")), "bold cyan"),
        ("  ", ""),
        (str(row.get("status")), DECISION_STYLE.get(str(row.get("status")), "")),
        (f" by {visible(row.get('resolvedBy') or '?')} at {_when(row.get('resolvedAtMs'))}", "dim"),
    )
    parts: list[RenderableType] = [head, plain(row.get("command"), newline=MARKED_LINES)]
    for label, value in (
        ("Agent", row.get("agentId")),
        ("CWD", row.get("cwd")),
        ("Reason", row.get("reason")),
        ("Agent said", row.get("agentReason")),
        ("Session", run.get("sessionId")),
        ("Outcome", outcome(row)),
        ("Why", run.get("reason")),  # a refused run says why: approval-stale names the file and digests
    ):
        if value:
            parts.append(Text.assemble((f"{label:<11}", "bold"), plain(value)))
    if run.get("tail"):
        parts += [Text("Output (tail)", style="bold"), plain(run["tail"], newline="\n")]
    return Group(*parts)


class HistoryPane(Horizontal):
    """Loaded from the gateway (`approvals.history`) when shown and after each decision."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("r", "reload", "Reload")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="history-list", cursor_type="row", zebra_stripes=True)
        table.add_columns("when", "decision", "by", "agent", "outcome", "command")
        yield table
        with VerticalScroll(id="history-detail-box"):
            yield Static(id="history-detail")

    def action_reload(self) -> None:
        self.reload()

    @work(group="history", exclusive=True, exit_on_error=False)
    async def reload(self) -> None:
        link = self.app.link  # type: ignore[attr-defined]
        if not link.connected.is_set():
            return
        try:
            page = await link.request(ApprovalsHistory())
        except (RemoteError, ConnectionError) as exc:
            self.query_one("#history-detail", Static).update(Text(f"history unavailable: {exc}", style="red"))
            return
        self.show(list(page.get("approvals") or []))

    def show(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        table: DataTable[Any] = self.query_one("#history-list", DataTable)
        table.clear()
        for row in rows:
            status = str(row.get("status"))
            table.add_row(
                _when(row.get("resolvedAtMs")),
                Text(status, style=DECISION_STYLE.get(status, "")),
                plain(row.get("resolvedBy") or ""),
                plain(row.get("agentId") or ""),
                outcome(row),
                plain(str(row.get("command") or "")[:120]),
            )
        self._detail()

    def _detail(self) -> None:
        table = self.query_one("#history-list", DataTable)
        row = self.rows[min(max(table.cursor_row, 0), len(self.rows) - 1)] if self.rows else None
        self.query_one("#history-detail", Static).update(render_entry(row))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._detail()
