"""Output panes: a line-mode log (bounded, lazy ANSI, line API) and a pyte screen for PTY sessions."""

from __future__ import annotations

from collections import deque

import pyte
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from console.ansi import LineAssembler, plain, pyte_style, to_text
from engine.termtext import drawn

MAX_LINES = 5_000


class LinePane(ScrollView, can_focus=True):
    """Only the lines on screen are parsed and rendered (toolong/Log line API); the model is capped.

    Follows the tail while scrolled to the bottom; scrolling up stops following until the end again.
    """

    DEFAULT_CSS = """
    LinePane { background: $surface; }
    """

    def __init__(self, max_lines: int = MAX_LINES, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.assembler = LineAssembler()
        self._width = 0
        self._paint_style: Style | None = None  # set while one paint is under way
        self._scrollbars_stale = False  # cleared, not yet refilled: scrollbars still show the old content

    def clear(self, *, refill: bool = False) -> None:
        """Empty the pane. With `refill` (a session switch: cleared, then refilled from the log) its
        scrollbars stay as they are until the next feed or `settle_scrollbars`: hiding then showing the
        scrollbar in between laid out the whole screen twice on the key press."""
        self.lines.clear()
        self.assembler = LineAssembler()
        self._width = 0
        if refill:
            self.set_reactive(Widget.virtual_size, Size(0, 0))
            self._scrollbars_stale = True
        else:
            self._resize_content(Size(0, 0))
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    def settle_scrollbars(self) -> None:
        """The refill after `clear(refill=True)` did not come: show the scrollbars of what the pane holds."""
        if self._scrollbars_stale:
            self._resize_content(self.virtual_size)

    def feed(self, data: str) -> None:
        """Append raw output (any size: the deque drops what no longer fits)."""
        follow = self.is_vertical_scroll_end or self.max_scroll_y == 0
        new = self.assembler.feed(data)
        if new:
            if len(new) > (self.lines.maxlen or MAX_LINES):
                new = new[-(self.lines.maxlen or MAX_LINES) :]
            self.lines.extend(new)
            for line in new[-200:]:
                self._width = max(self._width, len(plain(line)))
        height = len(self.lines) + (1 if self.assembler.partial else 0)
        self._resize_content(Size(self._width, height))
        if follow:
            self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)
        self.refresh()

    def _resize_content(self, size: Size) -> None:
        """Set the scrollable size without a screen layout. `virtual_size` is a layout reactive: assigned on
        every feed, it relaid and repainted the whole screen (list, tabs, footer) at the output rate. The
        pane's own size never depends on its content; only its scrollbars do, and showing or hiding one
        still triggers the layout it needs."""
        if size == self.virtual_size and not self._scrollbars_stale:
            return
        self._scrollbars_stale = False
        self.set_reactive(Widget.virtual_size, size)
        self._scroll_update(size)

    def text_lines(self) -> list[str]:
        """What the pane holds, without colour (tests and snapshots)."""
        rows = [plain(line) for line in self.lines]
        if self.assembler.partial:
            rows.append(plain(self.assembler.partial))
        return rows

    def render_lines(self, crop: Region) -> list[Strip]:
        # The widget's style walks every ancestor's CSS (~0.3 ms); one paint needs it once, not per line.
        self._paint_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._paint_style = None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        style = self._paint_style or self.rich_style
        if index < len(self.lines):
            line = self.lines[index]
        elif index == len(self.lines) and self.assembler.partial:
            line = self.assembler.partial
        else:
            return Strip.blank(width, style)
        text = to_text(line)
        strip = Strip(text.render(self.app.console), text.cell_len)
        return strip.crop_extend(scroll_x, scroll_x + width, style)


class TerminalPane(Widget, can_focus=True):
    """A PTY session as a terminal: colours, cursor moves and `\\r` overwrite through pyte.

    pyte is slow (≈0.3 MB/s), so it is fed only while visible and only dirty rows are re-rendered.
    """

    DEFAULT_CSS = """
    TerminalPane { background: $surface; }
    """

    def __init__(self, cols: int = 120, rows: int = 40, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.screen_model = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.screen_model)
        self._cache: dict[int, Strip] = {}

    def reset(self, cols: int, rows: int) -> None:
        self.screen_model = pyte.Screen(max(cols, 2), max(rows, 2))
        self.stream = pyte.Stream(self.screen_model)
        self._cache.clear()
        self.refresh()

    def feed(self, data: str) -> None:
        self.stream.feed(data)
        for row in self.screen_model.dirty:
            self._cache.pop(row, None)
        self.screen_model.dirty.clear()
        self._cache.pop(self.screen_model.cursor.y, None)
        self.refresh()

    def text_lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen_model.display]

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return int(self.screen_model.lines)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y >= self.screen_model.lines:
            return Strip.blank(width)
        strip = self._cache.get(y)
        if strip is None:
            strip = self._cache[y] = self._render_row(y)
        return strip.crop_extend(0, width, None)

    def _render_row(self, y: int) -> Strip:
        model = self.screen_model
        row = model.buffer[y]
        cursor = model.cursor
        segments: list[Segment] = []
        run: list[str] = []
        run_style: Style | None = None
        for x in range(model.columns):
            char = row[x]
            style = pyte_style(
                char.fg, char.bg, char.bold, char.italics, char.underscore, char.strikethrough, char.reverse
            )
            if y == cursor.y and x == cursor.x and not cursor.hidden:
                style = style + Style(reverse=True)
            if style != run_style and run:
                segments.append(Segment("".join(run), run_style))
                run = []
            run_style = style
            run.append(char.data if char.data and drawn(char.data) else " ")
        if run:
            segments.append(Segment("".join(run), run_style))
        return Strip(segments, model.columns)
