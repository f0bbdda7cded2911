"""The browsers pane: each browser sandbox's state, page and noVNC link, and its latest screenshot."""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from console.dialogs import ConfirmDialog
from console.pixels import render
from console.text import plain
from console.widgets.listpane import ListPane
from engine.protocol.requests import BrowserScreenshot, BrowserStatus, BrowserStop, BrowserUrl

EMPTY = Text(
    "No browser sandboxes. They are off unless config.toml turns them on:\n"
    "  [agents.defaults.sandbox.browser]\n  enabled = true\n"
    "then `exechost sandbox setup --browser` builds the image; the agent's first `browser` "
    "call starts one here (or `exechost sandbox browser start`).",
    style="dim",
)


def _cells(r: dict[str, Any]) -> list[Any]:
    return [
        plain(r.get("containerName", "")),
        Text("● running", style="green") if r.get("running") else Text("○ stopped", style="dim"),
        Text("✓", style="green") if r.get("cdp") else Text("-", style="dim"),
        plain(r.get("title", "")),  # the page's own words: inert text
        plain(r.get("url", "")),
        plain(r.get("sessionKey", "")),
    ]


class BrowsersPane(ListPane):
    """Talks to the gateway through `app.link` (browser.status|url|screenshot|start|stop)."""

    TABLE_ID = "browser-list"
    DETAIL_ID = "browser-detail"
    HINT = "r refresh · s screenshot · u noVNC/CDP links · x stop"

    NOTHING_SELECTED = "No browser selected: an agent's first browser call starts one (r refreshes)."
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "refresh_list", "Refresh"),
        Binding("s", "screenshot", "Screenshot"),
        Binding("u", "urls", "Links"),
        Binding("x", "stop", "Stop"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shown_at: dict[str, int | None] = {}  # container → the screenshot time on screen

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="browser-list", cursor_type="row", zebra_stripes=True)
        table.add_columns("container", "status", "cdp", "title", "url", "session")
        yield table
        yield Static(self.HINT, id="browser-detail")
        with VerticalScroll(id="browser-shot-box"):
            yield Static("", id="browser-shot")

    def show(self, rows: list[dict[str, Any]]) -> None:
        self.fill(rows, _cells, EMPTY)

    @work(group="browser-list", exclusive=True, exit_on_error=False)
    async def action_refresh_list(self) -> None:
        try:
            rows = (await self._request(BrowserStatus())).get("browsers", [])
        except Exception as exc:
            self._detail(Text(f"browsers unavailable: {exc}", style="red"))
            return
        self.show(list(rows))
        row = self.selected
        if row is not None and row.get("screenshotAtMs") != self.shown_at.get(row["containerName"]):
            await self._show_screenshot(row)  # the agent took a new one: keep the picture current

    async def _show_screenshot(self, row: dict[str, Any]) -> None:
        name = str(row["containerName"])
        try:
            shot = (await self._request(BrowserScreenshot(container_name=name))).get("screenshot")
        except Exception as exc:
            self._detail(Text(f"screenshot failed: {exc}", style="red"))
            return
        box = self.query_one("#browser-shot", Static)
        if not shot:
            box.update(Text("(no screenshot yet: s takes one)", style="dim"))
            self.shown_at[name] = None
            return
        width = max(20, self.size.width - 4)
        box.update(render(base64.b64decode(shot["image"]), width))
        self.shown_at[name] = shot.get("atMs")

    @work(group="browser-action", exclusive=True, exit_on_error=False)
    async def action_screenshot(self) -> None:
        row = self.selected
        if row is None or not row.get("running"):
            self._detail(Text("select a running browser", style="yellow"))
            return
        try:
            await self._request(BrowserScreenshot(container_name=row["containerName"], fresh=True))
        except Exception as exc:
            self._detail(Text(f"screenshot failed: {exc}", style="red"))
            return
        await self._show_screenshot(row)

    @work(group="browser-action", exclusive=True, exit_on_error=False)
    async def action_urls(self) -> None:
        row = self.selected
        if row is None:
            self._detail(Text(self.NOTHING_SELECTED, style="yellow"))
            return
        query = BrowserUrl(agent_id=row.get("agentId") or "main", session_key=row.get("sessionKey") or "")
        try:
            urls = await self._request(query)
        except Exception as exc:
            self._detail(Text(f"links unavailable: {exc}", style="red"))
            return
        out = Text()
        out.append("noVNC: ", style="bold")
        out.append(str(urls.get("noVncUrl") or "- (headless or enableNoVnc = false)"))
        out.append("\nCDP:   ", style="bold")
        out.append(str(urls.get("cdpUrl") or "-"))
        out.append("\nEach link opens once, within 60 s: ask again (u) for new ones.", style="dim")
        self._detail(out)

    @work(group="browser-action", exclusive=True, exit_on_error=False)
    async def action_stop(self) -> None:
        row = self.selected
        if row is None:
            self._detail(Text(self.NOTHING_SELECTED, style="yellow"))
            return
        name = str(row["containerName"])
        ok = await self.app.push_screen_wait(
            ConfirmDialog(
                "Stop browser",
                plain(f"Remove {name}? The agent's next browser call starts a fresh one (autoStart)."),
                yes="Stop",
            )
        )
        if not ok:
            return
        try:
            await self._request(BrowserStop(container_name=name))
        except Exception as exc:
            self._detail(Text(f"stop failed: {exc}", style="red"))
            return
        self._detail(f"Stopped {name}.")
        self.action_refresh_list()
