"""The console's paint caches (issue 19): what they keep must follow what changes on screen."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult

from console.ansi import LineAssembler
from console.gateway import GatewayLink
from console.widgets.panes import LinePane
from console.widgets.sessions import SessionsPane
from console.widgets.table import StableTable


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        table = StableTable(id="t", cursor_type="row")
        table.add_columns("status", "runtime")
        yield table


def screen_rows(table: StableTable) -> list[str]:
    return [table.render_line(y).text for y in range(1, 4)]


def styles_of(table: StableTable, y: int, word: str) -> set[str]:
    return {
        str(seg.style.color.name)
        for seg in table.render_line(y)
        if word in seg.text and seg.style and seg.style.color
    }


async def test_stable_table_repaints_a_changed_cell_and_keeps_the_others() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(StableTable)
        keys = list(table.columns)
        for sid in ("a", "b", "c"):
            table.add_row(Text("running"), f"{sid}-1s", key=sid)
        await pilot.pause()
        assert [r.split() for r in screen_rows(table)] == [
            ["running", "a-1s"],
            ["running", "b-1s"],
            ["running", "c-1s"],
        ]
        table.update_cells([("b", keys[1], "b-2s"), ("c", keys[0], Text("failed"))])
        await pilot.pause()
        assert [r.split() for r in screen_rows(table)] == [
            ["running", "a-1s"],
            ["running", "b-2s"],
            ["failed", "c-1s"],
        ]
        assert table.get_cell("b", keys[1]) == "b-2s"
        # An equal-looking value that is a new object is rendered again (the cache keys on the object).
        # (row b: the cursor's highlight on row a would hide the colour)
        table.update_cells([("b", keys[0], Text("running", style="red"))])
        await pilot.pause()
        assert styles_of(table, 2, "running") == {"red"}
        table.update_cells([("b", keys[0], Text("running", style="green"))])
        await pilot.pause()
        assert styles_of(table, 2, "running") == {"green"}
        # The cursor still moves and rows still come and go.
        await pilot.press("down")
        assert table.cursor_row == 1
        table.clear()
        table.add_row("x", "y", key="x")
        await pilot.pause()
        assert screen_rows(table)[0].split() == ["x", "y"]


class PaneApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.link = GatewayLink(self)

    def compose(self) -> ComposeResult:
        yield SessionsPane(self.link, live=False, id="pane")


def header_text(app: PaneApp) -> str:
    return str(app.query_one("#session-header").render())


async def test_session_header_is_redrawn_only_when_its_session_changes() -> None:
    app = PaneApp()
    async with app.run_test(size=(140, 30)) as pilot:
        pane = app.query_one(SessionsPane)
        row: dict[str, Any] = {"sessionId": "s1", "status": "running", "command": "sleep 9", "startedAtMs": 1}
        pane.upsert(row)
        pane.render_list({})
        await pilot.pause()
        assert "s1 running" in header_text(app) and "$ sleep 9" in header_text(app)
        header = app.query_one("#session-header")
        updates: list[Any] = []
        original = header.update  # type: ignore[attr-defined]
        header.update = lambda *a, **k: (updates.append(a), original(*a, **k))  # type: ignore[attr-defined]
        pane.render_list({})  # nothing changed: the header is left alone (no relayout each second)
        assert updates == []
        pane.upsert({"sessionId": "s1", "status": "completed", "exitCode": 0})
        pane.render_list({})
        await pilot.pause()
        assert len(updates) == 1 and "s1 completed (code 0)" in header_text(app)
        pane.upsert({"sessionId": "s2", "status": "running", "command": "yes", "startedAtMs": 2})
        pane.render_list({})
        pane.select("s2")
        await pilot.pause()
        assert "s2 running" in header_text(app)
        assert header.content_region.height == 2
        # A command that wraps: the header grows (its height is auto, so this one update lays out).
        pane.upsert({"sessionId": "s3", "status": "running", "command": "x" * 150, "startedAtMs": 3})
        pane.render_list({})
        pane.select("s3")
        await pilot.pause()
        assert header.content_region.height > 2  # (no app CSS here, so no max-height either)
        pane.select("s2")
        await pilot.pause()
        assert header.content_region.height == 2


def test_line_assembler_plain_fast_path_matches_the_sanitising_path() -> None:
    plain_chunk = "a\tb\nsecond\r\nthird 10%\r100%\npart"
    hostile = plain_chunk + "\x1b]0;t\x07"
    fast, slow = LineAssembler(), LineAssembler()
    assert fast.feed(plain_chunk) == ["a\tb", "second", "100%"]
    assert slow.feed(hostile) == ["a\tb", "second", "100%"]
    assert fast.partial == slow.partial == "part"
    assert LineAssembler().feed("x\x07y\nz\n") == ["xy", "z"]  # a lone control char still goes


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LinePane(id="p")


def visible_lines(pane: LinePane) -> list[str]:
    return [pane.render_line(y).text.strip() for y in range(pane.scrollable_content_region.height)]


async def settle(pilot: Any, check: Any) -> bool:
    """Scrolling to the end runs after a refresh: give it a few."""
    for _ in range(100):
        if check():
            return True
        await pilot.pause(0.01)
    return bool(check())


async def test_line_pane_grows_scrollbars_and_follows_the_tail_without_a_screen_layout() -> None:
    app = LogApp()
    async with app.run_test(size=(40, 10)) as pilot:
        pane = app.query_one(LinePane)
        pane.feed("".join(f"line {i}\n" for i in range(5)))
        await pilot.pause()
        assert not pane.show_vertical_scrollbar and visible_lines(pane)[:5] == [f"line {i}" for i in range(5)]
        pane.feed("".join(f"line {i}\n" for i in range(5, 100)))
        await pilot.pause()
        assert pane.show_vertical_scrollbar  # showing the scrollbar still lays the pane out
        assert pane.virtual_size.height == 100
        assert await settle(pilot, lambda: visible_lines(pane)[-1] == "line 99")
        pane.scroll_home(animate=False)  # scrolled up: new output must not pull the view down
        await pilot.pause()
        pane.feed("line 100\n")
        await pilot.pause()
        assert visible_lines(pane)[0] == "line 0" and pane.virtual_size.height == 101
        pane.scroll_end(animate=False)
        await pilot.pause()
        layouts: list[Any] = []
        original = app.screen._refresh_layout
        app.screen._refresh_layout = lambda *a, **k: (layouts.append(a), original(*a, **k))[1]  # type: ignore[method-assign]
        for i in range(101, 106):  # output arriving: the pane repaints, the screen is not laid out again
            pane.feed(f"line {i}\n")
            await pilot.pause()
        assert await settle(pilot, lambda: visible_lines(pane)[-1] == "line 105")
        assert layouts == []
        pane.clear(refill=True)  # then refilled, as a session switch does: the scrollbar stays, no layout
        await pilot.pause()
        pane.feed("".join(f"other {i}\n" for i in range(50)))
        assert await settle(pilot, lambda: visible_lines(pane)[-1] == "other 49")
        assert layouts == [] and pane.show_vertical_scrollbar
        pane.clear(refill=True)  # the refill did not come: settling shows the empty pane's scrollbars
        await pilot.pause()
        assert pane.virtual_size.height == 0 and visible_lines(pane)[0] == ""
        pane.settle_scrollbars()
        assert await settle(pilot, lambda: not pane.show_vertical_scrollbar)
        pane.feed("".join(f"again {i}\n" for i in range(50)))
        await pilot.pause()
        pane.clear()  # a plain clear: at once
        assert await settle(pilot, lambda: not pane.show_vertical_scrollbar)
        pane.feed("short\n")
        await pilot.pause()
        assert not pane.show_vertical_scrollbar and visible_lines(pane)[0] == "short"
