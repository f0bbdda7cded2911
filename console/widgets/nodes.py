"""The nodes pane: each configured node's link as the gateway sees it (state, RTT, identity, last error)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static

from console.text import plain
from console.widgets.listpane import ListPane
from engine.protocol.requests import NodesStatus, SandboxList

STATE_STYLE = {"connected": ("● connected", "green"), "connecting": ("◌ connecting", "yellow")}


def _plain(value: Any) -> Text:
    # Names, ids and errors come from config and from nodes: inert text, never markup or escapes.
    return plain(value)


NO_NODES = "No nodes configured ([nodes.<name>] in config.toml, or `exechost nodes add`)."


class NodesPane(ListPane):
    """Talks to the gateway through `app.link` (`nodes.status`; `p` pings every node)."""

    TABLE_ID = "node-list"
    DETAIL_ID = "node-detail"
    HINT = "r refresh · p ping"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "refresh_list", "Refresh"),
        Binding("p", "ping", "Ping"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # node name → (running, total) of its sessions and of its sandboxes, from the merged lists
        self.counts: dict[str, dict[str, tuple[int, int]]] = {}

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="node-list", cursor_type="row", zebra_stripes=True)
        table.add_columns(
            "node", "address", "state", "rtt", "node id", "exechost", "in flight", "sessions", "sandboxes"
        )
        yield table
        yield Static(self.HINT, id="node-detail")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._describe()

    def _describe(self) -> bool | None:
        table = self.query_one("#node-list", DataTable)
        cursor = max(table.cursor_row, 0)
        row = self.rows[cursor] if self.rows and cursor < len(self.rows) else None
        if row is None:
            return None
        out = _plain(f"{row.get('name')} ")
        if row.get("displayName"):
            out.append_text(_plain(f"({row['displayName']}) "))
        out.append_text(
            _plain(f"platform={row.get('platform') or '-'} caps={','.join(row.get('caps') or [])}")
        )
        if row.get("mode"):
            # service: a `node run` answers, so the node's sessions outlive this link.
            out.append_text(_plain(f" mode={row['mode']}"))
        if row.get("lastError") and row.get("state") != "connected":
            # An error from before the link came back up would read as "it is broken" under a live row.
            out.append("\n✗ ", style="red")
            out.append_text(_plain(row["lastError"]))
        self._detail(out)
        return True

    def show(self, rows: list[dict[str, Any]]) -> None:
        table = self.query_one("#node-list", DataTable)
        cursor = table.cursor_row
        table.clear()
        self.rows = rows
        for r in rows:
            label, style = STATE_STYLE.get(str(r.get("state")), ("○ down", "red"))
            rtt = r.get("rttMs")
            table.add_row(
                _plain(r.get("name", "")),
                _plain(f"{r.get('host')}" + (f":{r['port']}" if r.get("port") else "")),
                Text(label, style=style),
                Text("-" if rtt is None else f"{rtt:.1f} ms"),
                _plain((r.get("nodeId") or "-")[:13]),
                _plain(r.get("version") or "-"),
                Text(str(r.get("inFlight") or 0)),
                self._count(str(r.get("name")), "sessions"),
                self._count(str(r.get("name")), "sandboxes"),
            )
        if rows and cursor is not None:
            table.move_cursor(row=min(cursor, len(rows) - 1))
        if not rows:
            self._detail(NO_NODES, transient=True)
        elif self._describe() is None and self._transient:
            self._detail(self.HINT)

    def _count(self, node: str, what: str) -> Text:
        got = self.counts.get(node, {}).get(what)
        if got is None:
            return Text("-", style="dim")
        running, total = got
        return Text(f"{running}/{total}", style="green" if running else "")

    async def _status(self, ping: bool) -> None:
        link = getattr(self.app, "link", None)
        try:
            if link is None:
                raise RuntimeError("no gateway link")
            result = await link.request(NodesStatus(ping=ping or None))
        except Exception as exc:
            self._detail(Text(f"nodes unavailable: {exc}", style="red"))
            return
        rows = list(result.get("nodes") or [])
        connected = [str(r.get("name")) for r in rows if r.get("state") == "connected"]
        self.counts = await self._count_work(link, connected) if connected else {}
        self.show(rows)

    async def _count_work(self, link: Any, connected: list[str]) -> dict[str, dict[str, tuple[int, int]]]:
        """Sessions and sandboxes per node, from the gateway's merged lists (connected nodes only)."""
        counts: dict[str, dict[str, tuple[int, int]]] = {
            name: {"sessions": (0, 0), "sandboxes": (0, 0)} for name in connected
        }

        def add(node: Any, what: str, running: bool) -> None:
            if not isinstance(node, str) or not node:
                return
            have = counts.setdefault(node, {}).get(what, (0, 0))
            counts[node][what] = (have[0] + int(running), have[1] + 1)

        try:
            sessions = await link.list_sessions()
            for s in sessions:
                add(s.get("node"), "sessions", s.get("status") == "running")
        except Exception:  # counts are a courtesy: the states above still show
            return {}
        try:
            boxes = (await link.request(SandboxList())).get("containers") or []
            for b in boxes:
                add(b.get("node"), "sandboxes", bool(b.get("running")))
        except Exception:
            for name in counts:
                counts[name].pop("sandboxes", None)  # unknown, not zero
        return counts

    @work(group="node-list", exclusive=True, exit_on_error=False)
    async def action_refresh_list(self) -> None:
        await self._status(False)

    @work(group="node-list", exclusive=True, exit_on_error=False)
    async def action_ping(self) -> None:
        self._detail("pinging…")
        await self._status(True)
